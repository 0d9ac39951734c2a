"""One build of an image per engine at a time: a lock held on the Engine itself.

The lock for an image reference is a container that is created, never started, under a
name derived from the reference (`orchestrator-lock-<hash>`). The Engine refuses a second
container of a name that exists (409 Conflict), atomically, for every client: so it locks
runs on this host and on others alike, where a lock file would only see this host's. A
run that finds the name taken waits, says for whose build, and then finds the image the
holder built (its tag names its inputs' hash, so nothing is built or tagged twice).

A holder removes its lock when done, also on Ctrl-C. One killed outright leaves it behind;
a waiter takes such a lock over when it is stale: its holder ran on this host and that
process is gone (pid and process start time both checked, so a reused pid does not keep
it), or it was taken on another host more than STALE_AFTER_S ago (that host's processes
cannot be seen from here; the bound is well above the slowest image build seen).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.host.system import process_alive
from orchestrator.runtime.api import LABEL_HOST, LABEL_KIND, LABEL_PID

LABEL_LOCK_FOR = "org.orchestrator.lock-for"  # the image reference it locks
LABEL_LOCK_PID_START = "org.orchestrator.pid-start"  # the holder's start time (clock ticks)
LABEL_LOCKED_AT = "org.orchestrator.locked-at"  # when it was taken, Unix seconds
LOCK_KIND = "image-lock"
LOCK_PREFIX = "orchestrator-lock-"
# A CUDA toolchain image took ~10 minutes to build here, four cpu images at once ~9 each:
# a lock held longer than this by another host's run is taken to be a crashed one's.
STALE_AFTER_S = 3 * 3600
POLL_S = 2.0
# While waiting, say so again this often (CI logs show no spinner).
REMIND_S = 60.0


@dataclass(frozen=True)
class LockHolder:
    """The container that holds a lock now, as the Engine lists it."""

    id: str
    labels: Mapping[str, str]

    def describe(self) -> str:
        pid = self.labels.get(LABEL_PID, "?")
        host = self.labels.get(LABEL_HOST, "?")
        since = self.labels.get(LABEL_LOCKED_AT, "")
        when = time.strftime("%H:%M:%S", time.localtime(int(since))) if since.isdigit() else "?"
        return f"pid {pid} on {host}, since {when}"


class LockStore(Protocol):
    """What locking needs of an Engine (the real one, or the fake in unit tests)."""

    def create_lock(self, name: str, labels: Mapping[str, str]) -> str | None:
        """Create the lock container `name`; its id, or None if that name is taken."""
        ...

    def lock_holder(self, name: str) -> LockHolder | None: ...

    def remove_lock(self, container_id: str) -> None:
        """Remove the lock container of this id (not name: a taker must never remove
        the lock that another taker just created); no error if it is gone."""
        ...


def lock_name(reference: str) -> str:
    """A container name for `reference` (names allow fewer characters than tags)."""
    return LOCK_PREFIX + hashlib.sha256(reference.encode()).hexdigest()[:32]


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" if unknown): with the pid,
    it names one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: count after its end.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def stale_reason(holder: LockHolder, *, host: str, now: float) -> str:
    """Why this lock's holder is gone ("" while it may still be building)."""
    labels = holder.labels
    pid = labels.get(LABEL_PID, "")
    taken = labels.get(LABEL_LOCKED_AT, "")
    if labels.get(LABEL_HOST) == host:
        if not pid.isdigit() or not process_alive(int(pid)):
            return f"its run (pid {pid or '?'} on this host) is gone"
        started = labels.get(LABEL_LOCK_PID_START, "")
        if started and process_start(int(pid)) not in ("", started):
            return f"its run is gone (pid {pid} now belongs to another process)"
        return ""
    if not taken.isdigit() or now - int(taken) > STALE_AFTER_S:
        hours = STALE_AFTER_S // 3600
        return f"it was taken on {labels.get(LABEL_HOST, '?')} over {hours} hours ago"
    return ""


@contextmanager
def image_lock(
    store: LockStore,
    reference: str,
    labels: Mapping[str, str],
    *,
    on_wait: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> Iterator[bool]:
    """Hold the engine's lock for building `reference`; yields whether it had to wait
    (another run held it: the image may now exist). `labels` mark the holder (managed,
    session, pid, host); the lock adds what it needs to judge staleness."""
    name = lock_name(reference)
    host = socket.gethostname()
    waited = False
    reminded = 0.0
    while True:
        now = clock()
        mine = {
            **labels,
            LABEL_KIND: LOCK_KIND,
            LABEL_LOCK_FOR: reference,
            LABEL_LOCKED_AT: str(int(now)),
            LABEL_LOCK_PID_START: process_start(os.getpid()),
        }
        created = store.create_lock(name, mine)
        if created is not None:
            break
        holder = store.lock_holder(name)
        if holder is None:
            continue  # released between our create and our look: try again at once
        reason = stale_reason(holder, host=host, now=now)
        if reason:
            on_wait(f"taking over the lock on {reference}: {reason}")
            store.remove_lock(holder.id)
            continue
        if not waited or now - reminded >= REMIND_S:
            on_wait(
                f"waiting for another run's build of {reference} ({holder.describe()}); "
                f"if that run is gone for good: docker rm {name}"
            )
            reminded = now
        waited = True
        sleep(POLL_S)
    try:
        yield waited
    finally:
        store.remove_lock(created)
