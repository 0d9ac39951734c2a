"""What ships carries no relocations that only BOLT reads: the strip-relocations step is
planned with BOLT, removes the static relocation sections from every shipped binary that
still has them (the PGO build the gate picked, a binary BOLT fell back on), validates the
result, records the bytes saved in build.json, and is cached like the other steps."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.errors import StepFailedError
from orchestrator.execute.optimize import relocations
from orchestrator.execute.optimize.variants import keep_variants
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.host.step_cache import StepCache
from orchestrator.model.binaries.elf import ElfReadError
from orchestrator.model.binaries.relocations import (
    StaticRelocations,
    StrippedBinary,
    static_relocation_sections,
)
from orchestrator.model.documents.records import BuildManifest, parse_record
from orchestrator.plan.serialize import action_key, plan_summary
from orchestrator.plan.steps import StepName
from orchestrator.release.dry_run import dry_run
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import targets

from .conftest import plan_for
from .execute_rig import Rig, answers, make_options, make_rig
from .fakes import FakeEngine
from .manifests import produced_manifest

SHT_PROGBITS, SHT_RELA, SHT_STRTAB = 1, 4, 3
SHF_ALLOC, SHF_EXEC, SHF_INFO_LINK = 0x2, 0x4, 0x40
# (name, type, flags, size): what --emit-relocs leaves beside the loader's relocations
WITH_RELOCS = (
    (".rela.dyn", SHT_RELA, SHF_ALLOC, 48),
    (".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXEC, 400),
    (".rela.text", SHT_RELA, SHF_INFO_LINK, 960),
    (".rela.rodata", SHT_RELA, SHF_INFO_LINK, 240),
)
WITHOUT = tuple(s for s in WITH_RELOCS if s[0] in (".rela.dyn", ".text"))


def elf(sections: Sequence[tuple[str, int, int, int]]) -> bytes:
    """A minimal ELF64 executable's file: the sections given, their names, nothing else."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name, *_ in sections) + b".shstrtab\0"
    data_at = 64
    body = b"".join(bytes(size) for *_, size in sections)
    names_at = data_at + len(body)
    headers_at = names_at + len(names)
    count = len(sections) + 2
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 2, 62, 1, 0, 0, headers_at, 0, 64, 0, 0, 64, count, count - 1
    )
    table, offset, name_at = bytes(64), data_at, 1
    for name, kind, flags, size in sections:
        entry = 24 if kind == SHT_RELA else 0
        table += struct.pack("<IIQQQQIIQQ", name_at, kind, flags, 0, offset, size, 0, 0, 8, entry)
        offset, name_at = offset + size, name_at + len(name) + 1
    table += struct.pack("<IIQQQQIIQQ", name_at, SHT_STRTAB, 0, 0, names_at, len(names), 0, 0, 1, 0)
    return header + body + names + table


def test_the_static_relocation_sections_are_those_no_segment_loads(tmp_path: Path) -> None:
    binary = tmp_path / "b"
    binary.write_bytes(elf(WITH_RELOCS))
    with binary.open("rb") as stream:
        assert static_relocation_sections(stream) == [".rela.text", ".rela.rodata"]
    binary.write_bytes(elf(WITHOUT))
    with binary.open("rb") as stream:
        assert static_relocation_sections(stream) == []
    binary.write_bytes(b"#!/bin/sh\n")
    with binary.open("rb") as stream, pytest.raises(ElfReadError):
        static_relocation_sections(stream)


# -- the plan ---------------------------------------------------------------------------
def test_the_step_is_planned_after_the_gate_only_where_bolt_links_relocations(
    project: Path,
) -> None:
    options = make_options(project)
    steps = [step.name for step in plan_for(options, "cpu").steps]
    at = steps.index(StepName.STRIP_RELOCATIONS)
    assert steps[at - 1 : at + 2] == ["speed-gate", "strip-relocations", "portability"]
    assert "strip-relocations" in plan_summary(plan_for(options, "cpu"))["steps"]  # type: ignore[operator]
    # No gate: after validation, where BOLT's output (or its fallback) ships unmeasured.
    ungated = [s.name for s in plan_for(replace(options, gate_policy="off"), "cpu").steps]
    assert ungated[ungated.index(StepName.VALIDATE) + 1] == "strip-relocations"
    # Without BOLT no build links --emit-relocs: nothing to strip, no step.
    no_bolt = plan_for(replace(options, bolt=False), "cpu")
    assert StepName.STRIP_RELOCATIONS not in [s.name for s in no_bolt.steps]
    assert "-Wl,--emit-relocs" not in " ".join(no_bolt.final.rustflags)
    # release --dry-run: decided as it runs, like the other steps keyed by built binaries
    (planned,) = dry_run(ReleaseView.from_options(options), targets(options, ["cpu"])[:1], [])
    note = {n.step: n for n in planned.cached.steps}["strip-relocations"]
    assert note.reused is None and "sha256" in note.reason


def test_artifacts_made_before_the_step_are_built_again(project: Path) -> None:
    """The action key of a BOLT plan says its binaries ship stripped; others keep theirs."""
    options = make_options(project)
    with_bolt = plan_for(options, "cpu")
    no_bolt = replace(options, bolt=False)
    assert action_key(with_bolt, options) != action_key(replace(with_bolt, bolt=None), options)
    assert action_key(plan_for(no_bolt, "cpu"), no_bolt) == action_key(
        plan_for(no_bolt, "cpu"), no_bolt
    )


