"""The build-time `git` shim: its answers, run with the host's /bin/sh, against real git
in a repository of known commits; the facts read from a checkout; their place in the plan
and the lock."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import tarfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.config.resolve.toolchains import load_base_spec, load_distros, load_toolchain
from orchestrator.execute.optimize import variants
from orchestrator.flavors import get_flavor
from orchestrator.host.git_facts import read_git_facts, shim_archive
from orchestrator.host.inputs import pack_inputs
from orchestrator.host.source import snapshot
from orchestrator.model.documents.git_facts import GitFacts
from orchestrator.model.documents.lockfile import LockInputs, dumps, parse_lock
from orchestrator.model.layout import PATHS
from orchestrator.plan.build_plan import BuildPlan, make_plan
from orchestrator.plan.dockerfiles import image_packages, render_dockerfile
from orchestrator.plan.git_shim import IMAGE_PATH, SHIM_PATH, SHIM_SEARCH_PATH, render_shim
from orchestrator.plan.serialize import action_key, plan_inputs
from orchestrator.plan.step_keys import baseline_key, cargo_test_key
from orchestrator.release.lock.reproduce import differing_inputs

from .conftest import FAKE_SOURCE, plan_for
from .execute_rig import make_options, make_rig
from .test_lockfile import lock_for

REPO_ROOT = Path(__file__).resolve().parents[2]
MESSAGE = "is not answered by orchestrator's build-time git"


def _git(repo: Path, *args: str, when: str = "2024-03-05T10:20:30+01:00") -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Ann Author",
        "GIT_AUTHOR_EMAIL": "ann@example.org",
        "GIT_COMMITTER_NAME": "Cy Committer",
        "GIT_COMMITTER_EMAIL": "cy@example.org",
        "GIT_AUTHOR_DATE": when,
        "GIT_COMMITTER_DATE": when,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three commits on `main`: an annotated tag v1.0 on the first, a light tag v1.1-rc on
    the second, HEAD one past it; a subject with quotes and a dollar sign."""
    path = tmp_path_factory.mktemp("repo")
    _git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("a\n")
    _git(path, "add", "a.txt")
    _git(path, "commit", "-q", "-m", "first", when="2024-03-01T08:00:00+01:00")
    _git(path, "tag", "-a", "v1.0", "-m", "one", when="2024-03-01T08:00:00+01:00")
    _git(path, "commit", "-q", "--allow-empty", "-m", "second", when="2024-03-02T09:00:00+01:00")
    _git(path, "tag", "v1.1-rc")
    _git(path, "commit", "-q", "--allow-empty", "-m", 'it\'s $HOME "quoted" %s')
    return path


