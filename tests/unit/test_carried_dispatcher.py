"""The dispatcher a level's target folder carries (release/assemble/carried_dispatcher.py): which
targets carry it, the checks assemble makes of it, and the -auto folder composed from it
on a machine with no Docker Engine, as a CI assemble job is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.errors import DockerUnavailableError
from orchestrator.execute.ship.dispatcher import dispatcher_source
from orchestrator.model.documents.compose_record import COMPOSE_JSON, ComposeRecord, DispatcherInfo
from orchestrator.model.documents.records import read_record
from orchestrator.model.hashing import sha256_bytes
from orchestrator.release.assemble.carried_dispatcher import (
    CARRIED_FILE,
    CarriedDispatcherError,
    carried_dispatchers,
    carries_dispatcher,
    check_carried,
)
from orchestrator.release.assemble.shard import compose_where_possible
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import Target
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey

from .test_compose import DISPATCHER, LEVELS, _built, _options, _publish_levels, tiny_static_elf


def _info(image: str, data: bytes = DISPATCHER) -> DispatcherInfo:
    return DispatcherInfo(
        sha256=sha256_bytes(data),
        size=len(data),
        image=image,
        source_sha256=sha256_bytes(dispatcher_source()),
        command=["gcc", "-o", "dispatcher", "dispatcher.c"],
    )


def test_only_levels_of_a_dispatching_x86_flavor_carry_it(project: Path) -> None:
    options = _options(project)
    (_, v2), (_, v3) = _built(options, LEVELS)
    assert carries_dispatcher(Target("cpu", "x86-64-v2", options), v2)
    assert carries_dispatcher(Target("cpu", "x86-64-v3", options), v3)
    off = _options(project, dispatch=False)
    assert not carries_dispatcher(Target("cpu", "x86-64-v2", off), v2)
    one = _options(project, levels=("x86-64-v2",))
    assert not carries_dispatcher(Target("cpu", "x86-64-v2", one), v2)


def _folder(tmp_path: Path, data: bytes) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "target"
    (folder / "dispatcher").mkdir(parents=True)
    (folder / CARRIED_FILE).write_bytes(data)
    return folder, {CARRIED_FILE: sha256_bytes(data)}


def test_a_carried_dispatcher_is_checked_like_a_binary(project: Path, tmp_path: Path) -> None:
    options = _options(project)
    (_, plan), _ = _built(options, LEVELS)
    image = plan.image.reference
    folder, files = _folder(tmp_path, DISPATCHER)
    assert check_carried(folder, _info(image), plan, files) == (_info(image), DISPATCHER)
    assert check_carried(folder, None, plan, {}) is None
    with pytest.raises(CarriedDispatcherError, match="disagree"):
        check_carried(folder, None, plan, files)
    with pytest.raises(CarriedDispatcherError, match="another image"):
        check_carried(folder, _info("orchestrator/cpu:other"), plan, files)
    script = b"#!/bin/sh\necho owned\n"
    (folder / CARRIED_FILE).write_bytes(script)
    with pytest.raises(CarriedDispatcherError, match="not the file its record names"):
        check_carried(folder, _info(image), plan, files)
    # the record and listing made to match the script: still no static x86_64 executable
    with pytest.raises(CarriedDispatcherError, match="no ELF file") as raised:
        check_carried(folder, _info(image, script), plan, {CARRIED_FILE: sha256_bytes(script)})
    assert raised.value.exit_code == 78


def test_folders_that_carry_other_bytes_for_one_image_are_refused(tmp_path: Path) -> None:
    other = tiny_static_elf(b"another dispatcher")
    one = (_info("img"), DISPATCHER)
    assert carried_dispatchers([(tmp_path / "a", one), (tmp_path / "b", None)]) == {"img": one}
    with pytest.raises(CarriedDispatcherError, match="carry different dispatchers"):
        carried_dispatchers([(tmp_path / "a", one), (tmp_path / "b", (_info("img", other), other))])


def test_assemble_with_no_engine_composes_from_the_carried_dispatcher(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable() -> Engine:
        raise DockerUnavailableError("cannot reach the Docker Engine: test")

    monkeypatch.setattr(Engine, "connect", staticmethod(unreachable))
    signer = Signer(SecretKey.generate(), False, "test key")
    options = _publish_levels(project, tmp_path, signer)
    built = _built(options, LEVELS)
    release = options.artifacts_dir / built[0][1].release_dir
    image = built[0][1].image.reference
    warned: list[str] = []
    written = compose_where_possible(
        ReleaseView.from_options(replace(options, cache_dir=tmp_path / "empty-cache")),
        release,
        built,
        signer,
        announce=print,
        warn=warned.append,
        carried={image: (_info(image), DISPATCHER)},
    )
    folder = "demo-1.2.3-linux-x86_64-cpu-auto"
    assert written == [folder, f"{folder}.tar.xz", f"{folder}.tar.xz.minisig"]
    assert warned == []
    assert (release / folder / "bin" / "demo").read_bytes() == DISPATCHER
    assert read_record(release / folder / COMPOSE_JSON, ComposeRecord).dispatcher == _info(image)
