"""What decides whether and which variant ships, pure: the tools' reports read (callgrind
counts, llvm-bolt, llvm-profdata, a failed `cargo test`), the validation gate (outputs
equal the baseline's) and the speed gate (per variant, per workload, per binary)."""
