"""Engine's leftover rule (which containers and volumes `clean` may remove), on a stub client."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, cast

import docker
import pytest

from orchestrator.runtime.engine import ContainerSpec, Engine, is_leftover
from tests.unit.fakes import FakeEngine, Managed, labels_of


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@dataclass
class StubContainer:
    labels: dict[str, str]
    removed: bool = False

    def remove(self, *, force: bool = False) -> None:
        assert force
        self.removed = True


@dataclass
class StubVolume:
    attrs: dict[str, Any]
    removed: bool = False

    def remove(self, force: bool = False) -> None:
        assert force
        self.removed = True


@dataclass
class StubCollection:
    items: list[Any]
    filters: list[Any] = field(default_factory=list)

    def list(self, **kwargs: Any) -> list[Any]:
        self.filters.append(kwargs.get("filters"))
        return self.items


class StubClient:
    def __init__(self, containers: list[StubContainer], volumes: list[StubVolume]) -> None:
        self.containers = StubCollection(list(containers))
        self.volumes = StubCollection(list(volumes))


@pytest.fixture
def owners() -> dict[str, dict[str, str]]:
    """Labels of one resource per case: the kind is filled in per test."""
    dead = dead_pid()
    return {
        "alive-other-session": labels_of("x", session="other", pid=os.getpid()),
        "dead": labels_of("x", session="other", pid=dead),
        "dead-other-host": labels_of("x", session="other", pid=dead, host="elsewhere.example"),
        "dead-own-session": labels_of("x", session="mine", pid=dead),
        "no-pid": {**labels_of("x", session="other"), "org.orchestrator.pid": ""},
    }


def make_engine(
    owners: dict[str, dict[str, str]],
) -> tuple[Engine, dict[str, StubContainer], dict[str, StubVolume], StubClient]:
    containers = {k: StubContainer(dict(v)) for k, v in owners.items()}
    volumes = {k: StubVolume({"Labels": dict(v)}) for k, v in owners.items()}
    client = StubClient(list(containers.values()), list(volumes.values()))
    engine = Engine(cast(docker.DockerClient, client))
    engine.session = "mine"
    return engine, containers, volumes, client


EXPECTED_REMOVED = {"dead", "no-pid"}


def test_remove_stale_containers_keeps_live_foreign_and_own(
    owners: dict[str, dict[str, str]],
) -> None:
    engine, containers, _, client = make_engine(owners)
    assert engine.remove_stale_containers() == len(EXPECTED_REMOVED)
    assert {k for k, c in containers.items() if c.removed} == EXPECTED_REMOVED
    # Only this tool's run containers are listed: not the builder's RUN containers.
    (filters,) = client.containers.filters
    assert "org.orchestrator.kind=container" in filters["label"]


def test_remove_leftovers_is_both_stale_sweeps(owners: dict[str, dict[str, str]]) -> None:
    engine, containers, volumes, _ = make_engine(owners)
    assert engine.remove_leftovers() == (len(EXPECTED_REMOVED), len(EXPECTED_REMOVED))
    assert {k for k, c in containers.items() if c.removed} == EXPECTED_REMOVED
    assert {k for k, v in volumes.items() if v.removed} == EXPECTED_REMOVED
    assert not containers["alive-other-session"].removed  # a concurrent build's
    assert not volumes["dead-other-host"].removed  # its pid means nothing here


def test_remove_managed_volumes_takes_every_one(owners: dict[str, dict[str, str]]) -> None:
    engine, _, volumes, _ = make_engine(owners)
    assert engine.remove_managed_volumes() == len(owners)
    assert all(v.removed for v in volumes.values())


def test_is_leftover_rule() -> None:
    host = socket.gethostname()
    alive = labels_of("container", session="a", pid=os.getpid())
    assert not is_leftover(alive, session="b", host=host)
    assert is_leftover(labels_of("container", session="a", pid=dead_pid()), session="b", host=host)
    assert not is_leftover({}, session="b", host=host)  # no host label: not provably ours


def test_fake_engine_follows_the_same_rule() -> None:
    fake = FakeEngine(session="mine")
    with fake.container(ContainerSpec("image:tag"), keep=True), fake.volume("out", keep=True):
        pass
    dead = dead_pid()
    fake.managed.append(Managed("leftover", labels_of("container", session="old", pid=dead)))
    fake.volumes.append(Managed("leftover", labels_of("volume", session="old", pid=dead)))
    assert fake.remove_leftovers() == (1, 1)
    # This session's own (kept) container and volume are still there.
    assert [m.labels["org.orchestrator.session"] for m in fake.managed_containers()] == ["mine"]
    assert fake.remove_managed_volumes() == 1
