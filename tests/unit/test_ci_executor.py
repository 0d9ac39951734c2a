"""The CI workflow executor of tests/ci_executor: its expressions, matrix expansion,
rules, cache lookups and stand-ins behave as GitHub and GitLab do, and what it does not
know stops it. (The executor running the generated files for real is
tests/integration/test_ci_executor.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ci_executor.actions import JobState, hash_files, run_action
from tests.ci_executor.errors import WorkflowError
from tests.ci_executor.expressions import Context, condition, evaluate, render
from tests.ci_executor.github import Event, GitHub, _file_values, _triggered
from tests.ci_executor.gitlab import GitLab, _matrix
from tests.ci_executor.gitlab_rules import expand, rule_matches
from tests.ci_executor.runner import Runner
from tests.ci_executor.services import ArtifactStore, CacheStore

CONTEXTS: dict[str, Any] = {
    "github": {"ref_type": "tag", "ref_name": "v1.2.3", "repository": "o/r"},
    "matrix": {"target": {"artifact": "a-1", "runner": ["self-hosted", "gpu"], "builder": "b"}},
    "needs": {"plan": {"outputs": {"targets": '[{"artifact": "x"}, {"artifact": "y"}]'}}},
    "steps": {"cache": {"outputs": {"cache-hit": "true"}}},
    "secrets": {"KEY": "s3cret"},
}


def ctx(failed: bool = False) -> Context:
    return Context(CONTEXTS, functions={"hashFiles": lambda *p: f"h{len(p)}"}, failed=failed)


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("github.ref_type == 'tag'", True),
        ("github.ref_type == 'TAG'", True),  # strings compare without case
        ("github.ref_type != 'tag' && steps.cache.outputs.cache-hit != 'true'", False),
        ("steps.cache.outputs.cache-hit != 'true'", False),
        ("GITHUB.REF_NAME", "v1.2.3"),  # contexts and properties without case
        ("matrix.target.runner", ["self-hosted", "gpu"]),
        ("matrix.target.missing", None),
        ("matrix.target.runner[1]", "gpu"),
        ("fromJSON(needs.plan.outputs.targets)[1].artifact", "y"),
        ("secrets.KEY", "s3cret"),
        ("secrets.UNSET", None),
        ("'it''s'", "it's"),
        ("1 == '1'", True),  # loose equality: as numbers
        ("null == 0", True),
        ("'' || 'fallback'", "fallback"),
        ("'first' && 'second'", "second"),
        ("!steps.cache.outputs.cache-hit", False),
        ("(github.ref_type == 'tag') && matrix.target.builder == 'b'", True),
        ("hashFiles('a', 'b')", "h2"),
        ("contains(matrix.target.runner, 'GPU')", True),
        ("startsWith(github.ref_name, 'v1.')", True),
    ],
)
def test_expressions_evaluate_as_github_does(expression: str, value: object) -> None:
    assert evaluate(expression, ctx()) == value


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("vars.SOMETHING", "unknown context 'vars'"),
        ("github.ref ~= 'x'", "cannot read"),
        ("format('{0}', github.ref)", "unknown function format"),
        ("github.ref ==", "expected more"),
        ("(github.ref", r"expected \)"),
        ("fromJSON('not json')", "fromJSON"),
    ],
)
def test_what_the_evaluator_does_not_know_stops_it(expression: str, words: str) -> None:
    with pytest.raises(WorkflowError, match=words):
        evaluate(expression, ctx())


def test_templates_keep_values_whole_and_interpolate_text() -> None:
    assert render("${{ matrix.target.runner }}", ctx()) == ["self-hosted", "gpu"]
    assert render("target-${{ matrix.target.artifact }}-${{ matrix.target.builder }}", ctx()) == (
        "target-a-1-b"
    )
    assert render({"k": ["${{ github.ref_name }}"]}, ctx()) == {"k": ["v1.2.3"]}
    with pytest.raises(WorkflowError, match="an object or array"):
        render("runs on ${{ matrix.target.runner }}", ctx())


def test_if_conditions_imply_success_unless_they_name_a_status() -> None:
    assert condition("github.ref_type == 'tag'", ctx())
    assert condition("${{ github.ref_type == 'tag' }}", ctx())
    assert not condition("github.ref_type == 'tag'", ctx(failed=True))
    assert condition("always() && github.ref_type == 'tag'", ctx(failed=True))
    assert condition("failure()", ctx(failed=True))
    with pytest.raises(WorkflowError, match="mixes"):
        condition("x ${{ github.ref }}", ctx())


def test_triggers_and_output_files() -> None:
    on = {"push": {"tags": ["v*"]}, "workflow_dispatch": None}
    assert _triggered(on, Event("push", "refs/tags/v1.2.3", "0" * 40))
    assert not _triggered(on, Event("push", "refs/tags/release/v1", "0" * 40))  # * stops at /
    assert not _triggered(on, Event("push", "refs/heads/main", "0" * 40))
    assert _triggered(on, Event("workflow_dispatch", "refs/heads/main", "0" * 40))
    with pytest.raises(WorkflowError, match="pull_request"):
        _triggered({"pull_request": None}, Event("push", "refs/tags/v1", "0" * 40))


def test_output_files_hold_lines_and_delimited_blocks(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_text('targets=[{"a":1}]\nnotes<<EOF\nline 1\nline=2\nEOF\nempty=\n')
    assert _file_values(path) == {"targets": '[{"a":1}]', "notes": "line 1\nline=2", "empty": ""}
    path.write_text("no separator\n")
    with pytest.raises(WorkflowError, match="neither"):
        _file_values(path)


def _git_repo(path: Path, files: dict[str, str]) -> str:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-qm", "c"],
        ["tag", "v1.2.3"],
    ):
        subprocess.run(["git", *args], cwd=path, env=env, check=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True
    ).stdout.strip()


MATRIX_WORKFLOW = """\
on:
  push:
    tags: ["v*"]
