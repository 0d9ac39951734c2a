//! HIP through its runtime (libamdhip64, installed with ROCm): find a device, make it
//! current, load the embedded code object bundle (one entry per gfx target).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint};

use super::{c_name, Device, Embedded, KernelCalls, Library, Status};
use crate::backend::Accelerator;

const BUNDLE_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/matvec.hsaco"));

/// The code object bundle hipcc made from kernels/matvec.hip, where HIP keeps device code.
#[link_section = ".hip_fatbin"]
#[used]
static BUNDLE: Embedded<[u8; BUNDLE_BYTES.len()]> =
    Embedded(*include_bytes!(concat!(env!("OUT_DIR"), "/matvec.hsaco")));

pub struct Hip {
    _library: Library,
    name: String,
    device: Device,
}

fn check(result: Status, what: &str) -> Result<(), String> {
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
        // SAFETY: each type is the HIP runtime's documented signature for that symbol.
        unsafe {
            let init: unsafe extern "C" fn(c_uint) -> Status = library.symbol("hipInit")?;
            let device_count: unsafe extern "C" fn(*mut c_int) -> Status =
                library.symbol("hipGetDeviceCount")?;
            let device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> Status =
                library.symbol("hipDeviceGetName")?;
            let set_device: unsafe extern "C" fn(c_int) -> Status =
                library.symbol("hipSetDevice")?;
            let calls = KernelCalls::load(
                &library,
                [
                    "hipModuleLoadData",
                    "hipModuleGetFunction",
                    "hipMalloc",
                    "hipFree",
                    "hipMemcpyHtoD",
                    "hipMemcpyDtoH",
                    "hipModuleLaunchKernel",
                ],
            )?;
            check(init(0), "hipInit")?;
            let mut count: c_int = 0;
            check(device_count(&mut count), "hipGetDeviceCount")?;
            if count < 1 {
                return Err("no HIP device".into());
            }
            let make_current = Box::new(move || check(set_device(0), "hipSetDevice"));
            make_current()?;
            let mut raw_name = [0 as c_char; 256];
            check(
                device_get_name(raw_name.as_mut_ptr(), 256, 0),
                "hipDeviceGetName",
            )?;
            let device = Device::load(calls, check, make_current, &BUNDLE.0)?;
            Ok(Self {
                _library: library,
                name: c_name(&raw_name),
                device,
            })
        }
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
        self.device.matvec(out, w, x)
    }
}
