"""The pipeline every step runs on (containers, the shared volume, command running, the
state handed from step to step), the stores a step reuses from (step cache, profiles), and
the steps that make the build's inputs: images, toolchain check, glibc view, crates."""
