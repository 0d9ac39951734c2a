//! GPU runtimes, loaded with dlopen at run time: the binary links no GPU library, so it
//! starts (and runs on the CPU) on machines without a driver. The kernels are embedded
//! by build.rs, in the sections where the vendors' tools look for device code.
#![allow(unsafe_code)]

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "rocm")]
pub mod hip;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Mutex;

/// Device code, aligned as the driver loaders expect of an in-memory image.
#[repr(C, align(4096))]
pub struct Embedded<T: ?Sized>(pub T);

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;

/// A shared library opened for good (never closed: the process uses it until exit).
pub struct Library(*mut c_void);

// The handle is only used to look symbols up, which dlsym allows from any thread.
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

impl Library {
    pub fn open_first(names: &[&str]) -> Result<Self, String> {
        let mut errors = Vec::new();
        for name in names {
            let c_name = CString::new(*name).expect("library names have no NUL");
            // SAFETY: dlopen with a valid C string; a null result is handled below.
            let handle = unsafe { dlopen(c_name.as_ptr(), RTLD_NOW) };
            if !handle.is_null() {
                return Ok(Self(handle));
            }
            errors.push(last_dl_error());
        }
        Err(errors.join("; "))
    }

    /// # Safety
    /// `T` must be the `extern "C" fn` type of the symbol named `name`.
    pub unsafe fn symbol<T: Copy>(&self, name: &str) -> Result<T, String> {
        assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
        let c_name = CString::new(name).expect("symbol names have no NUL");
        let address = dlsym(self.0, c_name.as_ptr());
        if address.is_null() {
            return Err(format!("{name}: {}", last_dl_error()));
        }
        Ok(std::mem::transmute_copy::<*mut c_void, T>(&address))
    }
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns null or a C string valid until the next dl call.
    let text = unsafe { dlerror() };
    if text.is_null() {
        "unknown dlopen error".into()
    } else {
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

/// What a device keeps between calls: the weights it already holds, keyed by their host
/// address and length (model weights live, unchanged, for the whole process), and
/// reusable buffers for the input and output vectors.
#[derive(Default)]
pub struct DeviceState {
    pub weights: HashMap<(usize, usize), u64>,
    pub x: (u64, usize),
    pub out: (u64, usize),
}

pub type SharedState = Mutex<DeviceState>;

pub const THREADS_PER_BLOCK: u32 = 256; // matches MATVEC_THREADS in kernels/