@pytest.fixture(scope="module")
def shim(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    facts = read_git_facts(repo, dirty=False)
    assert facts is not None
    path = tmp_path_factory.mktemp("shim") / "git"
    path.write_text(render_shim(facts, top=str(repo)))
    return path


def _shim(shim: Path, *args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        ["/bin/sh", str(shim), *args], capture_output=True, text=True, cwd=cwd, check=False
    )
    return done.returncode, done.stdout, done.stderr


def _real(repo: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=repo, check=False)
    return done.returncode, done.stdout


# Every form answered, each printing exactly what git prints in the checkout.
SAME_AS_GIT = [
    "rev-parse HEAD",
    "rev-parse --short HEAD",
    "rev-parse --short=9 HEAD",
    "rev-parse --short=2 HEAD",
    "rev-parse --verify HEAD",
    "rev-parse --abbrev-ref HEAD",
    "rev-parse --symbolic-full-name HEAD",
    "rev-parse --abbrev-ref --symbolic-full-name HEAD",
    "rev-parse --show-toplevel",
    "rev-parse --is-inside-work-tree",
    "-C . --no-pager rev-parse HEAD",
    "describe",
    "describe --tags",
    "describe --always",
    "describe --tags --always --dirty",
    "describe --long",
    "describe --tags --long --abbrev=10",
    "describe --tags --abbrev=0",
    "describe --abbrev=0 HEAD",
    "describe --always --match v1.0*",
    "describe --tags --match v1.1*",
    "log -1 --format=%H",
    "log -1 --format=%h|%T|%t|%P|%p",
    "log -1 --format=%an|%ae|%ad|%aI|%ai|%as|%at",
    "log -1 --format=%cn|%ce|%cd|%cI|%ci|%cs|%ct",
    "log -1 --format=%s",
    "log -1 --format=%%%n%h",
    "log -1 --pretty=format:%cI",
    "log -1 --pretty=tformat:%cs",
    "log -1 --pretty=%ct",
    "log -n 1 --format=%H HEAD",
    "log --max-count=1 --date=short --format=%cd",
    "log -1 --date=iso-strict --format=%ad",
    "log -1 --date=unix --format=%cd",
    "log -1 --oneline",
    "log -1 --pretty=oneline",
    "show -s --format=%ci HEAD",
    "show --no-patch --format=%H",
    "status --porcelain",
    "status --porcelain --untracked-files=no",
    "status -s",
    "branch --show-current",
    "symbolic-ref HEAD",
    "symbolic-ref --short HEAD",
    "rev-list --count HEAD",
]


@pytest.mark.parametrize("query", SAME_AS_GIT)
def test_answers_as_git_does(repo: Path, shim: Path, query: str) -> None:
    args = shlex.split(query)
    code, out, err = _shim(shim, *args, cwd=repo)
    assert (code, out) == _real(repo, *args), err


def test_known_answers(repo: Path, shim: Path) -> None:
    """Not only equal to git: the values themselves."""
    head = _git(repo, "rev-parse", "HEAD").strip()
    assert _shim(shim, "rev-parse", "--short=9", "HEAD")[1] == head[:9] + "\n"
    assert _shim(shim, "describe", "--tags")[1] == f"v1.1-rc-1-g{head[:7]}\n"
    assert _shim(shim, "describe")[1] == f"v1.0-2-g{head[:7]}\n"
    assert _shim(shim, "log", "-1", "--format=%s")[1] == 'it\'s $HOME "quoted" %s\n'
    assert _shim(shim, "log", "-1", "--format=%cI")[1] == "2024-03-05T10:20:30+01:00\n"
    assert _shim(shim, "--version")[1].startswith("git version ")


@pytest.mark.parametrize(
    "query",
    [
        "fetch",
        "checkout main",
        "log --format=%H",  # the whole history: not recorded
        "log -1",  # the medium format needs the message body
        "log -1 --format=%b",
        "log -1 --format=%D",
        "show --format=%H",  # with the diff
        "rev-parse HEAD~1",
        "rev-parse --short=x HEAD",
        "describe --contains",
        "describe --match v9*",  # the nearest tag does not match: the next one is unknown
        "describe --always --match v1.1*",  # (annotated tags only: v1.0 is the nearest)
        "status",
        "branch",
        "rev-list HEAD",
        "",
    ],
)
def test_refuses_what_it_cannot_answer(shim: Path, query: str) -> None:
    code, out, err = _shim(shim, *shlex.split(query))
    assert code == 128
    assert out == ""
    assert err.startswith(f"fatal: git {query}".rstrip()) and MESSAGE in err


def _facts(**changes: object) -> GitFacts:
    base = GitFacts(
        commit="0123456789abcdef0123456789abcdef01234567",
        abbrev=8,
        commit_time=1700000000,
        branch=None,
        commit_count=5,
        tag=None,
        annotated_tag=None,
        dirty=False,
        placeholders={"H": "0123456789abcdef0123456789abcdef01234567", "s": "x"},
    )
    return base.model_copy(update=changes)


def _write(tmp_path: Path, facts: GitFacts) -> Path:
    path = tmp_path / "git"
    path.write_text(render_shim(facts))
    return path


def test_detached_untagged_dirty(tmp_path: Path) -> None:
    shim = _write(tmp_path, _facts(dirty=True))
    assert _shim(shim, "rev-parse", "--abbrev-ref", "HEAD")[1] == "HEAD\n"
    assert _shim(shim, "branch", "--show-current") == (0, "", "")
    assert _shim(shim, "symbolic-ref", "-q", "HEAD") == (1, "", "")
    assert _shim(shim, "symbolic-ref", "HEAD")[0] == 128
    assert _shim(shim, "rev-parse", "--short", "HEAD")[1] == "01234567\n"  # the checkout's 8
    assert _shim(shim, "rev-parse", "--show-toplevel")[1] == "/build/src\n"
    code, _, err = _shim(shim, "describe", "--tags")
    assert (code, err) == (128, "fatal: No names found, cannot describe anything.\n")
    assert _shim(shim, "describe", "--always", "--dirty")[1] == "01234567-dirty\n"
    assert _shim(shim, "describe", "--always", "--dirty=+", "--abbrev=12")[1] == "0123456789ab+\n"
    assert _shim(shim, "status", "--porcelain")[1] == " M .\n"


def test_same_facts_same_bytes() -> None:
    facts = _facts(branch="main")
    assert render_shim(facts) == render_shim(_facts(branch="main"))
    assert render_shim(facts) != render_shim(_facts(branch="other"))
    one = shim_archive(facts, mtime=1700000000, uid=0)
    assert one == shim_archive(facts, mtime=1700000000, uid=0)
    with tarfile.open(fileobj=io.BytesIO(one)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert list(members) == [SHIM_PATH[1:]]  # no folder: those of the image stay as they are
        shim = members[SHIM_PATH[1:]]
        assert shim.mode == 0o555 and shim.mtime == 1700000000
        handle = tar.extractfile(shim)
        assert handle is not None and handle.read() == render_shim(facts).encode()


def test_no_repository_no_facts(tmp_path: Path) -> None:
    assert read_git_facts(tmp_path, dirty=False) is None


def test_vergen_gitcl_commands_through_path(repo: Path, shim: Path, tmp_path: Path) -> None:
    """vergen-gitcl 1.x's commands (vergen-gitcl/src/gitcl/mod.rs), in its order, through
    `sh -c` as it runs them, finding `git` on PATH as a build script does in the build
    container. (`rev-parse --git-dir` names /build/src/.git there, which does not exist:
    vergen then emits no rerun-if-changed for it.)"""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "git").write_text(shim.read_text())
    (folder / "git").chmod(0o555)
    commands = [
        "git --version",
        "git rev-parse --is-inside-work-tree",
        "git symbolic-ref HEAD",
        "git rev-parse --abbrev-ref --symbolic-full-name HEAD",
        "git log -1 --pretty=format:'%ae'",
        "git log -1 --pretty=format:'%an'",
        "git rev-list --count HEAD",
        "git log -1 --pretty=format:'%cI'",
        "git log -1 --pretty=format:'%cs'",
        "git log -1 --format=%s",
        "git describe --always",
        "git describe --always --dirty --tags",
        'git describe --always --dirty --tags --match "v1*"',
        "git rev-parse HEAD",
        "git rev-parse --short HEAD",
        "git status --porcelain",
        "git status --porcelain --untracked-files=no",
    ]
    for command in commands:
        ours = subprocess.run(
            ["/bin/sh", "-c", command],
            capture_output=True,
            text=True,
            check=False,
            cwd=repo,
            env={"PATH": f"{folder}:{IMAGE_PATH}"},
        )
        real = subprocess.run(
            ["/bin/sh", "-c", command], capture_output=True, text=True, cwd=repo, check=False
        )
        if command == "git --version":
            assert ours.returncode == 0 and ours.stdout.startswith("git version ")
            continue
        assert (ours.returncode, ours.stdout) == (real.returncode, real.stdout), command


def test_image_path_is_the_templates() -> None:
    """The shim's folder goes in front of the toolchain images' own PATH."""
    template = (REPO_ROOT / "images/templates/toolchain.Dockerfile.j2").read_text()
    assert f"PATH={IMAGE_PATH}" in template


def _plan(project: Path, facts: GitFacts | None) -> BuildPlan:
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    flavor = get_flavor("cpu")
    toolchain = load_toolchain("rustc-web-1.96")
    return make_plan(
        options,
        flavor,
        toolchain=toolchain,
        base=load_base_spec(),
        dockerfile=render_dockerfile(flavor, toolchain),
        packages=image_packages(flavor, toolchain),
        source=replace(FAKE_SOURCE, git=facts),
        inputs=pack_inputs(options.train_inputs),
        distros=load_distros(),
    )


def test_plan_records_the_facts(project: Path) -> None:
    without, facts = _plan(project, None), _facts(branch="main")
    with_git = _plan(project, facts)
    other = _plan(project, _facts(branch="main", commit="f" * 40))
    # Every cargo step finds the shim first; without a repository, PATH is the image's.
    for plan_ in (with_git,):
        commands = [v.build for v in plan_.variants.values()] + [plan_.test]
        assert all(c.environment["PATH"] == SHIM_SEARCH_PATH for c in commands)
    assert "PATH" not in without.build.environment
    assert "PATH" not in with_git.fetch.environment  # cargo vendor runs no build script
    # The facts are inputs: of the lock's target entry, the action key, the step keys.
    inputs = plan_inputs(with_git)
    assert inputs["git"] == facts.dump()
    assert LockInputs.model_validate(inputs).git == facts
    assert plan_inputs(without)["git"] is None  # recorded: build scripts saw no git
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert action_key(with_git, options) != action_key(other, options)
    assert baseline_key(with_git) != baseline_key(other)
    assert cargo_test_key(with_git, None) != cargo_test_key(other, None)
    assert baseline_key(with_git) == baseline_key(_plan(project, _facts(branch="main")))


def test_the_build_container_gets_the_shim_before_cargo(project: Path, tmp_path: Path) -> None:
    options = make_options(project)
    facts = _facts(branch="main")
    source = snapshot(options.crate_dir, options.source_date_epoch, options.source_exclude)
    plan = replace(plan_for(options), source=replace(source, git=facts))
    with ExitStack() as stack:
        rig = make_rig(options, stack, tmp_path, plan=plan)
        vendor = tmp_path / "vendor.tar"
        vendor.write_bytes(b"vendored")
        rig.pipeline.state.vendor = vendor
        variants.build_baseline(rig.pipeline, rig.log)
        shim = shim_archive(facts, mtime=options.source_date_epoch, uid=0)
        assert rig.box.puts == [(PATHS.root, b"vendored"), ("/", shim)]
        assert rig.box.argvs[0] == plan.variants["baseline"].build.argv  # after the shim
    assert f"<build-time git of {facts.commit[:12]}> {SHIM_PATH}" in rig.text


def test_the_lock_pins_the_facts_and_reproduce_compares_them(project: Path) -> None:
    facts = _facts(branch="main")
    plan = _plan(project, facts)
    document = lock_for(plan)
    source = document.source.model_copy(update={"git": facts})
    document = document.model_copy(update={"source": source})
    again = parse_lock(json.loads(dumps(document)), "release.lock")
    assert again.source.git == facts and again.targets[0].inputs.git == facts
    target = again.targets[0]
    # reproduce plans with the lock's facts: nothing differs; another commit is named.
    assert differing_inputs(again, target, _plan(project, again.source.git)) == []
    moved = differing_inputs(again, target, _plan(project, _facts(commit="f" * 40)))
    assert any("git.commit" in line for line in moved), moved
