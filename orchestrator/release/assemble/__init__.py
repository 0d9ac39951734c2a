"""A release put together from folders: target folders built on other machines checked
and signed once (`release assemble`, the checks on every file and binary, the two-builder
rule), and the -auto folders composed around the CPU-level dispatcher (compiled and kept in
the cache, or carried in a target folder)."""
