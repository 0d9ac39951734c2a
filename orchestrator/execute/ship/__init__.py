"""What leaves the build: extract and publish, build.json, the SBOM inventory, the
archives and the files they hold, and the CPU-level dispatcher (C source and its build)."""
