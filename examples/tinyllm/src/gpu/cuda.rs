//! CUDA through the driver API (libcuda.so.1, installed with the NVIDIA driver): find a
//! device, make its primary context current, load the embedded fatbin.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::{c_name, Device, Embedded, KernelCalls, Library, Status};
use crate::backend::Accelerator;

const FATBIN_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/matvec.fatbin"));

/// The fatbin nvcc made from kernels/matvec.cu, in the section cuobjdump reads.
#[link_section = ".nv_fatbin"]
#[used]
static FATBIN: Embedded<[u8; FATBIN_BYTES.len()]> =
    Embedded(*include_bytes!(concat!(env!("OUT_DIR"), "/matvec.fatbin")));

type Context = *mut c_void;

pub struct Cuda {
    _library: Library,
    name: String,
    device: Device,
}

fn check(result: Status, what: &str) -> Result<(), String> {
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
        // SAFETY: each type is the driver API's documented signature for that symbol.
        unsafe {
            let init: unsafe extern "C" fn(c_uint) -> Status = library.symbol("cuInit")?;
            let device_get: unsafe extern "C" fn(*mut c_int, c_int) -> Status =
                library.symbol("cuDeviceGet")?;
            let device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> Status =
                library.symbol("cuDeviceGetName")?;
            let retain: unsafe extern "C" fn(*mut Context, c_int) -> Status =
                library.symbol("cuDevicePrimaryCtxRetain")?;
            let set_current: unsafe extern "C" fn(Context) -> Status =
                library.symbol("cuCtxSetCurrent")?;
            let calls = KernelCalls::load(
                &library,
                [
                    "cuModuleLoadData",
                    "cuModuleGetFunction",
                    "cuMemAlloc_v2",
                    "cuMemFree_v2",
                    "cuMemcpyHtoD_v2",
                    "cuMemcpyDtoH_v2",
                    "cuLaunchKernel",
                ],
            )?;
            check(init(0), "cuInit")?;
            let mut ordinal: c_int = 0;
            check(device_get(&mut ordinal, 0), "cuDeviceGet")?;
            let mut raw_name = [0 as c_char; 256];
            check(
                device_get_name(raw_name.as_mut_ptr(), 256, ordinal),
                "cuDeviceGetName",
            )?;
            let mut context: Context = std::ptr::null_mut();
            check(retain(&mut context, ordinal), "cuDevicePrimaryCtxRetain")?;
            let context = context as usize; // a handle valid in every thread
            let make_current =
                Box::new(move || check(set_current(context as Context), "cuCtxSetCurrent"));
            make_current()?;
            let device = Device::load(calls, check, make_current, &FATBIN.0)?;
            Ok(Self {
                _library: library,
                name: c_name(&raw_name),
                device,
            })
        }
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
        self.device.matvec(out, w, x)
    }
}
