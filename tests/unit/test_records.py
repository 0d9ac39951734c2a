"""model/records and model/record_io: migrations of every record, refusals, error messages,
stable atomic writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.model.documents import record_io
from orchestrator.model.documents.cache_records import ProfileSidecar, VariantsRecord
from orchestrator.model.documents.records import (
    BuildManifest,
    FileDigest,
    RecordError,
    parse_record,
    read_record,
    record_text,
    write_record,
)
from orchestrator.model.documents.release_summary import (
    PublishedTarget,
    ReleaseSummary,
    TargetSummary,
)

from .conftest import plan_for
from .manifests import produced_manifest


@pytest.fixture
def manifest(project: Path, tmp_path: Path) -> BuildManifest:
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    work = tmp_path / "work"
    work.mkdir()
    return produced_manifest(options, plan_for(options), work)


def summary() -> ReleaseSummary:
    return ReleaseSummary(
        name="demo",
        version="1.2.3",
        artifacts=[
            PublishedTarget(
                flavor="cpu",
                level="x86-64-v3",
                artifact="demo-1.2.3-linux-x86_64-cpu-v3",
                rust_target="x86_64-unknown-linux-gnu",
                size=1024,
                sha256="ab" * 32,
            )
        ],
    )


def run_entry(artifact: str, status: Literal["ok", "cached", "failed"] = "ok") -> TargetSummary:
    """A target as release.json listed it up to schema 2: how its build went, too."""
    failed = status == "failed"
    return TargetSummary(
        flavor="cpu",
        level=f"x86-64-{artifact}",
        artifact=f"demo-1.2.3-linux-x86_64-cpu-{artifact}",
        status=status,
        seconds=12.5,
        size=0 if failed else 1024,
        sha256=None if failed else "ab" * 32,
        speedup_vs_baseline=1.25,
        error="boom" if failed else None,
        warnings=["slow"],
        rust_target="x86_64-unknown-linux-gnu",
        engine="default",
    )


def dump_to(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document))
    return path


# -- migrations ------------------------------------------------------------------------
def test_build_v1_is_migrated_to_v2(manifest: BuildManifest, tmp_path: Path) -> None:
    document = manifest.dump()
    assert document["schema"] == "orchestrator/build"
    assert document["schema_version"] == 2
    document["schema"] = "orchestrator/build@1"
    del document["schema_version"]
    read = read_record(dump_to(tmp_path / "build.json", document), BuildManifest)
    assert read == manifest
    assert read.schema_version == 2


def test_release_v1_and_v2_are_migrated_to_v3_without_how_the_builds_went(
    tmp_path: Path,
) -> None:
    entries = [run_entry("v3"), run_entry("v4", "failed"), run_entry("v2", "cached")]
    document: dict[str, Any] = {
        "schema": "orchestrator/release@1",
        "name": "demo",
        "version": "1.2.3",
        "artifacts": [entry.dump() for entry in entries],
    }
    read = read_record(dump_to(tmp_path / "release.json", document), ReleaseSummary)
    assert read.schema_version == 3
    # the published ones, sorted by folder, as their build.json says; times, statuses,
    # engines and speed figures are logs/targets.json's (unsigned), failures too
    assert [entry.artifact for entry in read.artifacts] == [
        "demo-1.2.3-linux-x86_64-cpu-v2",
        "demo-1.2.3-linux-x86_64-cpu-v3",
    ]
    assert read.artifacts[1] == summary().artifacts[0]
    document.update(schema="orchestrator/release", schema_version=2, jobs_per_engine=[])
    del document["artifacts"][0]["rust_target"]  # written before triples were recorded
    again = read_record(dump_to(tmp_path / "release.json", document), ReleaseSummary)
    assert again.artifacts[1].rust_target is None
    assert again.artifacts[0] == read.artifacts[0]


def test_variants_v0_without_schema_is_migrated(tmp_path: Path) -> None:
    document = {
        "image": "orchestrator/cpu:abc",
        "variants": {"baseline": {"sha256": "aa" * 32, "size": 3}},
    }
    read = read_record(dump_to(tmp_path / "variants.json", document), VariantsRecord)
    assert read.schema_ == "orchestrator/variants"
    assert read.schema_version == 1
    assert read.variants == {"baseline": FileDigest(sha256="aa" * 32, size=3)}


def test_profile_sidecar_v0_moves_tool_details_aside(tmp_path: Path) -> None:
    document = {"sha256": "cd" * 32, "size": 7, "functions": 12, "tool": "llvm-profdata"}
    read = read_record(dump_to(tmp_path / "pgo.json", document), ProfileSidecar)
    assert (read.sha256, read.size) == ("cd" * 32, 7)
    assert read.details == {"functions": 12, "tool": "llvm-profdata"}
    # a current sidecar round-trips unchanged
    assert parse_record(read.dump(), ProfileSidecar, "again") == read


# -- refusals --------------------------------------------------------------------------
def test_newer_version_is_refused_with_a_hint(manifest: BuildManifest, tmp_path: Path) -> None:
    document = manifest.dump() | {"schema_version": 3}
    path = dump_to(tmp_path / "build.json", document)
    with pytest.raises(RecordError) as caught:
        read_record(path, BuildManifest)
    assert caught.value.message == (
        f"{path}: has orchestrator/build schema version 3; this orchestrator reads up to 2"
    )
    assert caught.value.hint is not None
    assert "orchestrator version that wrote it" in caught.value.hint
    assert caught.value.exit_code == 59


def test_version_without_a_migration_is_refused(manifest: BuildManifest) -> None:
    document = manifest.dump()
    del document["schema"], document["schema_version"]  # looks like a v0, which never existed
    with pytest.raises(RecordError, match=r"cannot migrate \(it migrates from \[1\]\)"):
        parse_record(document, BuildManifest, "build.json")


@pytest.mark.parametrize(
    "schema",
    ["orchestrator/release", "orchestrator/release@1", "orchestrator/build@one", 7],
)
def test_wrong_schema_name_is_refused(manifest: BuildManifest, schema: object) -> None:
    document: dict[str, Any] = manifest.dump() | {"schema": schema}
    if isinstance(schema, str) and "@" in schema:
        del document["schema_version"]
    with pytest.raises(RecordError) as caught:
        parse_record(document, BuildManifest, "x/build.json")
    assert caught.value.message == (
        f"x/build.json: is not a orchestrator/build record (schema {schema!r})"
    )


@pytest.mark.parametrize("version", ["2", True, None, 2.0])
def test_schema_version_must_be_an_integer(manifest: BuildManifest, version: object) -> None:
    document = manifest.dump() | {"schema_version": version}
    with pytest.raises(RecordError, match="schema_version must be an integer"):
        parse_record(document, BuildManifest, "build.json")


@pytest.mark.parametrize(
    ("document", "kind"), [([1, 2], "list"), ("text", "str"), (None, "NoneType"), (3, "int")]
)
def test_non_object_json_is_refused(tmp_path: Path, document: object, kind: str) -> None:
    path = dump_to(tmp_path / "release.json", document)
    with pytest.raises(RecordError) as caught:
        read_record(path, ReleaseSummary)
    assert caught.value.message == f"{path}: expected a JSON object, got {kind}"


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(RecordError) as caught:
        read_record(missing, ReleaseSummary)
    assert caught.value.message == f"{missing}: no such file"

    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"schema": "orchestrator/rel')
    with pytest.raises(RecordError, match=rf"^{truncated}: not readable JSON: "):
        read_record(truncated, ReleaseSummary)

    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RecordError, match="not readable JSON"):
        read_record(binary, ReleaseSummary)

    folder = tmp_path / "folder.json"
    folder.mkdir()
    with pytest.raises(RecordError, match=rf"^{folder}: not readable JSON"):
        read_record(folder, ReleaseSummary)


def test_error_names_the_file_and_the_dotted_key(manifest: BuildManifest, tmp_path: Path) -> None:
    document = manifest.dump()
    document["artifact"]["sha256"] = 5
    path = dump_to(tmp_path / "build.json", document)
    with pytest.raises(RecordError) as caught:
        read_record(path, BuildManifest)
    message = caught.value.message
    assert message.startswith(f"{path}: artifact.sha256: ")
    assert "string" in message
    assert "more)" not in message  # exactly one mistake
    assert caught.value.hint == RecordError.default_hint


def test_error_counts_further_mistakes_and_names_list_indexes(tmp_path: Path) -> None:
    document = summary().dump()
    document["artifacts"][0]["level"] = 3
    document["artifacts"][0]["size"] = "big"
    document["surprise"] = 1
    with pytest.raises(RecordError) as caught:
        parse_record(document, ReleaseSummary, "release.json")
    assert caught.value.message.startswith("release.json: artifacts.0.")
    assert caught.value.message.endswith("(and 2 more)")


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    document = summary().dump() | {"colour": "blue"}
    with pytest.raises(RecordError, match=r"release.json: colour: Extra inputs"):
        parse_record(document, ReleaseSummary, "release.json")


def test_records_are_immutable() -> None:
    record = summary()
    with pytest.raises(ValueError, match="frozen"):
        record.name = "other"  # type: ignore[misc]


# -- writing ---------------------------------------------------------------------------
def _key_orders(value: object) -> list[list[str]]:
    if isinstance(value, dict):
        return [list(value), *(o for v in value.values() for o in _key_orders(v))]
    if isinstance(value, list):
        return [o for v in value for o in _key_orders(v)]
    return []


def test_record_text_is_stable_and_sorted(manifest: BuildManifest) -> None:
    text = record_text(manifest)
    assert text.endswith("}\n")
    assert '\n  "artifact": {\n    "arch"' in text  # two-space indent
    orders = _key_orders(json.loads(text))
    assert len(orders) > 20
    assert all(keys == sorted(keys) for keys in orders)
    again = parse_record(json.loads(text), BuildManifest, "text")
    assert record_text(again) == text


def test_write_record_is_atomic_and_readable(manifest: BuildManifest, tmp_path: Path) -> None:
    path = tmp_path / "out" / "build.json"
    assert write_record(path, manifest) == path
    assert path.stat().st_mode & 0o777 == 0o644
    assert path.read_text() == record_text(manifest)
    assert read_record(path, BuildManifest) == manifest
    write_record(path, summary())  # replaces the file in one rename
    assert read_record(path, ReleaseSummary) == summary()
    assert sorted(p.name for p in path.parent.iterdir()) == ["build.json"]


def test_failed_write_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_record(tmp_path / "release.json", summary())
    before = path.read_bytes()

    def broken(_record: object) -> str:
        raise OSError("disk full")

    monkeypatch.setattr(record_io, "record_text", broken)
    with pytest.raises(OSError, match="disk full"):
        write_record(path, summary())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["release.json"]


def test_failed_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_record: object) -> str:
        raise OSError("disk full")

    monkeypatch.setattr(record_io, "record_text", broken)
    with pytest.raises(OSError, match="disk full"):
        write_record(tmp_path / "release.json", summary())
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_after_the_temporary_file_exists_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(self: Path, target: Path) -> Path:
        raise OSError("no space left on device")

    monkeypatch.setattr(Path, "replace", full_disk)
    with pytest.raises(OSError, match="no space left"):
        write_record(tmp_path / "release.json", summary())
    assert list(tmp_path.iterdir()) == []
