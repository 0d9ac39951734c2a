"""Trust under faults, on real kernels and filesystems (no Docker needed): a disk that fills
up mid-publication leaves the previous release exactly as it was."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from orchestrator.errors import disk_full
from orchestrator.host.staging import staging_root
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey
from orchestrator.supply.verify import verify_release
from tests.unit.conftest import project as project  # noqa: PLC0414 - the fixture
from tests.unit.execute_rig import make_options
from tests.unit.publish_rig import extract_and_publish, ready_to_publish

DISK_BYTES = 4 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB filesystem (tmpfs): writes past it fail with ENOSPC, as on a full disk."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0755", "tmpfs", str(mount)],
        check=True,
    )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
        if p.name != "filler"
    }


def _leave_free(disk: Path, free: int) -> None:
    """Fill the disk so that about `free` bytes stay writable."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    available = shutil.disk_usage(disk).free
    with filler.open("wb") as handle:
        handle.write(b"\0" * max(0, available - free))


def test_a_full_disk_publishes_nothing_and_keeps_the_previous_release(
    project: Path, small_disk: Path, tmp_path: Path
) -> None:
    options = make_options(project)
    options = type(options)(**{**options.__dict__, "artifacts_dir": small_disk / "artifacts"})
    signer = Signer(SecretKey.generate(), True, "test key")
    with ExitStack() as stack:
        (tmp_path / "first").mkdir()
        extract_and_publish(ready_to_publish(options, stack, tmp_path / "first", signer))
    release = options.artifacts_dir / "demo-1.2.3"
    before = _snapshot(small_disk)
    _verifies(release)

    failures = 0
    for attempt, free in enumerate(range(0, 512 << 10, 4 << 10)):
        _leave_free(small_disk, free)
        scratch = tmp_path / f"try-{attempt}"
        scratch.mkdir()
        try:
            with ExitStack() as stack:
                extract_and_publish(ready_to_publish(options, stack, scratch, signer))
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
            full = disk_full(error)
            assert full is not None and full.exit_code == 24
            failures += 1
            assert _snapshot(small_disk) == before, f"changed with {free} bytes free"
            assert not staging_root(options.artifacts_dir).exists() or not any(
                staging_root(options.artifacts_dir).iterdir()
            )
            continue
        break
    else:
        pytest.fail("publication never fitted in 512 KiB")
    assert failures > 3  # the sizes walked through failures at several points
    (small_disk / "filler").unlink()
    assert _snapshot(small_disk) != before  # the last attempt replaced the artifact
    _verifies(release)


def _verifies(release: Path) -> None:
    checks, _key = verify_release(release, None)
    failed = [c for c in checks if not c.ok]
    assert checks and not failed, failed
