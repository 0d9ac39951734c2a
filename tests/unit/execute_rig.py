"""The rig the test_execute_* files run step executors in: options with the cache in the
test's folder, a Pipeline on a FakeEngine, a StepLog read back as text, and tar helpers."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.config.resolve.options import Options, resolve
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.host.source import CRATES_IO
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.progress.reporter import Reporter, StepLog
from orchestrator.runtime.images import ImageOutcome
from orchestrator.supply.attest import Signer

from .conftest import plan_for
from .fakes import FakeContainer, FakeEngine, Responder, as_engine


def crate_archive(root: str, files: Mapping[str, bytes]) -> bytes:
    """A `.crate` as crates.io serves it: a gzipped tar of `<name>-<version>/...`."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        for name, data in files.items():
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


EITHER_CRATE = crate_archive(
    "either-1.15.0",
    {"Cargo.toml": b'[package]\nname = "either"\n', "src/lib.rs": b"pub enum Either {}\n"},
)
EITHER_SUM = hashlib.sha256(EITHER_CRATE).hexdigest()
LOCK = f"""version = 4

[[package]]
name = "demo"
version = "1.2.3"
dependencies = ["either"]

[[package]]
name = "either"
version = "1.15.0"
source = "{CRATES_IO}"
checksum = "{EITHER_SUM}"
"""


def make_options(project: Path, **changes: Any) -> Options:
    """The project's options with the cache inside the test's folder."""
    options = resolve(
        project / "orchestrator.toml",
        env={"SOURCE_DATE_EPOCH": "1700000000", "XDG_CACHE_HOME": str(project / "xdg")},
    )
    return replace(options, **changes)


def answers(*rules: tuple[str, int, Sequence[str]]) -> Responder:
    """The first rule whose text occurs in the command line answers (code, lines)."""

    def respond(argv: Sequence[str]) -> tuple[int, list[str]]:
        joined = " ".join(argv)
        for needle, code, lines in rules:
            if needle in joined:
                return code, list(lines)
        return 0, []

    return respond


@dataclass
class Rig:
    pipeline: Pipeline
    engine: FakeEngine
    log: StepLog
    handle: io.StringIO

    @property
    def text(self) -> str:
        return self.handle.getvalue()

    @property
    def console(self) -> str:
        """What the run printed on the console (its reporter's)."""
        file = self.pipeline.reporter.console.file
        assert isinstance(file, io.StringIO)
        return file.getvalue()

    @property
    def box(self) -> FakeContainer:
        box = self.pipeline.box
        assert isinstance(box, FakeContainer)
        return box


def make_rig(
    options: Options,
    stack: ExitStack,
    tmp_path: Path,
    *,
    flavor: str = "cpu",
    plan: BuildPlan | None = None,
    engine: FakeEngine | None = None,
    signer: Signer | None = None,
    staging: Path | None = None,
) -> Rig:
    plan = plan or plan_for(options, flavor)
    engine = engine or FakeEngine()
    console = Console(file=io.StringIO(), width=200)
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    pipeline = Pipeline(
        options=options,
        plan=plan,
        engine=as_engine(engine),
        reporter=Reporter(console, tmp_path / "logs"),
        signer=signer,  # only publish signs
        stack=stack,
        scratch=scratch,
        staging=staging or tmp_path,
        started="2026-01-01T00:00:00+00:00",
    )
    pipeline.state.image = ImageOutcome(
        plan.image.reference, "sha256:t", plan.image.input_hash, False, {}
    )
    handle = io.StringIO()
    # Outcome-changing warnings reach the console, as Reporter.step's logs have them do.
    log = StepLog(handle, None, None, "step", warn=pipeline.reporter.warn)
    return Rig(pipeline, engine, log, handle)


def tar_of(members: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def untar(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
