//! HIP through its runtime (libamdhip64, installed with ROCm): load the embedded code
//! object bundle (one entry per gfx target), keep the weights on the device, run `matvec`.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::Mutex;

use super::{DeviceState, Embedded, Library, THREADS_PER_BLOCK};
use crate::backend::Accelerator;

const BUNDLE_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/matvec.hsaco"));

/// The code object bundle hipcc made from kernels/matvec.hip, where HIP keeps device code.
#[link_section = ".hip_fatbin"]
#[used]
static BUNDLE: Embedded<[u8; BUNDLE_BYTES.len()]> =
    Embedded(*include_bytes!(concat!(env!("OUT_DIR"), "/matvec.hsaco")));

type HipError = c_int;
type Device = c_int;
type Module = *mut c_void;
type Function = *mut c_void;
type DevicePtr = u64; // a device pointer, kept as an integer like CUDA's

#[derive(Clone, Copy)]
struct Api {
    init: unsafe extern "C" fn(c_uint) -> HipError,
    get_device_count: unsafe extern "C" fn(*mut c_int) -> HipError,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, Device) -> HipError,
    set_device: unsafe extern "C" fn(Device) -> HipError,
    module_load_data: unsafe extern "C" fn(*mut Module, *const c_void) -> HipError,
    module_get_function: unsafe extern "C" fn(*mut Function, Module, *const c_char) -> HipError,
    mem_alloc: unsafe extern "C" fn(*mut DevicePtr, usize) -> HipError,
    mem_free: unsafe extern "C" fn(DevicePtr) -> HipError,
    memcpy_htod: unsafe extern "C" fn(DevicePtr, *const c_void, usize) -> HipError,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, DevicePtr, usize) -> HipError,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
        Function,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> HipError,
}

pub struct Hip {
    _library: Library,
    api: Api,
    device: Device,
    function: usize,
    name: String,
    state: Mutex<DeviceState>,
}

fn check(result: HipError, what: &str) -> Result<(), String> {
    // The runtime's codes a user can act on; the rest by number (see hip_runtime_api.h).
    let name = match result {
        0 => return Ok(()),
        2 => "hipErrorOutOfMemory",
        35 => "hipErrorInsufficientDriver",
        100 => "hipErrorNoDevice: no AMD GPU is visible",
        209 => "hipErrorNoBinaryForGpu: the binary carries no code object for this GPU",
        _ => "",
    };
    Err(format!("HIP {what} failed with error {result} {name}")
        .trim_end()
        .to_string())
}

impl Hip {
    pub fn open() -> Result<Self, String> {
        let library =
            Library::open_first(&["libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"])
                .map_err(|e| format!("no HIP runtime: {e}"))?;
        // SAFETY: each type below is the HIP runtime's documented signature.
        let api = unsafe {
            Api {
                init: library.symbol("hipInit")?,
                get_device_count: library.symbol("hipGetDeviceCount")?,
                device_get_name: library.symbol("hipDeviceGetName")?,
                set_device: library.symbol("hipSetDevice")?,
                module_load_data: library.symbol("hipModuleLoadData")?,
                module_get_function: library.symbol("hipModuleGetFunction")?,
                mem_alloc: library.symbol("hipMalloc")?,
                mem_free: library.symbol("hipFree")?,
                memcpy_htod: library.symbol("hipMemcpyHtoD")?,
                memcpy_dtoh: library.symbol("hipMemcpyDtoH")?,
                launch_kernel: library.symbol("hipModuleLaunchKernel")?,
            }
        };
        unsafe {
            check((api.init)(0), "hipInit")?;
            let mut count: c_int = 0;
            check((api.get_device_count)(&mut count), "hipGetDeviceCount")?;
            if count < 1 {
                return Err("no HIP device".into());
            }
            let device: Device = 0;
            check((api.set_device)(device), "hipSetDevice")?;
            let mut raw_name = [0 as c_char; 256];
            check(
                (api.device_get_name)(raw_name.as_mut_ptr(), 256, device),
                "hipDeviceGetName",
            )?;
            let name = std::ffi::CStr::from_ptr(raw_name.as_ptr())
                .to_string_lossy()
                .into_owned();
            let mut module: Module = std::ptr::null_mut();
            let image = BUNDLE.0.as_ptr().cast::<c_void>();
            check(
                (api.module_load_data)(&mut module, image),
                "loading the embedded code objects",
            )?;
            let mut function: Function = std::ptr::null_mut();
            let symbol = CString::new("matvec").expect("no NUL");
            check(
                (api.module_get_function)(&mut function, module, symbol.as_ptr()),
                "hipModuleGetFunction",
            )?;
            Ok(Self {
                _library: library,
                api,
                device,
                function: function as usize,
                name,
                state: Mutex::new(DeviceState::default()),
            })
        }
    }