jobs:
  plan:
    runs-on: ubuntu-latest
    outputs:
      targets: ${{ steps.plan.outputs.targets }}
    steps:
      - id: plan
        run: |
          targets='[{"artifact":"x","builder":"a"},{"artifact":"x","builder":"b"}]'
          echo "targets=$targets" >> "$GITHUB_OUTPUT"
  build:
    needs: plan
    runs-on: ${{ matrix.target.builder }}-runner
    strategy:
      matrix:
        target: ${{ fromJSON(needs.plan.outputs.targets) }}
        level: [v2, v3]
    steps:
      - env:
          WHO: ${{ matrix.target.builder }}-${{ matrix.level }}
        run: |
          echo "$WHO $GITHUB_REF_TYPE $GITHUB_REF_NAME $GITHUB_REPOSITORY" > "$RUNNER_TEMP/who"
          test "$HOME" != "$OLDHOME"
          cat "$RUNNER_TEMP/who"
  publish:
    needs: build
    if: github.ref_type != 'tag'
    runs-on: ubuntu-latest
    steps:
      - run: exit 1
"""


def test_a_matrix_is_expanded_from_the_plan_jobs_output(tmp_path: Path) -> None:
    sha = _git_repo(tmp_path / "repo", {"w.yml": MATRIX_WORKFLOW})
    github = GitHub(tmp_path / "repo", tmp_path / "services", tmp_path / "work")
    runs = github.run("w.yml", Event("push", "refs/tags/v1.2.3", sha))
    builds = [run for run in runs if run.job == "build"]
    assert [(r.matrix["target"]["builder"], r.matrix["level"], r.runs_on) for r in builds] == [
        ("a", "v2", "a-runner"),
        ("a", "v3", "a-runner"),
        ("b", "v2", "b-runner"),
        ("b", "v3", "b-runner"),
    ]
    homes = set()
    for run in builds:
        assert run.runner is not None
        who = (run.runner.temp / "who").read_text()
        entry = f"{run.matrix['target']['builder']}-{run.matrix['level']}"
        assert who == f"{entry} tag v1.2.3 example/project\n"
        homes.add(run.runner.home)
    assert len(homes) == 4  # a fresh runner each
    assert [r.status for r in runs if r.job == "publish"] == ["skipped"]


def test_a_failing_step_or_an_unknown_action_stops_the_run(tmp_path: Path) -> None:
    failing = MATRIX_WORKFLOW.replace('test "$HOME" != "$OLDHOME"', "false")
    unknown = MATRIX_WORKFLOW.replace(
        "      - id: plan\n", "      - uses: someone/thing@v1\n      - id: plan\n"
    )
    sha = _git_repo(tmp_path / "repo", {"failing.yml": failing, "unknown.yml": unknown})
    github = GitHub(tmp_path / "repo", tmp_path / "services", tmp_path / "work")
    with pytest.raises(WorkflowError, match="job\\(s\\) failed: build"):
        github.run("failing.yml", Event("push", "refs/tags/v1.2.3", sha))
    with pytest.raises(WorkflowError, match="no stand-in for this action"):
        github.run("unknown.yml", Event("push", "refs/tags/v1.2.3", sha))


def _job(tmp_path: Path, ref: str) -> JobState:
    runner = Runner(tmp_path / f"runner-{len(list(tmp_path.glob('runner-*')))}", "job")
    return JobState(
        runner, tmp_path, "0" * 40, ref, [],
        CacheStore(tmp_path / "cache"), ArtifactStore(tmp_path / "artifacts"),
    )  # fmt: skip


CACHE = "actions/cache/{}@5a3ec84eff668545956fd18022155c47e93e2684"


def test_the_cache_is_keyed_and_scoped_as_actions_cache_does(tmp_path: Path) -> None:
    paths = "~/.cache/orchestrator/profiles\n~/.cache/orchestrator/crates\n"
    main = _job(tmp_path, "refs/heads/main")
    (main.runner.home / ".cache/orchestrator/profiles").mkdir(parents=True)
    (main.runner.home / ".cache/orchestrator/profiles/p").write_text("main's")
    run_action(CACHE.format("save"), {"path": paths, "key": "k-a-1"}, main)
    # another path list is another version: not found
    other = _job(tmp_path, "refs/tags/v1")
    missed = run_action(CACHE.format("restore"), {"path": "~/x", "key": "k-a-1"}, other)
    assert missed["cache-hit"] == "false"
    hit = run_action(CACHE.format("restore"), {"path": paths, "key": "k-a-1"}, other)
    assert hit["cache-hit"] == "true"
    assert (other.runner.home / ".cache/orchestrator/profiles/p").read_text() == "main's"
    # a restore key: the newest entry whose key starts with it, the current ref first
    tag = _job(tmp_path, "refs/tags/v1")
    (tag.runner.home / ".cache/orchestrator/profiles").mkdir(parents=True)
    (tag.runner.home / ".cache/orchestrator/profiles/p").write_text("the tag's")
    run_action(CACHE.format("save"), {"path": paths, "key": "k-a-2"}, tag)
    later = _job(tmp_path, "refs/tags/v1")
    partial = run_action(
        CACHE.format("restore"), {"path": paths, "key": "k-a-3", "restore-keys": "k-a-\n"}, later
    )
    assert (partial["cache-hit"], partial["cache-matched-key"]) == ("false", "k-a-2")
    # another tag sees the default branch's entries, not this tag's
    sibling = _job(tmp_path, "refs/tags/v2")
    seen = run_action(
        CACHE.format("restore"), {"path": paths, "key": "k-a-3", "restore-keys": "k-a-"}, sibling
    )
    assert seen["cache-matched-key"] == "k-a-1"


def test_a_tag_build_never_restores_built_binaries(tmp_path: Path) -> None:
    paths = "~/.cache/orchestrator/steps\n"
    branch = _job(tmp_path, "refs/heads/main")
    (branch.runner.home / ".cache/orchestrator/steps/k").mkdir(parents=True)
    run_action(CACHE.format("save"), {"path": paths, "key": "steps-1"}, branch)
    run_action(
        CACHE.format("restore"),
        {"path": paths, "key": "steps-1"},
        _job(tmp_path, "refs/heads/main"),
    )
    with pytest.raises(WorkflowError, match="built binaries"):
        run_action(
            CACHE.format("restore"),
            {"path": paths, "key": "steps-1"},
            _job(tmp_path, "refs/tags/v1"),
        )


def test_stand_ins_are_for_the_pinned_commit_and_their_own_inputs(tmp_path: Path) -> None:
    job = _job(tmp_path, "refs/tags/v1")
    with pytest.raises(WorkflowError, match="the stand-in is for actions/cache/save@5a3e"):
        run_action("actions/cache/save@v4", {"path": "x", "key": "k"}, job)
    with pytest.raises(WorkflowError, match="does not know the input"):
        run_action(
            CACHE.format("save"), {"path": "x", "key": "k", "enableCrossOsArchive": "true"}, job
        )


def test_artifacts_lose_their_modes_and_names_are_uploaded_once(tmp_path: Path) -> None:
    job = _job(tmp_path, "refs/tags/v1")
    (job.runner.temp / "a.tar").write_text("tar")
    (job.runner.temp / "a.tar").chmod(0o755)
    upload = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"
    download = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093"
    inputs = {
        "name": "target-a",
        "path": str(job.runner.temp / "a.tar"),
        "if-no-files-found": "error",
    }
    run_action(upload, inputs, job)
    with pytest.raises(WorkflowError, match="exists"):
        run_action(upload, inputs, job)
    with pytest.raises(WorkflowError, match="no files"):
        run_action(upload, {**inputs, "name": "b", "path": str(job.runner.temp / "none")}, job)
    run_action(download, {"pattern": "target-*", "path": "got", "merge-multiple": "true"}, job)
    got = job.runner.workspace / "got" / "a.tar"
    assert got.read_text() == "tar"
    assert got.stat().st_mode & 0o777 == 0o644


def test_hash_files_combines_each_files_sha256(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    expected = hashlib.sha256(hashlib.sha256(b"a").digest() + hashlib.sha256(b"b").digest())
    assert hash_files(tmp_path, "a", "b") == expected.hexdigest()
    assert hash_files(tmp_path, "b", "a") != expected.hexdigest()
    assert hash_files(tmp_path, "missing") == ""


def test_the_fake_gh_records_uploads_and_refuses_the_unknown(tmp_path: Path) -> None:
    runner = Runner(tmp_path / "runner", "assemble")
    runner.install_gh(tmp_path / "releases", "o/r", ["v1.2.3"])
    (tmp_path / "f.txt").write_text("asset")
    env = {"PATH": f"{runner.shims}:/usr/bin:/bin", "GH_TOKEN": "t", "GH_REPO": "o/r"}

    def gh(*args: str, **more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["gh", *args], env={**env, **more}, capture_output=True, text=True, check=False
        )

    assert gh("release", "view", "v1.2.3").returncode == 1
    assert (
        gh("release", "create", "v9", "--verify-tag", "--title", "v9", "--notes", "n").returncode
        == 1
    )
    assert (
        gh("release", "create", "v1.2.3", "--verify-tag", "--title", "t", "--notes", "n").returncode
        == 0
    )
    assert gh("release", "upload", "v1.2.3", str(tmp_path / "f.txt"), "--clobber").returncode == 0
    assert (tmp_path / "releases/v1.2.3/assets/f.txt").read_text() == "asset"
    assert json.loads(gh("release", "view", "v1.2.3").stdout) == {"--title": "t", "--notes": "n"}
    assert gh("release", "delete", "v1.2.3").returncode == 2
    assert gh("release", "view", "v1.2.3", GH_REPO="other/repo").returncode == 1
    assert gh("release", "view", "v1.2.3", GH_TOKEN="").returncode == 4
    assert sys.executable  # the stand-in runs with the test's interpreter


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("$CI_COMMIT_TAG =~ /^v/", True),
        ("$CI_COMMIT_TAG =~ /^V/", False),
        ("$CI_COMMIT_TAG =~ /^V/i", True),
        ('$CI_COMMIT_TAG && $CI_COMMIT_REF_PROTECTED == "true"', True),
        ('$CI_COMMIT_TAG && $CI_COMMIT_REF_PROTECTED == "false"', False),
        ("$UNSET", False),
        ("$EMPTY", False),
        ("$UNSET == null", True),
        ("($UNSET || $CI_COMMIT_TAG) && $CI_COMMIT_TAG !~ /rc/", True),
    ],
)
def test_gitlab_rules_evaluate_as_gitlab_does(rule: str, expected: bool) -> None:
    variables = {"CI_COMMIT_TAG": "v1.2.3", "CI_COMMIT_REF_PROTECTED": "true", "EMPTY": ""}
    assert rule_matches(rule, variables) is expected


def test_gitlab_expansion_and_matrix() -> None:
    known = {"CI_PROJECT_DIR": "/p", "FLAVOR": "cpu", "LEVEL": "x86-64-v2"}
    assert expand("$CI_PROJECT_DIR/.cache", known) == "/p/.cache"
    assert expand("o-${FLAVOR}-$LEVEL", known) == "o-cpu-x86-64-v2"
    with pytest.raises(WorkflowError, match="no variable defines"):
        expand("$NOPE", known)
    with pytest.raises(WorkflowError, match="cannot read"):
        rule_matches("$A = 'x'", {})
    assert _matrix("build", {"matrix": [{"LEVEL": ["v2", "v3"], "BUILDER": "b"}]}) == [
        ("build: [v2, b]", {"LEVEL": "v2", "BUILDER": "b"}),
        ("build: [v3, b]", {"LEVEL": "v3", "BUILDER": "b"}),
    ]
    with pytest.raises(WorkflowError, match="only matrix"):
        _matrix("build", 3)


GITLAB_PIPELINE = """\
workflow:
  rules:
    - if: $CI_COMMIT_TAG =~ /^v/
