"""A release across machines without Docker: the unsigned hand-over of `build --target`,
the checks `release assemble` makes on each folder, and that publishing a handed-over
folder signs the same bytes as a build that signs itself."""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.errors import ConfigError
from orchestrator.execute.ship import publish
from orchestrator.execute.ship.archive_stage import ArtifactToPublish, PublishSettings
from orchestrator.model.documents.records import BuildManifest, read_record
from orchestrator.model.documents.target_folder import TARGET_RECORD
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.release.assemble.shard import (
    AssembleError,
    TargetFolderError,
    check_folders,
    pick_target,
)
from orchestrator.release.targets.target import Target
from orchestrator.supply.archives import archive_name
from orchestrator.supply.attest import Signer
from orchestrator.supply.installer import INSTALLER
from orchestrator.supply.minisign import SecretKey

from .assemble_rig import describe, handed_over_folder, ready_folder
from .conftest import plan_for
from .execute_rig import make_options
from .publish_rig import extract_and_publish, ready_to_publish


def test_a_folder_handed_over_unsigned_publishes_the_bytes_a_signing_build_does(
    project: Path, tmp_path: Path
) -> None:
    key = SecretKey.generate()
    signer = Signer(key, False, "test key")
    one_shot = make_options(project, artifacts_dir=tmp_path / "one-shot")
    (tmp_path / "signed").mkdir()
    with ExitStack() as stack:
        rig = ready_to_publish(one_shot, stack, tmp_path / "signed", signer)
        extract_and_publish(rig)
    sharded = make_options(project, artifacts_dir=tmp_path / "sharded")
    folder, plan = handed_over_folder(sharded, tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "build.json",
        "demo",
        "logs",
        "profiles",
        "sbom.cdx.json",
    ]
    assert not (sharded.artifacts_dir / plan.release_dir).exists()  # nothing published

    staging = tmp_path / "staging"
    staging.mkdir()
    shutil.copytree(folder, staging / plan.artifact_dir)
    published = publish.sign_and_publish(
        ArtifactToPublish(
            folder=staging / plan.artifact_dir,
            name=plan.artifact_dir,
            manifest=read_record(folder / "build.json", BuildManifest),
            source_archive=plan.source.archive,
        ),
        PublishSettings.from_options(sharded),
        signer,
        staging=staging,
        say=lambda _line: None,
        warn=pytest.fail,
    )
    ours = published.parent
    theirs = one_shot.artifacts_dir / plan.release_dir
    archive = archive_name(plan.artifact_dir)
    for name in (
        archive,
        f"{archive}.minisig",
        INSTALLER,
        f"{INSTALLER}.minisig",
        f"{plan.artifact_dir}/demo",
        f"{plan.artifact_dir}/demo.minisig",
    ):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name


@pytest.fixture
def handed_over(project: Path, tmp_path: Path) -> tuple[Path, Target, BuildPlan]:
    return ready_folder(project, tmp_path)


def test_an_intact_folder_of_this_plan_is_accepted(
    handed_over: tuple[Path, Target, BuildPlan],
) -> None:
    folder, target, plan = handed_over
    (checked,) = check_folders([(target, plan)], [folder])
    assert checked.record.artifact == plan.artifact_dir
    assert checked.manifest.artifact.file == "demo"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda f: (f / "demo").write_bytes(b"other"), "demo changed"),
        (lambda f: (f / "logs" / "99-more.log").write_text("x\n"), "logs/99-more.log was added"),
        (lambda f: (f / "extra.sh").write_text("#!/bin/sh\n"), "extra.sh is not a file that"),
        (lambda f: (f / "sbom.cdx.json").unlink(), "sbom.cdx.json is missing"),
        (lambda f: (f / "link").symlink_to(f / "demo"), "link: a symbolic link"),
        (lambda f: (f / TARGET_RECORD).write_text("{"), "is not a target folder"),
    ],
)
def test_a_changed_folder_is_refused_whole(
    handed_over: tuple[Path, Target, BuildPlan], change: object, said: str
) -> None:
    folder, target, plan = handed_over
    change(folder)  # type: ignore[operator]
    with pytest.raises(TargetFolderError, match=said) as raised:
        check_folders([(target, plan)], [folder])
    assert raised.value.exit_code == 69


def test_a_folder_of_another_plan_or_no_folder_is_refused(
    handed_over: tuple[Path, Target, BuildPlan], tmp_path: Path
) -> None:
    folder, target, plan = handed_over
    describe(folder, target, plan, action_key="0" * 64)
    with pytest.raises(AssembleError, match="another plan") as raised:
        check_folders([(target, plan)], [folder])
    assert raised.value.exit_code == 70
    describe(folder, target, plan)
    with pytest.raises(AssembleError, match="comes twice"):
        check_folders([(target, plan)], [folder, folder])
    v3 = replace(target.options, target_cpu="x86-64-v3")
    other = (Target("cpu", "x86-64-v3", v3), plan_for(v3))
    with pytest.raises(AssembleError, match=f"no folder for 1 target.*{other[1].artifact_dir}"):
        check_folders([(target, plan), other], [folder])
    with pytest.raises(AssembleError, match="not a target of this release"):
        check_folders([other], [folder])
    with pytest.raises(TargetFolderError, match="not a folder"):
        check_folders([(target, plan)], [tmp_path / "nowhere"])


def test_a_target_is_named_by_its_folder_or_without_the_release_prefix(
    handed_over: tuple[Path, Target, BuildPlan],
) -> None:
    _, target, plan = handed_over
    planned = [(target, plan)]
    assert pick_target(planned, plan.artifact_dir) == (target, plan)
    assert pick_target(planned, "linux-x86_64-cpu") == (target, plan)
    with pytest.raises(ConfigError, match="no target of this release") as raised:
        pick_target(planned, "linux-x86_64-cpx")
    assert raised.value.exit_code == 10
    assert raised.value.hint == "Did you mean linux-x86_64-cpu?"


def test_build_target_refuses_options_that_change_the_plan(project: Path) -> None:
    config = str(project / "orchestrator.toml")
    runner = CliRunner()
    result = runner.invoke(app, ["build", "-c", config, "--target", "x", "--no-pgo"])
    assert result.exit_code == 10
    assert "pgo.enabled would change it" in " ".join(result.output.split())
    result = runner.invoke(app, ["build", "-c", config, "--out", "somewhere"])
    assert result.exit_code == 10
    assert "--out goes with --target" in result.output
