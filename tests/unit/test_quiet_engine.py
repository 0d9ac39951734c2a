"""An Engine that passes on nothing from a quick exec, or refuses a copy: the step fails with
a message, never with a path made of nothing or a traceback (seen once on this machine under
load: `readlink -f` in glibc-view gave no output, and the copy of "" that followed was an
HTTP 400 from the Engine)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast

import docker
import pytest

from orchestrator.errors import ContainerError, StepFailedError
from orchestrator.execute.steps import sysroot as sysroot_step
from orchestrator.runtime.container import Container

from .execute_rig import make_options, make_rig
from .fakes import FakeEngine

HOST_LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")


def _readlink_answers(silent_times: int) -> Any:
    """readlink -f answers nothing `silent_times` times, then the real file's path."""
    asked = {"n": 0}

    def respond(argv: Sequence[str]) -> tuple[int, list[str]]:
        if tuple(argv[:2]) != ("readlink", "-f"):
            return 0, []
        asked["n"] += 1
        if asked["n"] <= silent_times:
            return 0, []
        return 0, [argv[-1].replace("/libm.so.6", "/libm-2.31.so")]

    return respond


def test_glibc_view_asks_again_when_the_engine_passes_on_no_output(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine(responder=_readlink_answers(1), missing=lambda _p: HOST_LIBM.read_bytes())
    rig = make_rig(make_options(project, glibc_floor="2.28"), stack, tmp_path, engine=engine)
    sysroot_step.glibc_view(rig.pipeline, rig.log)
    readlinks = [a for a in rig.box.argvs if a[:2] == ("readlink", "-f")]
    assert readlinks[0] == readlinks[1]  # the silent one asked once more
    assert "exited 0 with no output (try 1 of 2)" in rig.text
    assert "" not in [p for p, _ in rig.box.puts]


def test_glibc_view_fails_with_a_message_when_the_output_stays_empty(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine(responder=_readlink_answers(99), missing=lambda _p: b"never read")
    rig = make_rig(make_options(project, glibc_floor="2.28"), stack, tmp_path, engine=engine)
    with pytest.raises(StepFailedError, match="passed on no output, twice"):
        sysroot_step.glibc_view(rig.pipeline, rig.log)
    assert len([a for a in rig.box.argvs if a[:2] == ("readlink", "-f")]) == 2
    assert rig.box.puts == []  # nothing copied in from an empty path


class _RefusingSdk:
    id = "c0ffee"

    def get_archive(self, path: str) -> tuple[list[bytes], dict[str, Any]]:
        raise docker.errors.APIError("400 Client Error", explanation=f"bad path {path!r}")


def test_a_copy_the_engine_refuses_is_a_container_error_not_a_traceback() -> None:
    box = Container(cast("docker.DockerClient", object()), cast("Any", _RefusingSdk()))
    with pytest.raises(ContainerError, match="could not copy '' out of the container"):
        box.get_archive("")
