"""A release pinned and rebuilt: release.lock and the vault written after a release
(`pin`), and a rebuild from them, offline, bit for bit (`reproduce`), from the locked config
and crate laid out again (`locked_sources`)."""