# -- the step ---------------------------------------------------------------------------
@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


OPTIMIZED, BOLTED = f"{BIN_DIR}/optimized/demo", f"{BIN_DIR}/bolt/demo"


def _contents(path: str) -> bytes:
    """What the fake build container holds: the optimized build has BOLT's relocations,
    BOLT's output and the stripped copy have none; every run prints the same."""
    if path.startswith("/build/out/validate"):
        return b"same output"
    return elf(WITH_RELOCS if path == OPTIMIZED else WITHOUT)


def _rig(project: Path, stack: ExitStack, tmp_path: Path, name: str, shipped: str) -> Rig:
    options = make_options(project, validate_command=("--version",))
    folder = tmp_path / name
    folder.mkdir()
    engine = FakeEngine(missing=_contents, responder=answers())
    rig = make_rig(options, stack, folder, engine=engine)
    rig.pipeline.step_cache = StepCache(options.cache_dir / "steps")
    state = rig.pipeline.state
    state.shipped, state.unbolted, state.bolted = shipped, OPTIMIZED, BOLTED
    return rig


def _objcopy_runs(rig: Rig) -> list[tuple[str, ...]]:
    return [argv for argv in rig.box.argvs if argv[0].startswith("llvm-objcopy-")]


def test_the_pgo_build_the_gate_shipped_loses_its_static_relocations(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path, "first", shipped=OPTIMIZED)
    relocations.strip_relocations(rig.pipeline, rig.log)
    stripped = f"{BIN_DIR}/stripped/demo"
    assert _objcopy_runs(rig) == [
        (
            f"llvm-objcopy-{rig.pipeline.plan.toolchain.llvm_major}",
            "--remove-section=.rela.text",
            "--remove-section=.rela.rodata",
            OPTIMIZED,
            stripped,
        )
    ]
    state = rig.pipeline.state
    assert state.shipped == stripped and state.stripped == {OPTIMIZED: stripped}
    # Validated again: the stripped binary's output against the baseline's
    assert any(stripped in argv and "--version" in argv for argv in rig.box.argvs)
    record = state.static_relocations
    assert record is not None
    entry = record.binaries["demo"]
    assert entry.sections == [".rela.text", ".rela.rodata"]
    saved = len(elf(WITH_RELOCS)) - len(elf(WITHOUT))
    assert entry.size_before - entry.size_after == record.bytes_saved == saved > 1200
    assert record.validation is not None and record.validation["compared"] is True
    assert rig.log.detail == f"{record.bytes_saved} bytes of static relocations removed"
    # bench keeps the PGO variant as it ships
    assert keep_variants(rig.pipeline, _published(rig), rig.log)["pgo"].size == entry.size_after
    # The next build strips from the step cache: no llvm-objcopy, still validated.
    again = _rig(project, stack, tmp_path, "second", shipped=OPTIMIZED)
    relocations.strip_relocations(again.pipeline, again.log)
    assert _objcopy_runs(again) == [] and again.log.cached
    assert again.pipeline.state.shipped == stripped
    assert StepName.STRIP_RELOCATIONS in again.pipeline.state.reused
    assert any(stripped in argv and "--version" in argv for argv in again.box.argvs)


def _published(rig: Rig) -> Path:
    artifact = rig.pipeline.staging / "artifact"
    artifact.mkdir(exist_ok=True)
    (artifact / "demo").write_bytes(elf(WITHOUT))
    return artifact


def test_bolts_output_ships_as_llvm_bolt_wrote_it(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path, "bolt", shipped=BOLTED)
    relocations.strip_relocations(rig.pipeline, rig.log)
    assert _objcopy_runs(rig) == [] and rig.pipeline.state.shipped == BOLTED
    record = rig.pipeline.state.static_relocations
    assert record is not None and record.bytes_saved == 0 and record.validation is None
    assert record.binaries["demo"].sections == []
    assert "BOLT's output ships" in rig.log.detail


def test_objcopy_that_leaves_the_sections_fails_the_step(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path, "broken", shipped=OPTIMIZED)
    rig.engine.missing = lambda path: elf(WITH_RELOCS)  # the "stripped" copy is unchanged
    with pytest.raises(StepFailedError, match=r"still has \.rela\.text, \.rela\.rodata"):
        relocations.strip_relocations(rig.pipeline, rig.log)
    assert rig.pipeline.state.shipped == OPTIMIZED


def test_build_json_records_the_bytes_saved(project: Path, tmp_path: Path) -> None:
    options = make_options(project)
    document = produced_manifest(options, plan_for(options, "cpu"), tmp_path).dump()
    assert document["static_relocations"] is None  # not stripped (older files lack it)
    document["static_relocations"] = StaticRelocations.of(
        "llvm-objcopy-22",
        {
            "demo": StrippedBinary(sections=[".rela.text"], size_before=2400, size_after=1700),
            "helper": StrippedBinary(sections=[], size_before=900, size_after=900),
        },
    ).model_dump()
    manifest = parse_record(document, BuildManifest, "build.json")
    assert manifest.static_relocations is not None
    assert manifest.static_relocations.bytes_saved == 700
    del document["static_relocations"]
    assert parse_record(document, BuildManifest, "old").static_relocations is None
