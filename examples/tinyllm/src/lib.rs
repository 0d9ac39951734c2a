//! A tiny llama-style transformer whose weights come from a seed, with the pipeline an
//! inference engine runs around it: a byte-level BPE tokenizer trained on text generated
//! from the same seed, a temperature / top-k / top-p sampler, and detokenization.
//!
//! The crate is a CPU-bound benchmark for release-build tooling, so its output is a
//! contract: every reduction has a fixed summation order, nothing can be fused into an
//! FMA, no libm function is called, and no hash map is ever iterated. The same command
//! therefore prints the same bits for any opt-level, `target-cpu`, or thread count.
//!
//! Build with `--features phase-times` to have `bench` print to stderr how its time splits
//! between tokenizer training, encoding, matmul, the rest of the model, sampling and
//! decoding.

pub mod backend;
pub mod cli;
#[cfg(any(feature = "cuda", feature = "rocm"))]
pub mod gpu;
pub mod math;
pub mod model;
pub mod ops;
pub mod phases;
pub mod rng;
pub mod sampler;
pub mod text;
pub mod tokenizer;
pub mod workload;
