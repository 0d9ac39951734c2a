//! Compiles the GPU kernels when the `cuda` or `rocm` feature is on: nvcc makes a fatbin
//! with code for every sm in CUDAARCHS, hipcc a code object bundle with one entry per gfx
//! target in AMDGPU_TARGETS. The result is embedded in the binary (see src/gpu), which
//! loads it through the driver at run time, so the binary needs no GPU library to start.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const DEFAULT_CUDA_ARCHS: &str = "80;86;89;90";
const DEFAULT_AMDGPU_TARGETS: &str = "gfx90a;gfx1030;gfx1100";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The CLI tests spawn the binary; a cross build's tests must do it through the runner.
    let target = env::var("TARGET").expect("cargo sets TARGET");
    println!("cargo:rustc-env=TINYLLM_TARGET={target}");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    if env::var_os("CARGO_FEATURE_CUDA").is_some() {
        build_cuda(&manifest_dir, &out_dir);
    }
    if env::var_os("CARGO_FEATURE_ROCM").is_some() {
        build_rocm(&manifest_dir, &out_dir);
    }
}

fn list(var: &str, default: &str) -> Vec<String> {
    println!("cargo:rerun-if-env-changed={var}");
    let value = env::var(var).unwrap_or_else(|_| default.to_string());
    let items: Vec<String> = value
        .split([';', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    assert!(!items.is_empty(), "{var} lists no GPU targets");
    items
}

/// Source paths in the device code must not depend on where the crate was built.
fn prefix_map(manifest_dir: &Path) -> String {
    format!("-ffile-prefix-map={}=tinyllm", manifest_dir.display())
}

fn run(mut command: Command, what: &str) {
    eprintln!("running {command:?}");
    let status = command.status().unwrap_or_else(|e| {
        panic!(
            "{what}: cannot run {:?}: {e}; the feature needs that compiler on PATH",
            command.get_program()
        )
    });
    assert!(status.success(), "{what} failed: {status}");
}

fn build_cuda(manifest_dir: &Path, out_dir: &Path) {
    let source = manifest_dir.join("kernels/matvec.cu");
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-env-changed=NVCC");
    let archs: Vec<String> = list("CUDAARCHS", DEFAULT_CUDA_ARCHS)
        .into_iter()
        .map(|a| a.trim_start_matches("sm_").to_string())
        .collect();
    let nvcc = env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    let mut command = Command::new(nvcc);
    command.arg("-fatbin").arg("-O3");
    for arch in &archs {
        command.arg(format!("-gencode=arch=compute_{arch},code=sm_{arch}"));
    }
    // PTX of the newest arch too, so GPUs newer than the list can JIT it.
    let newest = archs.last().expect("at least one arch");
    command.arg(format!(
        "-gencode=arch=compute_{newest},code=compute_{newest}"
    ));
    command.arg(format!("-Xcompiler={}", prefix_map(manifest_dir)));
    command
        .arg("-o")
        .arg(out_dir.join("matvec.fatbin"))
        .arg(&source);
    run(command, "nvcc");
    println!(
        "cargo:rustc-env=TINYLLM_CUDA_ARCHS={}",
        archs
            .iter()
            .map(|a| format!("sm_{a}"))
            .collect::<Vec<_>>()
            .join(",")
    );
}

fn build_rocm(manifest_dir: &Path, out_dir: &Path) {
    let source = manifest_dir.join("kernels/matvec.hip");
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-env-changed=HIPCC");
    let targets = list("AMDGPU_TARGETS", DEFAULT_AMDGPU_TARGETS);
    let hipcc = env::var("HIPCC").unwrap_or_else(|_| "hipcc".into());
    let mut command = Command::new(hipcc);
    command
        .arg("--genco")
        .arg("-O3")
        .arg(prefix_map(manifest_dir));
    for target in &targets {
        command.arg(format!("--offload-arch={target}"));
    }
    command
        .arg("-o")
        .arg(out_dir.join("matvec.hsaco"))
        .arg(&source);
    run(command, "hipcc");
    println!(
        "cargo:rustc-env=TINYLLM_AMDGPU_TARGETS={}",
        targets.join(",")
    );
}
