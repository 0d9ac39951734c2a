"""The two-builder rule (release/assemble/agree.py): two intact folders of one target are compared
by what ships before either is signed, on folders `build --target` really leaves."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.plan.build_plan import BuildPlan
from orchestrator.release.assemble.agree import settle, shipped_files
from orchestrator.release.assemble.shard import AssembleError, check_folders_agreeing
from orchestrator.release.targets.target import Target
from orchestrator.supply.agreement import BuildersDisagreeError

from .assemble_rig import describe, edit_to_match, ready_folder


@pytest.fixture
def two_builds(project: Path, tmp_path: Path) -> tuple[Path, Path, Target, BuildPlan]:
    """One target's folder as `build --target` leaves it, and a second builder's copy."""
    first, target, plan = ready_folder(project, tmp_path)
    second = tmp_path / "second" / plan.artifact_dir
    shutil.copytree(first, second)
    return first, second, target, plan


def test_two_identical_builds_agree_and_one_is_published(
    two_builds: tuple[Path, Path, Target, BuildPlan],
) -> None:
    first, second, target, plan = two_builds
    checked = check_folders_agreeing([(target, plan)], [first, second])
    said: list[str] = []
    (chosen,) = settle(checked, "all", said.append)
    assert chosen.path == first
    assert shipped_files(chosen) == {"demo"}
    assert said == [
        f"agreed: {plan.artifact_dir}: 1 shipped file(s) byte-identical "
        "(built on current and current)"
    ]


def test_a_differing_binary_is_refused_with_its_offset_and_nothing_chosen(
    two_builds: tuple[Path, Path, Target, BuildPlan],
) -> None:
    first, second, target, plan = two_builds
    data = bytearray((second / "demo").read_bytes())
    data[7] ^= 1  # what a build script's random byte does
    # The second builder's own records, consistent with its binary: intact on its own.
    edit_to_match(second, target, plan, {"demo": bytes(data)})
    checked = check_folders_agreeing([(target, plan)], [first, second])
    with pytest.raises(BuildersDisagreeError, match="first differing byte at offset 7") as raised:
        settle(checked, "one", lambda _line: None)
    assert raised.value.exit_code == 77
    assert f"{plan.artifact_dir}: the two builds differ" in raised.value.message


def test_a_log_or_a_timing_may_differ(two_builds: tuple[Path, Path, Target, BuildPlan]) -> None:
    first, second, target, plan = two_builds
    log = next((second / "logs").iterdir())
    log.write_text(log.read_text() + "built on another engine in 12.5 s\n")
    describe(second, target, plan)
    checked = check_folders_agreeing([(target, plan)], [first, second])
    assert [c.path for c in settle(checked, "all", lambda _line: None)] == [first]


def test_the_policy_asks_for_pairs(two_builds: tuple[Path, Path, Target, BuildPlan]) -> None:
    first, second, target, plan = two_builds
    alone = check_folders_agreeing([(target, plan)], [first])
    with pytest.raises(AssembleError, match="built only once"):
        settle(alone, "all", lambda _line: None)
    with pytest.raises(AssembleError, match="no target was built twice"):
        settle(alone, "one", lambda _line: None)
    assert [c.path for c in settle(alone, "none", lambda _line: None)] == [first]
    pair = check_folders_agreeing([(target, plan)], [first, second])
    with pytest.raises(AssembleError, match="comes twice"):
        settle(pair, "none", lambda _line: None)
    third = second.parent.parent / "third" / plan.artifact_dir
    shutil.copytree(first, third)
    with pytest.raises(AssembleError, match="comes 3 times"):
        settle(
            check_folders_agreeing([(target, plan)], [first, second, third]),
            "all",
            lambda _line: None,
        )
