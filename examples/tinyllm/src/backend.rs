//! Where matmuls run: the CPU, or a GPU through the kernels the `cuda` / `rocm` features
//! embed. The choice is made once, at start-up; `auto` takes a GPU when its driver and a
//! device are present and otherwise stays on the CPU, so one binary runs everywhere.

use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    Cuda,
    Rocm,
    Auto,
}

impl Backend {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda),
            "rocm" => Ok(Self::Rocm),
            "auto" => Ok(Self::Auto),
            _ => Err(format!(
                "--backend: expected cpu, cuda, rocm or auto, got '{text}'"
            )),
        }
    }
}

/// A device that computes `out = W x`; `W` is uploaded once and kept on the device.
pub trait Accelerator: Send + Sync {
    fn describe(&self) -> String;
    fn matvec(&self, out: &mut [f32], w: &[f32], x: &[f32]) -> Result<(), String>;
}

static SELECTED: OnceLock<Option<Box<dyn Accelerator>>> = OnceLock::new();

/// The GPU backends this binary was built with, and their targets.
pub fn compiled() -> Vec<String> {
    [
        Some("cpu".to_string()),
        #[cfg(feature = "cuda")]
        Some(format!("cuda[{}]", env!("TINYLLM_CUDA_ARCHS"))),
        #[cfg(feature = "rocm")]
        Some(format!("rocm[{}]", env!("TINYLLM_AMDGPU_TARGETS"))),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Picks the backend; returns a line describing it when a GPU was chosen.
pub fn select(wanted: Backend) -> Result<Option<String>, String> {
    let accelerator = match wanted {
        Backend::Cpu => None,
        Backend::Cuda => Some(open_cuda()?),
        Backend::Rocm => Some(open_rocm()?),
        Backend::Auto => open_cuda().or_else(|_| open_rocm()).ok(),
    };
    let line = accelerator.as_ref().map(|a| a.describe());
    SELECTED
        .set(accelerator)
        .map_err(|_| "the backend was already selected".to_string())?;
    Ok(line)
}

/// The GPU to run matmuls on, if one was selected.
pub fn accelerator() -> Option<&'static dyn Accelerator> {
    SELECTED.get().and_then(|a| a.as_deref())
}

fn open_cuda() -> Result<Box<dyn Accelerator>, String> {
    #[cfg(feature = "cuda")]
    {
        crate::gpu::cuda::Cuda::open().map(|c| Box::new(c) as Box<dyn Accelerator>)
    }
    #[cfg(not(feature = "cuda"))]
    Err("this binary was built without CUDA kernels (cargo feature `cuda`)".into())
}

fn open_rocm() -> Result<Box<dyn Accelerator>, String> {
    #[cfg(feature = "rocm")]
    {
        crate::gpu::hip::Hip::open().map(|h| Box::new(h) as Box<dyn Accelerator>)
    }
    #[cfg(not(feature = "rocm"))]
    Err("this binary was built without HIP kernels (cargo feature `rocm`)".into())
}