    /// A device buffer of at least `bytes`, reusing `slot` when it is large enough.
    unsafe fn buffer(&self, slot: &mut (u64, usize), bytes: usize) -> Result<u64, String> {
        if slot.1 < bytes {
            if slot.1 > 0 {
                check((self.api.mem_free)(slot.0), "hipFree")?;
            }
            let mut pointer: DevicePtr = 0;
            check((self.api.mem_alloc)(&mut pointer, bytes), "hipMalloc")?;
            *slot = (pointer, bytes);
        }
        Ok(slot.0)
    }
}

impl Accelerator for Hip {
    fn describe(&self) -> String {
        format!(
            "rocm: {} (gfx targets embedded: {})",
            self.name,
            env!("TINYLLM_AMDGPU_TARGETS")
        )
    }

    fn matvec(&self, out: &mut [f32], w: &[f32], x: &[f32]) -> Result<(), String> {
        let mut state = self.state.lock().map_err(|_| "HIP state poisoned")?;
        let state = &mut *state;
        unsafe {
            check((self.api.set_device)(self.device), "hipSetDevice")?;
            let key = (w.as_ptr() as usize, w.len());
            let weights = match state.weights.get(&key) {
                Some(&pointer) => pointer,
                None => {
                    let mut pointer: DevicePtr = 0;
                    check(
                        (self.api.mem_alloc)(&mut pointer, std::mem::size_of_val(w)),
                        "hipMalloc",
                    )?;
                    check(
                        (self.api.memcpy_htod)(
                            pointer,
                            w.as_ptr().cast(),
                            std::mem::size_of_val(w),
                        ),
                        "uploading weights",
                    )?;
                    state.weights.insert(key, pointer);
                    pointer
                }
            };
            let mut x_slot = state.x;
            let mut out_slot = state.out;
            let mut x_device = self.buffer(&mut x_slot, std::mem::size_of_val(x))?;
            let mut out_device = self.buffer(&mut out_slot, std::mem::size_of_val(out))?;
            state.x = x_slot;
            state.out = out_slot;
            check(
                (self.api.memcpy_htod)(x_device, x.as_ptr().cast(), std::mem::size_of_val(x)),
                "uploading x",
            )?;
            let mut weights_arg = weights;
            let mut rows = out.len() as c_uint;
            let mut cols = x.len() as c_uint;
            let mut params: [*mut c_void; 5] = [
                (&mut out_device as *mut u64).cast(),
                (&mut weights_arg as *mut u64).cast(),
                (&mut x_device as *mut u64).cast(),
                (&mut rows as *mut c_uint).cast(),
                (&mut cols as *mut c_uint).cast(),
            ];
            check(
                (self.api.launch_kernel)(
                    self.function as Function,
                    rows,
                    1,
                    1,
                    THREADS_PER_BLOCK,
                    1,
                    1,
                    0,
                    std::ptr::null_mut(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
                "launching matvec",
            )?;
            // synchronous copy: also waits for the kernel
            check(
                (self.api.memcpy_dtoh)(
                    out.as_mut_ptr().cast(),
                    out_device,
                    std::mem::size_of_val(out),
                ),
                "downloading out",
            )?;
        }
        Ok(())
    }
}
