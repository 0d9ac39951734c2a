"""release.lock round-trip, schema versions, drift detection; the vault's hash checks.

The typed record's refusals (extra keys, wrong types, hostile paths): test_lock_record.py.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.resolve.options import Options, resolve
from orchestrator.errors import OrchestratorError
from orchestrator.host.vault import Vault, VaultCorruptError, VaultError
from orchestrator.model.documents.lockfile import (
    SCHEMA_VERSION,
    LockDocument,
    LockedTarget,
    LockfileError,
    blobs,
    drift,
    dumps,
    lock_document,
    read_lock,
    write_lock,
)
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import plan_inputs

from .conftest import plan_for


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


def _plan(options: Options, flavor_name: str = "cpu") -> BuildPlan:
    return plan_for(options, flavor_name)


def lock_for(plan: BuildPlan) -> LockDocument:
    """A lock of one target of `plan`, as `record_release` writes it (minus the build)."""
    target = LockedTarget.model_validate(
        {
            "level": plan.target_cpu,
            "inputs": plan_inputs(plan),
            "resolved": {
                "packages": [
                    {
                        "name": "gcc",
                        "version": "4:14.2.0-1",
                        "arch": "amd64",
                        "file": "gcc_4%3a14.2.0-1_amd64.deb",
                        "sha256": "c" * 64,
                        "size": 1,
                    },
                ],
                "package_set_sha256": "9" * 64,
                "toolchain_reported": {"rustc": "1.96.0", "llvm_major": 20},
                "gpu_compiler": None,
                "profiles": {
                    "pgo.profdata": {
                        "sha256": "d" * 64,
                        "size": 2,
                        "cache_file": "pgo/k.profdata",
                        "details": {"functions": 12},
                    }
                },
                "bolt": {"mode": "lbr", "applied": True},
            },
            "output": {"file": "demo", "sha256": "e" * 64, "size": 3},
        }
    )
    return lock_document(
        name="demo",
        version="1.2.3",
        config={"file": "orchestrator.toml", "sha256": "f" * 64, "text": ""},
        source={
            "git_commit": "0" * 40,
            "dirty": False,
            "repository_path": "orchestrator.toml",
            "crate": "crate",
            "source_date_epoch": 1700000000,
            "source_archive_sha256": plan.source.archive_sha256,
            "cargo_lock_sha256": plan.source.cargo_lock_sha256,
            "vendor_sha256": "1" * 64,
            "crates": [{"name": "libc", "version": "0.2.170", "checksum": "3" * 64}],
        },
        base={
            **plan.base.as_dict(),
            "mmdebstrap": {"command": ["mmdebstrap", "trixie"], "version": "1.5.6"},
            "rootfs_sha256": "2" * 64,
        },
        targets=[target],
    )


def test_round_trip_is_stable_text(options: Options, tmp_path: Path) -> None:
    document = lock_for(_plan(options))
    path = write_lock(tmp_path / "release.lock", document)
    assert read_lock(path) == document
    assert read_lock(tmp_path) == document  # a release folder works too
    assert path.read_text() == dumps(read_lock(path))  # sorted keys: rewriting is a no-op
    assert document.schema_version == SCHEMA_VERSION
    assert json.loads(path.read_text())["schema"] == "orchestrator/lock"
    assert not list(tmp_path.glob(".*partial"))
    # the same lock again writes nothing: the file keeps its mtime (a no-op release)
    os.utime(path, ns=(1, 1))
    write_lock(path, document)
    assert path.stat().st_mtime_ns == 1
    write_lock(path, document.model_copy(update={"written_by": "orchestrator 9.9.9"}))
    assert path.stat().st_mtime_ns != 1 and read_lock(path).written_by == "orchestrator 9.9.9"


def test_blobs_names_every_vaulted_input(options: Options) -> None:
    found = blobs(lock_for(_plan(options)))
    assert set(found) == {"c" * 64, "d" * 64, "1" * 64, "2" * 64}
    assert found["c" * 64] == "gcc_4%3a14.2.0-1_amd64.deb"
    assert found["1" * 64] == "vendored crates"
    assert found["2" * 64].startswith("rootfs ")
    assert found["d" * 64] == f"{_plan(options).artifact_dir}/pgo.profdata"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": SCHEMA_VERSION + 1}, "reads up to"),
        ({"schema": "something/else"}, "not an orchestrator lockfile"),
        ({"targets": None}, r"release\.lock: targets: Field required"),
    ],
)
def test_schema_versioning(
    options: Options, tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    document = {**lock_for(_plan(options)).dump(), **change}
    if change == {"targets": None}:
        del document["targets"]
    (tmp_path / "release.lock").write_text(json.dumps(document))
    with pytest.raises(LockfileError, match=message):
        read_lock(tmp_path / "release.lock")
    assert LockfileError("x").exit_code == 53


def test_check_detects_drift(options: Options) -> None:
    plan = _plan(options)
    document = lock_for(plan)
    assert drift(document, {plan.artifact_dir: plan_inputs(plan)}) == []
    assert drift(document.targets, {plan.artifact_dir: plan_inputs(plan)}) == []
    # a flag changed: the same target, other rustflags
    v3 = _plan(replace(options, target_cpu="x86-64-v3"))
    changes = drift(document, {plan.artifact_dir: plan_inputs(v3)})
    assert any("rustflags changed" in c and "x86-64-v3" in c for c in changes)
    # a table entry: the exact key is named
    later = _plan(replace(options, source_date_epoch=1700000001))
    changes = drift(document, {plan.artifact_dir: plan_inputs(later)})
    assert (
        f'{plan.artifact_dir}: environment.SOURCE_DATE_EPOCH changed: "1700000000" -> '
        '"1700000001"' in changes
    )
    # a target added, one dropped
    changes = drift(document, {"other": plan_inputs(plan)})
    assert f"target {plan.artifact_dir} is locked but no longer configured" in changes
    assert "target other is new (not in the lock)" in changes


def test_gpu_targets_and_packages_are_locked_inputs(options: Options) -> None:
    cuda = plan_inputs(_plan(options, "cuda"))
    assert cuda["gpu_targets"] == ["sm_80", "sm_86", "sm_89", "sm_90"]
    assert cuda["packages"]["nvidia-cuda-toolkit"] == "12.4.131~12.4.1-2"
    assert cuda["environment"]["SOURCE_DATE_EPOCH"] == "1700000000"
    assert cuda["environment"]["CUDAARCHS"] == "80;86;89;90"


def test_materializing_one_blob_for_many_targets_leaves_nothing_behind(tmp_path: Path) -> None:
    # reproduce seeds the same rootfs for every target; the third call once failed on a
    # partial file left by the second, because rename() between links of one inode is a no-op
    vault = Vault(tmp_path / "vault")
    source = tmp_path / "rootfs.tar"
    source.write_bytes(b"rootfs")
    digest = vault.put(source)
    out = tmp_path / "cache" / "rootfs" / "base.tar"
    for _ in range(3):
        vault.materialize(digest, out)
    assert out.read_bytes() == b"rootfs"
    assert sorted(p.name for p in out.parent.iterdir()) == ["base.tar"]
    # a different file at the destination is replaced by the blob
    out.unlink()
    out.write_bytes(b"stale")
    vault.materialize(digest, out)
    assert out.read_bytes() == b"rootfs"
    assert sorted(p.name for p in out.parent.iterdir()) == ["base.tar"]


def test_vault_stores_by_content_and_refuses_tampered_blobs(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "vault")
    source = tmp_path / "pkg.deb"
    source.write_bytes(b"debian package")
    digest = vault.put(source)
    assert vault.path(digest).read_bytes() == b"debian package"
    assert vault.put(source) == digest  # idempotent
    out = tmp_path / "out" / "pkg.deb"
    vault.materialize(digest, out)
    assert out.read_bytes() == b"debian package"
    with pytest.raises(VaultCorruptError, match="was recorded"):
        vault.put(source, expected="0" * 64)
    # tamper with the stored blob: it is refused, never handed out
    blob = vault.path(digest)
    blob.chmod(0o644)
    blob.write_bytes(b"debian packagf")
    with pytest.raises(VaultCorruptError, match="not to its name"):
        vault.materialize(digest, tmp_path / "other.deb")
    assert not (tmp_path / "other.deb").exists()
    with pytest.raises(VaultError, match="no blob"):
        vault.verify("9" * 64)
    with pytest.raises(VaultError, match="not a sha256"):
        vault.path("../../etc/passwd")
    assert isinstance(VaultCorruptError("x"), OrchestratorError)


def test_vault_export_import_round_trip(tmp_path: Path) -> None:
    source_vault = Vault(tmp_path / "a")
    files = []
    for index in range(3):
        path = tmp_path / f"f{index}"
        path.write_bytes(f"blob {index}".encode())
        files.append(source_vault.put(path))
    lock = tmp_path / "release.lock"
    lock.write_text("{}\n")
    archive = tmp_path / "export.tar"
    assert source_vault.export(files, archive, lockfile=lock) == 3
    target = Vault(tmp_path / "b")
    imported = target.import_archive(archive, tmp_path / "copy" / "release.lock")
    assert sorted(imported) == sorted(files)
    assert (tmp_path / "copy" / "release.lock").read_text() == "{}\n"
    for digest in files:
        target.verify(digest)


def test_vault_import_refuses_an_altered_archive(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = b"not what the name says"
        info = tarfile.TarInfo(f"sha256/{'3' * 64}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    archive = tmp_path / "bad.tar"
    archive.write_bytes(buffer.getvalue())
    vault = Vault(tmp_path / "vault")
    with pytest.raises(VaultCorruptError, match="archive was altered"):
        vault.import_archive(archive)
    assert not vault.has("3" * 64)
