//! CUDA through the driver API (libcuda.so.1, installed with the NVIDIA driver): load the
//! embedded fatbin, keep the weights on the device, run `matvec` per matmul.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::Mutex;

use super::{DeviceState, Embedded, Library, THREADS_PER_BLOCK};
use crate::backend::Accelerator;

const FATBIN_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/matvec.fatbin"));

/// The fatbin nvcc made from kernels/matvec.cu, in the section cuobjdump reads.
#[link_section = ".nv_fatbin"]
#[used]
static FATBIN: Embedded<[u8; FATBIN_BYTES.len()]> =
    Embedded(*include_bytes!(concat!(env!("OUT_DIR"), "/matvec.fatbin")));

type CuResult = c_int;
type Device = c_int;
type Context = *mut c_void;
type Module = *mut c_void;
type Function = *mut c_void;
type DevicePtr = u64;

#[derive(Clone, Copy)]
struct Api {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut Device, c_int) -> CuResult,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, Device) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut Context, Device) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(Context) -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut Module, *const c_void) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut Function, Module, *const c_char) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut DevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(DevicePtr) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(DevicePtr, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, DevicePtr, usize) -> CuResult,
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
    ) -> CuResult,
}

pub struct Cuda {
    _library: Library,
    api: Api,
    context: usize,
    function: usize,
    name: String,
    state: Mutex<DeviceState>,
}

fn check(result: CuResult, what: &str) -> Result<(), String> {
    // The driver's codes a user can act on; the rest by number (see cuda.h).
    let name = match result {
        0 => return Ok(()),
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        34 => "CUDA_ERROR_STUB_LIBRARY: libcuda.so.1 is the toolkit's stub, not a driver",
        35 => "CUDA_ERROR_INSUFFICIENT_DRIVER: the driver is older than this code needs",
        100 => "CUDA_ERROR_NO_DEVICE: no CUDA-capable GPU is visible",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        209 => "CUDA_ERROR_NO_BINARY_FOR_GPU: the binary carries no code for this GPU",
        222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the driver is older than the embedded PTX",
        _ => "",
    };
    Err(format!("CUDA {what} failed with error {result} {name}")
        .trim_end()
        .to_string())
}

impl Cuda {
    pub fn open() -> Result<Self, String> {
        let library = Library::open_first(&["libcuda.so.1", "libcuda.so"])
            .map_err(|e| format!("no CUDA driver: {e}"))?;
        // SAFETY: each type below is the driver API's documented signature.
        let api = unsafe {
            Api {
                init: library.symbol("cuInit")?,
                device_get: library.symbol("cuDeviceGet")?,
                device_get_name: library.symbol("cuDeviceGetName")?,
                primary_ctx_retain: library.symbol("cuDevicePrimaryCtxRetain")?,
                ctx_set_current: library.symbol("cuCtxSetCurrent")?,
                module_load_data: library.symbol("cuModuleLoadData")?,
                module_get_function: library.symbol("cuModuleGetFunction")?,
                mem_alloc: library.symbol("cuMemAlloc_v2")?,
                mem_free: library.symbol("cuMemFree_v2")?,
                memcpy_htod: library.symbol("cuMemcpyHtoD_v2")?,
                memcpy_dtoh: library.symbol("cuMemcpyDtoH_v2")?,
                launch_kernel: library.symbol("cuLaunchKernel")?,
            }
        };
        unsafe {
            check((api.init)(0), "cuInit")?;
            let mut device: Device = 0;
            check((api.device_get)(&mut device, 0), "cuDeviceGet")?;
            let mut raw_name = [0 as c_char; 256];
            check(
                (api.device_get_name)(raw_name.as_mut_ptr(), 256, device),
                "cuDeviceGetName",
            )?;
            let name = std::ffi::CStr::from_ptr(raw_name.as_ptr())
                .to_string_lossy()
                .into_owned();
            let mut context: Context = std::ptr::null_mut();
            check(
                (api.primary_ctx_retain)(&mut context, device),
                "cuDevicePrimaryCtxRetain",
            )?;
            check((api.ctx_set_current)(context), "cuCtxSetCurrent")?;
            let mut module: Module = std::ptr::null_mut();
            let image = FATBIN.0.as_ptr().cast::<c_void>();
            check(
                (api.module_load_data)(&mut module, image),
                "loading the embedded fatbin",
            )?;
            let mut function: Function = std::ptr::null_mut();
            let symbol = CString::new("matvec").expect("no NUL");
            check(
                (api.module_get_function)(&mut function, module, symbol.as_ptr()),
                "cuModuleGetFunction",
            )?;
            Ok(Self {
                _library: library,
                api,
                context: context as usize,
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
                check((self.api.mem_free)(slot.0), "cuMemFree")?;
            }
            let mut pointer: DevicePtr = 0;
            check((self.api.mem_alloc)(&mut pointer, bytes), "cuMemAlloc")?;
            *slot = (pointer, bytes);
        }
        Ok(slot.0)
    }
}

impl Accelerator for Cuda {
    fn describe(&self) -> String {
        format!(
            "cuda: {} (sm targets embedded: {})",
            self.name,
            env!("TINYLLM_CUDA_ARCHS")
        )
    }

    fn matvec(&self, out: &mut [f32], w: &[f32], x: &[f32]) -> Result<(), String> {
        let mut state = self.state.lock().map_err(|_| "CUDA state poisoned")?;
        let state = &mut *state;
        unsafe {
            check(
                (self.api.ctx_set_current)(self.context as Context),
                "cuCtxSetCurrent",
            )?;
            let key = (w.as_ptr() as usize, w.len());
            let weights = match state.weights.get(&key) {
                Some(&pointer) => pointer,
                None => {
                    let mut pointer: DevicePtr = 0;
                    check(
                        (self.api.mem_alloc)(&mut pointer, std::mem::size_of_val(w)),
                        "cuMemAlloc",
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
