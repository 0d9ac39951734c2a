"""From orchestrator.toml, the environment and the flags to one frozen `Options`: the
layers and each value's source, the checks across settings and the typos refused, the
per-flavor overrides, and what resolving reads besides: the crate's Cargo files, the pinned
toolchains and the CPU names their rustc knows, `ci.install`, `[archive] include`."""
