"""Which files are the unsigned records of how a build went (model/run_logs.py): only
those, so that `verify` still flags anything else no signature covers."""

from __future__ import annotations

import pytest

from orchestrator.model.run_logs import is_build_log, is_release_log


@pytest.mark.parametrize("name", ["logs/run.json", "logs/01-build.log", "logs/a b.log"])
def test_a_folders_run_record_and_step_logs_are_build_logs(name: str) -> None:
    assert is_build_log(name)
    assert is_release_log(f"demo-1.2.3-linux-x86_64-cpu/{name}")


@pytest.mark.parametrize(
    "name",
    ["logs/run.sh", "logs/.hidden", "logs/deep/x.log", "logs/", "build.json", "x/logs/a.log"],
)
def test_nothing_else_is(name: str) -> None:
    assert not is_build_log(name)


def test_the_release_keeps_only_targets_json_under_its_logs() -> None:
    assert is_release_log("logs/targets.json")
    assert not is_release_log("logs/other.json")
    assert not is_release_log("logs/run.json")  # a folder's record, not the release's
    assert not is_release_log("release.json")
