//! GPU runtimes, loaded with dlopen at run time: the binary links no GPU library, so it
//! starts (and runs on the CPU) on machines without a driver. The kernels are embedded
//! by build.rs, in the sections where the vendors' tools look for device code.
//!
//! CUDA's driver API and HIP's module API have the same shape for everything `matvec`
//! needs (module loading, memory, launches), so that part is written once, here; the
//! runtime modules only find a device and make it current.
#![allow(unsafe_code)]

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "rocm")]
pub mod hip;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::Mutex;

/// Device code, aligned as the runtimes' loaders expect of an in-memory image.
#[repr(C, align(4096))]
pub struct Embedded<T: ?Sized>(pub T);

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;
const THREADS_PER_BLOCK: c_uint = 256; // MATVEC_THREADS in kernels/

/// A runtime call's status: 0 is success in both runtimes.
pub type Status = c_int;
/// Turns a status into a message naming the call (each runtime names its own codes).
pub type Check = fn(Status, &str) -> Result<(), String>;

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

/// A device name filled in by the runtime.
pub fn c_name(raw: &[c_char]) -> String {
    // SAFETY: the runtime wrote a NUL-terminated string into the zeroed buffer.
    unsafe { CStr::from_ptr(raw.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

type Module = *mut c_void;
type Function = *mut c_void;
type Launch = unsafe extern "C" fn(
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
) -> Status;

/// The calls `matvec` makes, by each runtime's names for them.
#[derive(Clone, Copy)]
pub struct KernelCalls {
    module_load_data: unsafe extern "C" fn(*mut Module, *const c_void) -> Status,
    module_get_function: unsafe extern "C" fn(*mut Function, Module, *const c_char) -> Status,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> Status,
    mem_free: unsafe extern "C" fn(u64) -> Status,
    memcpy_htod: unsafe extern "C" fn(u64, *const c_void, usize) -> Status,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> Status,
    launch_kernel: Launch,
}

impl KernelCalls {
    /// Looks up, in this order: module load from memory, get function, alloc, free,
    /// copy to device, copy to host, launch.
    ///
    /// # Safety
    /// The names must be the runtime's symbols with exactly these signatures (CUDA's
    /// driver API and HIP's module API agree on them; device pointers are 64-bit).
    pub unsafe fn load(library: &Library, names: [&str; 7]) -> Result<Self, String> {
        Ok(Self {
            module_load_data: library.symbol(names[0])?,
            module_get_function: library.symbol(names[1])?,
            mem_alloc: library.symbol(names[2])?,
            mem_free: library.symbol(names[3])?,
            memcpy_htod: library.symbol(names[4])?,
            memcpy_dtoh: library.symbol(names[5])?,
            launch_kernel: library.symbol(names[6])?,
        })
    }
}

/// Buffers kept between calls: the weights already uploaded, keyed by host address and
/// length (model weights live, unchanged, for the whole process), and reusable
/// (pointer, capacity) buffers for the input and output vectors.
#[derive(Default)]
struct Buffers {
    weights: HashMap<(usize, usize), u64>,
    x: (u64, usize),
    out: (u64, usize),
}

/// The embedded kernel loaded on one device, ready for `matvec`.
pub struct Device {
    calls: KernelCalls,
    check: Check,
    /// Makes the device current for the calling thread (CUDA contexts are per thread).
    make_current: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
    function: usize,
    buffers: Mutex<Buffers>,
}

impl Device {
    /// Loads `image` (a fatbin or a code object bundle) and finds its `matvec`.
    ///
    /// # Safety
    /// The runtime must be initialised with its device current; `image` must outlive
    /// the process (it is a static).
    pub unsafe fn load(
        calls: KernelCalls,
        check: Check,
        make_current: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
        image: &'static [u8],
    ) -> Result<Self, String> {
        let mut module: Module = std::ptr::null_mut();
        check(
            (calls.module_load_data)(&mut module, image.as_ptr().cast()),
            "loading the embedded device code",
        )?;
        let mut function: Function = std::ptr::null_mut();
        let symbol = CString::new("matvec").expect("no NUL");
        check(
            (calls.module_get_function)(&mut function, module, symbol.as_ptr()),
            "finding matvec",
        )?;
        Ok(Self {
            calls,
            check,
            make_current,
            function: function as usize,
            buffers: Mutex::new(Buffers::default()),
        })
    }

    fn alloc(&self, bytes: usize) -> Result<u64, String> {
        let mut pointer = 0u64;
        // SAFETY: the runtime writes one device pointer.
        (self.check)(
            unsafe { (self.calls.mem_alloc)(&mut pointer, bytes) },
            "alloc",
        )?;
        Ok(pointer)
    }

    /// A buffer of at least `bytes`, reusing `slot` when it is large enough.
    fn buffer(&self, slot: &mut (u64, usize), bytes: usize) -> Result<u64, String> {
        if slot.1 < bytes {
            if slot.1 > 0 {
                // SAFETY: the old buffer came from `alloc` and is replaced below.
                (self.check)(unsafe { (self.calls.mem_free)(slot.0) }, "free")?;
            }
            *slot = (self.alloc(bytes)?, bytes);
        }
        Ok(slot.0)
    }

    fn upload(&self, device: u64, host: &[f32]) -> Result<(), String> {
        let bytes = std::mem::size_of_val(host);
        // SAFETY: `device` holds at least `bytes` (see `buffer`); `host` is readable.
        let status = unsafe { (self.calls.memcpy_htod)(device, host.as_ptr().cast(), bytes) };
        (self.check)(status, "upload")
    }

    /// `out = W x` on the device: W uploaded on first use and kept, x and out per call.
    pub fn matvec(&self, out: &mut [f32], w: &[f32], x: &[f32]) -> Result<(), String> {
        let mut guard = self.buffers.lock().map_err(|_| "GPU state poisoned")?;
        let buffers = &mut *guard;
        (self.make_current)()?;
        let key = (w.as_ptr() as usize, w.len());
        let weights = match buffers.weights.get(&key) {
            Some(&pointer) => pointer,
            None => {
                let pointer = self.alloc(std::mem::size_of_val(w))?;
                self.upload(pointer, w)?;
                buffers.weights.insert(key, pointer);
                pointer
            }
        };
        let mut x_device = self.buffer(&mut buffers.x, std::mem::size_of_val(x))?;
        let mut out_device = self.buffer(&mut buffers.out, std::mem::size_of_val(out))?;
        self.upload(x_device, x)?;
        let mut weights_arg = weights;
        let (mut rows, mut cols) = (out.len() as c_uint, x.len() as c_uint);
        let mut params: [*mut c_void; 5] = [
            (&mut out_device as *mut u64).cast(),
            (&mut weights_arg as *mut u64).cast(),
            (&mut x_device as *mut u64).cast(),
            (&mut rows as *mut c_uint).cast(),
            (&mut cols as *mut c_uint).cast(),
        ];
        // SAFETY: `params` matches matvec's signature in kernels/ and outlives the call;
        // one block of THREADS_PER_BLOCK threads per output row.
        let status = unsafe {
            (self.calls.launch_kernel)(
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
            )
        };
        (self.check)(status, "launching matvec")?;
        let bytes = std::mem::size_of_val(out);
        // SAFETY: `out` is writable for `bytes`; the copy waits for the kernel.
        let status =
            unsafe { (self.calls.memcpy_dtoh)(out.as_mut_ptr().cast(), out_device, bytes) };
        (self.check)(status, "download")
    }
}
