"""Several engines: which engine takes which target (release/targets/schedule.py), and targets
moving off an engine that stops answering (release/targets/farm.py), with fake engines."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, cast

import docker
import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.errors import ConfigError
from orchestrator.release.targets.farm import Work, build_on_engines
from orchestrator.release.targets.schedule import Job, Needs, Schedule, needs_by_flavor
from orchestrator.runtime.api import LABEL_SESSION, EngineFacts
from orchestrator.runtime.contexts import EngineEndpoint
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.reach import _ContextApi, _tls

CPU = ("orchestrator/cpu:1", "orchestrator/base:1")
ARM = ("orchestrator/aarch64:1", "orchestrator/base:1")


def facts(name: str, *images: str, labels: dict[str, str] | None = None) -> EngineFacts:
    return EngineFacts(name, "x86_64", labels or {}, frozenset(images))


def test_an_engine_that_holds_the_toolchain_image_takes_its_target_first() -> None:
    jobs = [Job(0, "arm", Needs(), ARM), Job(1, "cpu", Needs(), CPU)]
    schedule = Schedule([facts("a", CPU[0]), facts("b", ARM[0])], jobs, per_engine=1)
    first = schedule.take("a")
    assert first is not None and first.artifact == "cpu" and first.engine == "a"
    second = schedule.take("b")
    assert second is not None and second.artifact == "arm"


def test_jobs_per_engine_bound_what_one_engine_takes() -> None:
    jobs = [Job(i, f"t{i}", Needs(), CPU) for i in range(3)]
    schedule = Schedule([facts("a", CPU[0]), facts("b")], jobs, per_engine=1)
    taken = schedule.take("a")
    assert taken is not None
    # a is full and holds the image; b is idle: it takes the next one rather than wait
    other = schedule.take("b")
    assert other is not None and other.artifact == "t1"


def test_a_target_whose_label_no_engine_has_is_stranded_with_the_reason() -> None:
    needs = needs_by_flavor(["cuda:gpu=nvidia"])
    jobs = [Job(0, "cuda", needs["cuda"], CPU)]
    schedule = Schedule([facts("a"), facts("b", labels={"gpu": "amd"})], jobs, per_engine=1)
    assert schedule.take("a") is None and schedule.take("b") is None
    [(job, reason)] = schedule.stranded()
    assert job.artifact == "cuda"
    assert "a lacks the label gpu=nvidia" in reason and "b lacks the label gpu=nvidia" in reason


def test_a_labelled_engine_takes_the_target_that_needs_its_label() -> None:
    needs = needs_by_flavor(["cuda:gpu=nvidia"])
    jobs = [Job(0, "cuda", needs["cuda"], CPU)]
    schedule = Schedule([facts("a"), facts("gpu-box", labels={"gpu": "nvidia"})], jobs, 1)
    assert schedule.take("a") is None
    job = schedule.take("gpu-box")
    assert job is not None and job.engine == "gpu-box"


def test_another_architecture_does_not_fit() -> None:
    arm_engine = EngineFacts("pi", "aarch64", {}, frozenset())
    assert Needs().unmet(arm_engine) == "pi is aarch64, not x86_64"


def test_a_lost_engine_gives_its_target_back_and_takes_nothing_more() -> None:
    jobs = [Job(0, "t0", Needs(), CPU), Job(1, "t1", Needs(), CPU)]
    schedule = Schedule([facts("a"), facts("b")], jobs, per_engine=1)
    on_b = schedule.take("b")
    assert on_b is not None and on_b.artifact == "t0"
    schedule.engine_lost(on_b, "the engine stopped answering")
    assert schedule.take("b") is None
    assert schedule.lost == {"b": "the engine stopped answering"}
    again = schedule.take("a")
    assert again is not None and again.artifact == "t0"
    assert again.moves == ["b: the engine stopped answering"]


def test_engines_jobs_below_one_is_refused() -> None:
    with pytest.raises(ConfigError):
        Schedule([facts("a")], [], per_engine=0)


class FakeFarmEngine:
    """What the farm asks of an engine: its facts, whether it answers, its containers."""

    def __init__(self, name: str, *, dies: bool = False) -> None:
        self.name = name
        self.answering = True
        self.dies = dies
        self.built: list[str] = []
        self.removed = 0

    def facts(self) -> EngineFacts:
        return facts(self.name, CPU[0])

    def alive(self) -> bool:
        return self.answering

    def remove_session_containers(self) -> int:
        self.removed += 1
        return 0

    def twin(self) -> FakeFarmEngine:  # what each build gets; sessions: test_twins_...
        return self


def test_targets_of_an_engine_that_dies_finish_on_the_other_and_the_report_says_so() -> None:
    host, second = FakeFarmEngine("host"), FakeFarmEngine("second", dies=True)
    lock = threading.Lock()
    second_started = threading.Event()
    outcome: dict[str, str] = {}

    def build(item: str, engine: Any, prefix: str) -> bool:
        fake = cast(FakeFarmEngine, engine)
        assert prefix == f"{item}@{fake.name}"
        if fake.dies:
            second_started.set()
            fake.answering = False  # it stops answering in the middle of a build
            return True
        second_started.wait(timeout=10)  # the host stays busy until the second has a target
        with lock:
            fake.built.append(item)
            outcome[item] = fake.name
        return False

    lines: list[str] = []
    work = [Work(f"t{i}", f"t{i}", "cpu", CPU) for i in range(3)]
    report = build_on_engines(
        work,
        cast(list[Engine], [host, second]),
        build,
        per_engine=1,
        requirements=(),
        announce=lines.append,
    )
    assert sorted(outcome) == ["t0", "t1", "t2"] and set(outcome.values()) == {"host"}
    assert report.lost == {"second": "the engine stopped answering"}
    assert report.stranded == {}
    [(moved, moves)] = report.moves.items()
    assert report.engine_of[moved] == "host"
    assert moves == ["second: the engine stopped answering"]
    assert any("second: the engine stopped answering" in line for line in lines)


def test_a_failed_build_on_an_answering_engine_stays_failed() -> None:
    host = FakeFarmEngine("host")
    calls: list[str] = []

    def build(item: str, engine: Any, prefix: str) -> bool:
        calls.append(item)
        return True  # the build failed; the engine still answers

    report = build_on_engines(
        [Work("t0", "t0", "cpu", CPU)],
        cast(list[Engine], [host, FakeFarmEngine("other")]),
        build,
        per_engine=1,
        requirements=(),
        announce=lambda _: None,
    )
    assert calls == ["t0"]  # built once, not moved
    assert report.moves == {} and report.lost == {}


def test_engines_require_must_name_flavor_key_and_value(tmp_path: Path) -> None:
    (tmp_path / "crate").mkdir()
    (tmp_path / "crate" / "Cargo.toml").write_text('[package]\nname = "demo"\nversion = "0.1.0"\n')
    config = tmp_path / "orchestrator.toml"
    config.write_text('[package]\ncrate = "crate"\n[engines]\nrequire = ["gpu=nvidia"]\n')
    with pytest.raises(ConfigError, match="FLAVOR:KEY=VALUE"):
        resolve(config, env={})
    config.write_text('[package]\ncrate = "crate"\n[engines]\njobs = 0\n')
    with pytest.raises(ConfigError, match=r"engines\.jobs must be at least 1"):
        resolve(config, env={})


class _Container:
    def __init__(self, session: str) -> None:
        self.labels = {LABEL_SESSION: session}
        self.removed = False

    def remove(self, *, force: bool) -> None:
        self.removed = force


class _Containers:
    def __init__(self, containers: list[_Container]) -> None:
        self.containers = containers

    def list(self, **_filters: object) -> list[_Container]:
        return self.containers


class _Client:
    def __init__(self, containers: list[_Container]) -> None:
        self.containers = _Containers(containers)


def test_twins_of_an_engine_have_sessions_of_their_own_and_are_cleaned_up_with_it() -> None:
    """Two builds side by side on one engine (engines.jobs 2) must not share the session
    that names their volumes, staging folders and crate downloads; Ctrl-C removes both."""
    engine = Engine(cast(docker.DockerClient, _Client([])), name="host")
    first, second = engine.twin(), engine.twin()
    assert len({engine.session, first.session, second.session}) == 3
    assert first.name == second.name == "host"
    containers = [_Container(""), _Container(""), _Container("another run")]
    engine = Engine(cast(docker.DockerClient, _Client(containers)), name="host")
    mine = [engine.twin(), engine.twin()]
    containers[0].labels[LABEL_SESSION] = mine[0].session
    containers[1].labels[LABEL_SESSION] = mine[1].session
    assert engine.remove_session_containers() == 2
    assert [c.removed for c in containers] == [True, True, False]


def test_a_tls_context_keeps_its_own_ca_where_a_company_bundle_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests would verify every request with REQUESTS_CA_BUNDLE instead of the
    context's ca.pem (docker/docker-py#2433): an engine the Docker CLI reaches would not
    verify. The integration test reaches a real engine over mutual TLS with it set."""
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/company/bundle.pem")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    endpoint = EngineEndpoint("build-box", "tcp://127.0.0.1:2376", tls_dir=tmp_path)
    api = _ContextApi(base_url=endpoint.host, tls=_tls(endpoint), version="1.41")
    settings = api.merge_environment_settings("https://127.0.0.1:2376/_ping", {}, None, None, None)
    assert settings["verify"] == str(tmp_path / "ca.pem")
    assert settings["cert"] == (str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    assert settings["proxies"]["https"] == "http://proxy.example:3128"  # still from the env
