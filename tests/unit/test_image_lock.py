"""One image build per engine at a time (runtime/imagelock.py), against FakeEngine: the
winner builds, a loser waits and then uses the winner's image, a stale lock is taken over.
Also the container limits: their create options, the config checks, the error a limit hit
becomes, the lock's record of them, and reproduce's private image references."""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest
from rich.console import Console

import orchestrator.release.lock.reproduce as repro
from orchestrator.config.resolve.checks import memory_bytes
from orchestrator.config.resolve.options import Options, resolve
from orchestrator.config.resolve.toolchains import AptSources, BaseSpec, load_base_spec
from orchestrator.errors import ConfigError, ImageBuildError, ResourceLimitError, StepFailedError
from orchestrator.execute.steps.commands import run
from orchestrator.host.bootstrap import PackageSet
from orchestrator.host.vault import Vault, VaultError
from orchestrator.model.documents.lockfile import LockLimits, parse_lock
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.images import ImagePlan, base_image_plan
from orchestrator.plan.serialize import action_key
from orchestrator.progress.reporter import StepLog
from orchestrator.release.lock.reproduce import ReproduceRun, private_images
from orchestrator.release.targets.target import Target
from orchestrator.runtime import images
from orchestrator.runtime.engine import LABEL_INPUT_HASH, ContainerSpec, Limits
from orchestrator.runtime.imagelock import (
    LABEL_LOCK_PID_START,
    LABEL_LOCKED_AT,
    STALE_AFTER_S,
    LockHolder,
    lock_name,
    process_start,
    stale_reason,
)
from orchestrator.runtime.images import ensure_base_image, ensure_toolchain_image
from tests.unit.fakes import FakeEngine, FakeLocks, as_engine, labels_of

from .conftest import plan_for
from .test_lockfile import lock_for

TOOLCHAIN = ImagePlan("orchestrator/cpu:rustc-web-1.96-" + "c" * 16, "c" * 64)
DEAD_PID = 4194305  # above the kernel's largest pid_max: never a live process
HOST = socket.gethostname()


def step_log() -> tuple[StepLog, io.StringIO]:
    handle = io.StringIO()
    return StepLog(handle, None, None, "test"), handle


@pytest.fixture
def base() -> BaseSpec:
    return load_base_spec()


@pytest.fixture
def cached_rootfs(base: BaseSpec, tmp_path: Path) -> ImagePlan:
    """The base image's plan, its rootfs tarball already in the cache (no mmdebstrap)."""
    plan = base_image_plan(base)
    tarball = tmp_path / "rootfs" / f"{plan.input_hash}.tar"
    tarball.parent.mkdir()
    tarball.write_bytes(b"a cached rootfs")
    return plan


def two_runs() -> tuple[FakeEngine, FakeEngine]:
    """Two runs on one engine: their own sessions, the engine's images and locks shared."""
    locks = FakeLocks()
    first = FakeEngine(session="first-run", locks=locks)
    second = FakeEngine(session="second-run", locks=locks)
    second.images = first.images
    return first, second


def finish_meanwhile(action: Callable[[], None]) -> Callable[[float], None]:
    """A wait during which the other run does `action` (once)."""
    done: list[bool] = []

    def sleep(_seconds: float) -> None:
        if not done:
            done.append(True)
            action()

    return sleep


# -- the lock around image builds -------------------------------------------------------
def test_a_free_lock_is_taken_for_the_build_and_released(
    base: BaseSpec, cached_rootfs: ImagePlan, tmp_path: Path
) -> None:
    fake = FakeEngine()
    log, handle = step_log()
    outcome = ensure_base_image(as_engine(fake), base, cached_rootfs, tmp_path, log)
    assert outcome.built and len(fake.imports) == 1
    assert fake.locks.created == [lock_name(cached_rootfs.reference)]
    assert fake.locks.held == {}  # released
    assert fake.lock_sleeps == [] and "waiting" not in handle.getvalue()


def test_an_existing_image_takes_no_lock(base: BaseSpec, tmp_path: Path) -> None:
    plan = base_image_plan(base)
    fake = FakeEngine()
    fake.add_image(plan.reference, {LABEL_INPUT_HASH: plan.input_hash})
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "rootfs" / f"{plan.input_hash}.tar").write_bytes(b"rootfs")
    log, _ = step_log()
    ensure_base_image(as_engine(fake), base, plan, tmp_path, log)
    assert fake.locks.created == [] and fake.imports == []


