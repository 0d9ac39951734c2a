"""orchestrator: reproducible, container-based release builds for fast Rust binaries."""

__version__ = "0.1.0"
