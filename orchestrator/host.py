"""Small facts about the host that several modules need."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