def test_the_loser_waits_then_uses_the_winners_base_image(
    base: BaseSpec, cached_rootfs: ImagePlan, tmp_path: Path
) -> None:
    winner, loser = two_runs()
    log, handle = step_log()
    with ExitStack() as stack:
        stack.enter_context(winner.image_lock(cached_rootfs.reference, on_wait=log.line))
        made: list[str] = []

        def winner_builds() -> None:
            made.append(
                winner.import_rootfs(
                    tmp_path, cached_rootfs.reference, {LABEL_INPUT_HASH: cached_rootfs.input_hash}
                )
            )
            stack.close()  # the winner's build ends: its lock goes

        loser.lock_sleep = finish_meanwhile(winner_builds)
        outcome = ensure_base_image(as_engine(loser), base, cached_rootfs, tmp_path, log)
    assert loser.imports == [] and len(winner.imports) == 1  # built once
    assert (outcome.id, outcome.built) == (made[0], False)  # and used by both
    text = handle.getvalue()
    assert f"waiting for another run's build of {cached_rootfs.reference}" in text
    assert f"pid {os.getpid()} on {HOST}" in text  # whose build it waits for
    assert "made by another run meanwhile" in text
    assert winner.locks.held == {}


def test_the_loser_waits_then_uses_the_winners_toolchain_image(
    base: BaseSpec, tmp_path: Path
) -> None:
    winner, loser = two_runs()
    base_outcome = images.ImageOutcome("orchestrator/base:x", "sha256:b", "b" * 64, False, {})
    log, handle = step_log()
    with ExitStack() as stack:
        stack.enter_context(winner.image_lock(TOOLCHAIN.reference, on_wait=log.line))

        def winner_builds() -> None:
            winner.add_image(TOOLCHAIN.reference, {LABEL_INPUT_HASH: TOOLCHAIN.input_hash})
            stack.close()

        loser.lock_sleep = finish_meanwhile(winner_builds)
        outcome = ensure_toolchain_image(
            as_engine(loser),
            base=base,
            base_image=base_outcome,
            plan=TOOLCHAIN,
            dockerfile="FROM scratch\n",
            packages={},
            sources=AptSources(),
            unpack={},
            cache_dir=tmp_path,
            log=log,
            offline=True,  # the .debs into this cache: test_runtime_images.py's business
        )
    assert loser.builds == [] and not outcome.built
    assert outcome.id == loser.images[TOOLCHAIN.reference].id
    assert "made by another run meanwhile" in handle.getvalue()


def test_a_winner_that_built_nothing_leaves_the_build_to_the_loser(
    base: BaseSpec, cached_rootfs: ImagePlan, tmp_path: Path
) -> None:
    winner, loser = two_runs()
    log, handle = step_log()
    with ExitStack() as stack:
        stack.enter_context(winner.image_lock(cached_rootfs.reference, on_wait=log.line))
        loser.lock_sleep = finish_meanwhile(stack.close)  # it failed, and let go
        outcome = ensure_base_image(as_engine(loser), base, cached_rootfs, tmp_path, log)
    assert outcome.built and len(loser.imports) == 1
    assert "the other run left no" in handle.getvalue()


def test_the_lock_is_released_when_the_build_fails(base: BaseSpec, tmp_path: Path) -> None:
    def failing(_call: object, _out: object) -> None:
        raise ImageBuildError("apt said no")

    fake = FakeEngine(build_hook=failing)
    base_outcome = images.ImageOutcome("orchestrator/base:x", "sha256:b", "b" * 64, False, {})
    package_set = PackageSet(tmp_path, ())
    log, _ = step_log()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(images, "_package_set", lambda *_a, **_k: package_set)
        with pytest.raises(ImageBuildError):
            ensure_toolchain_image(
                as_engine(fake),
                base=base,
                base_image=base_outcome,
                plan=TOOLCHAIN,
                dockerfile="FROM scratch\n",
                packages={},
                sources=AptSources(),
                unpack={},
                cache_dir=tmp_path,
                log=log,
            )
    assert len(fake.builds) == 1
    assert fake.locks.held == {}


def _plant(locks: FakeLocks, reference: str, **labels: str) -> str:
    """A lock left on the engine by someone else; its container id."""
    holder = LockHolder("planted", {**labels_of("image-lock", session="gone"), **labels})
    locks.held[lock_name(reference)] = holder
    return holder.id


def test_a_lock_of_a_dead_run_on_this_host_is_taken_over(
    base: BaseSpec, cached_rootfs: ImagePlan, tmp_path: Path
) -> None:
    fake = FakeEngine()
    planted = _plant(fake.locks, cached_rootfs.reference, **{"org.orchestrator.pid": str(DEAD_PID)})
    log, handle = step_log()
    outcome = ensure_base_image(as_engine(fake), base, cached_rootfs, tmp_path, log)
    assert outcome.built and len(fake.imports) == 1
    assert planted in fake.locks.removed and fake.lock_sleeps == []
    assert f"its run (pid {DEAD_PID} on this host) is gone" in handle.getvalue()


