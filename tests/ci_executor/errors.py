"""The executor's one error: a file it cannot run as the CI would, or a job that failed."""

from __future__ import annotations


class WorkflowError(Exception):
    """What the executor does not know, or what the CI would have failed on."""
