"""Typed records of every file orchestrator writes and reads back (build.json, the cache's
records, compose.json, release.lock, release.json, logs/, target.json, a training bundle's
manifest, SHA256SUMS) and of the JSON documents the commands print with `--json`."""