def test_a_live_holder_is_waited_for_and_never_removed(
    base: BaseSpec, cached_rootfs: ImagePlan, tmp_path: Path
) -> None:
    fake = FakeEngine()
    planted = _plant(
        fake.locks,
        cached_rootfs.reference,
        **{LABEL_LOCK_PID_START: process_start(os.getpid())},  # this very process: alive
    )
    log, handle = step_log()
    with pytest.raises(AssertionError, match="nobody releases"):
        ensure_base_image(as_engine(fake), base, cached_rootfs, tmp_path, log)
    assert fake.imports == [] and planted not in fake.locks.removed
    # Said once, not on every poll.
    assert handle.getvalue().count("waiting for another run's build") == 1


def test_staleness_by_pid_reuse_and_by_age() -> None:
    now = 1_800_000_000.0
    mine = {"org.orchestrator.host": HOST, "org.orchestrator.pid": str(os.getpid())}
    alive = LockHolder("a", {**mine, LABEL_LOCK_PID_START: process_start(os.getpid())})
    assert stale_reason(alive, host=HOST, now=now) == ""
    reused = LockHolder("b", {**mine, LABEL_LOCK_PID_START: "1"})  # same pid, other process
    assert "belongs to another process" in stale_reason(reused, host=HOST, now=now)
    elsewhere = {"org.orchestrator.host": "other-host", "org.orchestrator.pid": "1"}
    recent = LockHolder("c", {**elsewhere, LABEL_LOCKED_AT: str(int(now) - 600)})
    assert stale_reason(recent, host=HOST, now=now) == ""  # its processes are not ours to see
    old = LockHolder("d", {**elsewhere, LABEL_LOCKED_AT: str(int(now) - STALE_AFTER_S - 1)})
    assert "other-host over 3 hours ago" in stale_reason(old, host=HOST, now=now)


def test_lock_names_are_valid_container_names_per_reference() -> None:
    one, other = lock_name("orchestrator/cpu:a-1"), lock_name("orchestrator/cpu:a-2")
    assert one != other and one == lock_name("orchestrator/cpu:a-1")
    assert one.startswith("orchestrator-lock-") and all(c.isalnum() or c == "-" for c in one)


def test_superseded_images_in_use_are_kept(
    base: BaseSpec, cached_rootfs: ImagePlan, tmp_path: Path
) -> None:
    fake = FakeEngine()
    family = cached_rootfs.reference[: -len(cached_rootfs.input_hash[:16])]
    used = fake.add_image(family + "0" * 16, {LABEL_INPUT_HASH: "0" * 64})
    unused = fake.add_image(family + "1" * 16, {LABEL_INPUT_HASH: "1" * 64})
    fake.in_use.add(used.id)  # a concurrent run with older pins still builds on it
    log, handle = step_log()
    ensure_base_image(as_engine(fake), base, cached_rootfs, tmp_path, log)
    assert fake.image(used.id) is not None and fake.image(unused.id) is None
    assert f"kept superseded image {family}{'0' * 16}: a container uses it" in handle.getvalue()


# -- container limits ---------------------------------------------------------------------
def test_limits_become_create_options_and_zero_means_none() -> None:
    assert Limits().engine_options() == {}
    assert Limits(pids=256, memory=1 << 30).engine_options() == {
        "pids_limit": 256,
        "mem_limit": 1 << 30,
        "memswap_limit": 1 << 30,  # no swapping past the bound
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8GiB", 8 << 30),
        ("512MiB", 512 << 20),
        ("512m", 512 << 20),
        ("2G", 2 << 30),
        ("1 tb", 1 << 40),
        ("0", 0),
        ("8589934592", 8 << 30),  # as the lock records it: bytes
        ("8 GB please", None),
        ("-1", None),
        ("1.5GiB", None),
    ],
)
def test_memory_sizes(text: str, expected: int | None) -> None:
    assert memory_bytes(text) == expected


def test_limits_resolve_from_the_environment_and_are_checked(project: Path) -> None:
    config = project / "orchestrator.toml"
    options = resolve(
        config, env={"ORCHESTRATOR_LIMITS_PIDS": "256", "ORCHESTRATOR_LIMITS_MEMORY": "2GiB"}
    )
    assert (options.limit_pids, options.limit_memory) == (256, "2GiB")
    plan = plan_for(options, "cpu")
    assert (plan.limit_pids, plan.limit_memory) == (256, 2 << 30)
    defaults = plan_for(resolve(config, env={}), "cpu")
    assert (defaults.limit_pids, defaults.limit_memory) == (4096, 8 << 30)
    with pytest.raises(ConfigError, match=r"limits\.pids = 8 is too few"):
        resolve(config, env={"ORCHESTRATOR_LIMITS_PIDS": "8"})
    with pytest.raises(ConfigError, match=r"limits\.memory = 'lots'"):
        resolve(config, env={"ORCHESTRATOR_LIMITS_MEMORY": "lots"})