stages: [plan, build, publish]
variables:
  GREETING: hello
default:
  image: python:3.12-bookworm
  before_script:
    - apt-get update -qq
plan:
  stage: plan
  script:
    - mkdir -p out && echo "$GREETING from $CI_COMMIT_TAG" > out/plan.txt
  artifacts:
    paths: [out/plan.txt]
build:
  stage: build
  needs: [plan]
  variables:
    WHERE: $CI_PROJECT_DIR/cache
  parallel:
    matrix:
      - LEVEL: [v2, v3]
  cache:
    key:
      files: [file.txt]
      prefix: c-$LEVEL
    paths: [cache]
  script:
    - test -f out/plan.txt
    - if [ -f cache/seen ]; then state=restored; else state=cold; fi
    - echo "$state" > "out/$LEVEL.txt"
    - mkdir -p cache && touch cache/seen
  artifacts:
    paths: ["out/*.txt"]
publish:
  stage: publish
  needs: [plan, build]
  rules:
    - if: $CI_COMMIT_TAG && $CI_COMMIT_REF_PROTECTED == "true"
  script:
    - |
      for file in out/*.txt; do
        url="$CI_API_V4_URL/projects/$CI_PROJECT_ID/packages/generic/p/1.0/${file#out/}"
        curl --fail-with-body --silent --show-error --header "JOB-TOKEN: $CI_JOB_TOKEN" \\
          --upload-file "$file" "$url"
      done
"""


def test_a_gitlab_pipeline_runs_stage_by_stage_with_artifacts_cache_and_registry(
    tmp_path: Path,
) -> None:

    sha = _git_repo(tmp_path / "repo", {".gitlab-ci.yml": GITLAB_PIPELINE, "file.txt": "x"})
    gitlab = GitLab(tmp_path / "repo", tmp_path / "services", tmp_path / "work")
    runs, registry = gitlab.run(".gitlab-ci.yml", "v1.2.3", sha)
    assert [r.title for r in runs] == ["plan", "build: [v2]", "build: [v3]", "publish"]
    published = registry.files(gitlab.project_id, "p", "1.0")
    assert sorted(p.name for p in published.iterdir()) == ["plan.txt", "v2.txt", "v3.txt"]
    assert (published / "plan.txt").read_text() == "hello from v1.2.3\n"
    assert (published / "v2.txt").read_text() == "cold\n"
    # the second pipeline restores what the first saved, by key
    runs, registry = gitlab.run(".gitlab-ci.yml", "v1.2.3", sha)
    published = registry.files(gitlab.project_id, "p", "1.0")
    assert (published / "v3.txt").read_text() == "restored\n"
    # an unprotected tag: the publish job's rule leaves it out
    gitlab.protected_tags = ()
    runs, _ = gitlab.run(".gitlab-ci.yml", "v1.2.3", sha)
    assert [r.title for r in runs][-1] == "build: [v3]"
