"""`orchestrator init` and the runs it proposes: a first orchestrator.toml scaffolded from
the crate, its workloads found by reading the crate (command lines in its documents, its
clap definitions) and vetted for hazards, and the check, before every build, that the
configured runs can work (no placeholder left, every file they name present)."""
