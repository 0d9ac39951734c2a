//! A tiny llama-style transformer whose weights come from a seed.
//!
//! The crate is a CPU-bound benchmark for release-build tooling, so its output is a
//! contract: every reduction has a fixed summation order, nothing can be fused into an
//! FMA, and no libm function is called. The same command therefore prints the same bits
//! for any opt-level, `target-cpu`, or thread count.

pub mod cli;
pub mod math;
pub mod model;
pub mod ops;
pub mod phases;
pub mod rng;
pub mod sampler;
pub mod text;
pub mod tokenizer;
pub mod workload;