def test_limits_are_not_action_inputs(project: Path) -> None:
    """A build fits its limits or fails: changing them must not rebuild published targets."""
    config = project / "orchestrator.toml"
    options = resolve(config, env={})
    raised = resolve(config, env={"ORCHESTRATOR_LIMITS_PIDS": "9000"})
    assert action_key(plan_for(options, "cpu"), options) == action_key(
        plan_for(raised, "cpu"), raised
    )


def _failing_box(hits: tuple[str, ...]) -> object:
    fake = FakeEngine(responder=lambda _argv: (101, ["panicked: Resource temporarily unavailable"]))
    with fake.container(ContainerSpec("img", limits=Limits(pids=256, memory=1 << 30))) as box:
        box.hits = hits
        return box


def test_a_failed_command_that_hit_the_pids_limit_is_a_resource_limit_error() -> None:
    box = _failing_box(("pids",))
    log, _ = step_log()
    with pytest.raises(ResourceLimitError) as caught:
        run(box, ["cargo", "build"], log, "build-baseline")  # type: ignore[arg-type]
    error = caught.value
    assert error.exit_code == 25
    assert "process limit (limits.pids = 256)" in error.message
    assert "limits.pids" in (error.hint or "") and "ORCHESTRATOR_LIMITS_PIDS" in (error.hint or "")


def test_a_failed_command_within_its_limits_stays_a_step_failure() -> None:
    box = _failing_box(())
    log, _ = step_log()
    with pytest.raises(StepFailedError):
        run(box, ["cargo", "build"], log, "build-baseline")  # type: ignore[arg-type]


def test_the_lock_records_the_limits_and_reads_them_back(options: Options) -> None:
    document = lock_for(plan_for(options, "cpu"))
    assert document.limits is None  # a lock from before limits still reads
    limited = document.model_copy(update={"limits": LockLimits(pids=256, memory=1 << 30)})
    again = parse_lock(limited.dump(), "release.lock")
    assert again.limits == LockLimits(pids=256, memory=1 << 30)
    bad = {**limited.dump(), "limits": {"pids": -1, "memory": 0}}
    with pytest.raises(Exception, match="limits"):
        parse_lock(bad, "release.lock")


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


# -- reproduce's own images ---------------------------------------------------------------
def test_reproduce_builds_under_references_of_its_own(options: Options) -> None:
    plan = plan_for(options, "cpu")
    private = private_images(plan, "abc123")
    for shared, own in ((plan.base_image, private.base_image), (plan.image, private.image)):
        repository, tag = shared.reference.rsplit(":", 1)
        assert own.reference == f"{repository}:repro-abc123-{tag}"
        assert own.input_hash == shared.input_hash  # the same inputs, so the same image
        # The family that superseded-image removal looks at is this run's alone.
        assert own.reference.endswith(own.input_hash[:16])
    titles = " ".join(step.title for step in private.steps)
    assert private.image.reference in titles and plan.image.reference not in titles


def test_a_fresh_reproduction_leaves_the_shared_images_alone(
    options: Options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_for(options, "cpu")
    fake = FakeEngine(session="repro-run")
    shared = fake.add_image(plan.image.reference, {LABEL_INPUT_HASH: plan.image.input_hash})
    built_with: list[BuildPlan] = []

    def run_build(_options: Options, planned: BuildPlan, *_a: object, **_k: object) -> None:
        built_with.append(planned)
        raise VaultError("stop here")  # what happens after the build is not this test's

    monkeypatch.setattr(repro, "run_build", run_build)
    monkeypatch.setattr(repro, "seed_cache", lambda *_a: None)
    monkeypatch.setattr(repro, "differing_inputs", lambda *_a: [])
    document = lock_for(plan)
    entry = document.targets[0]
    entry = entry.model_copy(update={"resolved": entry.resolved.model_copy(update={"bolt": None})})
    run = ReproduceRun(
        document,
        tmp_path,
        as_engine(fake),
        Vault(tmp_path / "vault"),
        Console(file=io.StringIO()),
        None,  # type: ignore[arg-type]
        tmp_path / "cache",
        True,  # fresh images
        lambda _line: None,
    )
    result = repro.Reproduced(entry.inputs.artifact, "e" * 64)
    repro._reproduce_one(run, entry, Target("cpu", "x86-64-v2", options), plan, result)
    (planned,) = built_with
    assert (
        planned.image.reference
        == f"orchestrator/cpu:repro-repro-run-{plan.image.reference.split(':')[1]}"
    )
    assert run.built_images == {planned.base_image.reference, planned.image.reference}
    assert fake.removed_images == []  # nothing removed before the build
    assert fake.image(plan.image.reference) == shared
