"""A tag pushed through the CI files `orchestrator ci` writes, each run end to end by the
workflow executor (tests/ci_executor): GitHub's release.yml twice (the second run is the
tag's re-run, with the cache the first saved) and GitLab's .gitlab-ci.yml once, with
`[ci] verify = "rebuild"`: two builders build each target and assemble signs only what
they agree on. What the fake `gh` and the package registry received is, byte for byte,
what a one-shot `orchestrator release` of the same commit publishes, SHA256SUMS and the
provenance included: how a build went (times, statuses, engines, reused steps) is kept in
unsigned logs/ records that nothing signed or published lists. `verify --key` passes on
it, and the re-run compiles less: it uses the stored PGO profiles. The one-shot release
run again is a no-op: it writes nothing. Orchestrator reaches the runners as a wheel of this
checkout, pinned by its sha256 in `[ci] install`.

Per-job wall times and cargo builds are printed (pytest -s shows them)."""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from orchestrator.config.resolve.options import resolve_cache_dir
from tests.ci_executor.github import Event, GitHub, JobRun
from tests.ci_executor.gitlab import GitLab
from tests.ci_executor.runner import checkout, git
from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration
FIXTURE = REPO / "tests" / "fixtures" / "ci-release"
TAG = "v0.0.1"
RELEASE = "ci-release-0.0.1"
# What the generated files publish: their upload loop's list, archives first.
PUBLISHED = (
    "install.sh", "install.sh.minisig", "SHA256SUMS", "SHA256SUMS.minisig",
    "provenance.intoto.jsonl", "provenance.intoto.jsonl.minisig", "release.lock",
    "release.lock.minisig", "minisign.pub",
)  # fmt: skip
# The -auto archive is compared too: a build job's target folder carries the dispatcher
# it compiled, so the assemble job composes -auto as a one-shot release does.
AUTO = f"{RELEASE}-linux-x86_64-cpu-auto"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.com",
    "GIT_COMMITTER_NAME": "ci", "GIT_COMMITTER_EMAIL": "ci@example.com",
    "GIT_AUTHOR_DATE": "2023-11-14T22:13:20Z", "GIT_COMMITTER_DATE": "2023-11-14T22:13:20Z",
}  # fmt: skip


@dataclass(frozen=True)
class Project:
    repo: Path  # the repository pushed to
    sha: str  # the tagged commit
    key: Path  # the minisign secret key (unencrypted, as a CI secret holds it)
    public: Path
    one_shot: Path  # the one-shot release's folder
    seconds: float  # its wall time


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, check=True, timeout=120)


def _wheel(into: Path) -> tuple[Path, str]:
    """A wheel of this checkout, as a release's would be: its path and sha256."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(into), str(REPO)],
        check=True,
        timeout=600,
    )
    (wheel,) = into.glob("rust_release_orchestrator-*.whl")
    return wheel, hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def project(
    tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient
) -> Project:
    """The fixture crate in a repository of its own, `[ci] install` naming the wheel, both
    CI files written and committed, the tag pushed; and its one-shot release."""
    root = tmp_path_factory.mktemp("ci")
    wheel, digest = _wheel(root / "wheel")
    keys = root / "keys"
    made = orchestrator(["keygen", "--unencrypted", str(keys / "release.key")])
    assert made.returncode == 0, made.output
    repo = root / "repo"
    shutil.copytree(FIXTURE, repo)
    shutil.copyfile(keys / "release.pub", repo / "minisign.pub")
    with (repo / "orchestrator.toml").open("a") as config:
        config.write(f'\n[ci]\ninstall = "{wheel.as_uri()}#sha256={digest}"\nverify = "rebuild"\n')
    _git("init", "-q", "-b", "main", cwd=repo)
    for provider in ("github", "gitlab"):
        written = orchestrator(
            ["ci", provider, "--config", str(repo / "orchestrator.toml"),
             "--public-key", str(repo / "minisign.pub")]
        )  # fmt: skip
        assert written.returncode == 0, written.output
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "release 0.0.1", cwd=repo)
    _git("tag", TAG, cwd=repo)
    sha = git("rev-parse", "HEAD", cwd=repo).strip()
    # the one-shot release of the same commit, from a clean checkout of the tag
    clone = root / "one-shot" / "repo"
    checkout(repo, sha, f"refs/tags/{TAG}", clone)
    started = time.monotonic()
    run = orchestrator(
        ["release", "--config", str(clone / "orchestrator.toml"),
         "--artifacts-dir", str(root / "one-shot" / "artifacts")],
        env={"ORCHESTRATOR_SIGNING_KEY": str(keys / "release.key")},
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.output
    assert managed_containers(docker_client) == []
    release = root / "one-shot" / "artifacts" / RELEASE
    # Released again, every target current: nothing is written, not even an mtime
    before = _files(release)
    again = orchestrator(
        ["release", "--config", str(clone / "orchestrator.toml"),
         "--artifacts-dir", str(root / "one-shot" / "artifacts")],
        env={"ORCHESTRATOR_SIGNING_KEY": str(keys / "release.key")},
    )  # fmt: skip
    assert again.returncode == 0, again.output
    assert f"{RELEASE} is current" in again.output, again.output
    assert _files(release) == before
    return Project(repo, sha, keys / "release.key", keys / "release.pub", release, seconds)


def _files(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file below `folder`: its mtime (ns) and sha256."""
    return {
        path.relative_to(folder).as_posix(): (
            path.stat().st_mtime_ns,
            hashlib.sha256(path.read_bytes()).hexdigest(),
        )
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _expected(release: Path) -> list[str]:
    archives = sorted(p.name for p in release.glob("*.tar.xz*"))
    assert f"{AUTO}.tar.xz" in archives  # the one-shot release composes the -auto folder
    return sorted([*archives, *(name for name in PUBLISHED if (release / name).is_file())])


def _same_as_one_shot(received: Path, project: Project, signed: Path | None = None) -> None:
    """Every published file is the one-shot release's, byte for byte, with no exception:
    what is signed and published is a function of the inputs alone. On a difference, the
    message shows it, and which files of the release folder the assemble job signed
    (`signed`) differ from the one-shot's (their logs/ aside: never signed)."""
    names = _expected(project.one_shot)
    assert sorted(p.name for p in received.iterdir()) == names
    differing = [
        name for name in names
        if (received / name).read_bytes() != (project.one_shot / name).read_bytes()
    ]  # fmt: skip
    if not differing:
        return
    shown = [_difference(received / name, project.one_shot / name) for name in differing]
    if signed is not None:
        ours, theirs = _files(signed), _files(project.one_shot)
        inside = sorted(
            name for name in ours.keys() | theirs.keys()
            if "logs/" not in name and ours.get(name, (0, ""))[1] != theirs.get(name, (0, ""))[1]
        )  # fmt: skip
        shown.append(f"release folders differ in: {inside}")
        shown += [
            _difference(signed / name, project.one_shot / name)
            for name in inside
            if name.endswith(".json") and name in ours and name in theirs
        ]
    raise AssertionError("\n".join(shown))


def _difference(got: Path, want: Path) -> str:
    """What differs between two text files (a DSSE envelope: its statements), as a diff."""
    texts = []
    for path in (got, want):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            return f"{got.name}: binary, {got.stat().st_size} against {want.stat().st_size} bytes"
        if path.name.endswith(".jsonl"):
            payloads = [json.loads(line)["payload"] for line in text.splitlines()]
            text = "".join(
                json.dumps(json.loads(base64.b64decode(p)), indent=1, sort_keys=True) + "\n"
                for p in payloads
            )
        texts.append(text.splitlines(keepends=True))
    diff = difflib.unified_diff(texts[1], texts[0], "one-shot", f"published {got.name}", n=1)
    return "".join(list(diff)[:80])


def _verified(received: Path, release: Path, public: Path) -> None:
    """`verify --key` of the release the assemble job signed (`release`, on its runner),
    and what a user checks of the files published: each signature, and each file against
    the signed SHA256SUMS (`orchestrator verify` needs the artifact folders, which are
    published only inside the archives)."""
    run = orchestrator(["verify", str(release), "--key", str(public)])
    assert run.returncode == 0, run.output
    for signature in received.glob("*.minisig"):
        signed = signature.with_suffix("")
        checked = subprocess.run(
            ["minisign", "-Vm", str(signed), "-p", str(public)],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert checked.returncode == 0, f"{signed.name}: {checked.stdout}{checked.stderr}"
    listed: dict[str, str] = {}
    for line in (received / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
    for path in received.iterdir():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if path.name in listed:
            assert listed[path.name] == digest, path.name
        else:  # what SHA256SUMS cannot list, and what has a signature of its own
            own = (received / f"{path.name}.minisig").is_file()
            assert own or path.name == "minisign.pub" or path.suffix == ".minisig", path.name


def _cargo_builds(runs: list[JobRun], logs: Path) -> int:
    """`cargo build` commands the build jobs ran themselves, from the logs in the target
    folders they uploaded (a reused step's log goes on with the run that made it)."""
    count = 0
    for run in runs:
        if run.job.startswith("build") and run.runner is not None:
            for archive in run.runner.temp.glob(f"{RELEASE}-*.tar"):
                into = logs / archive.stem
                with tarfile.open(archive) as tar:
                    tar.extractall(into, filter="data")
                for log in into.rglob("logs/*.log"):
                    text = log.read_text()
                    own = text[: text.index("--- the ")] if "--- the " in text else text
                    count += sum(
                        1 for line in own.splitlines()
                        if line.startswith("+ ") and "cargo" in line and " build " in line
                    )  # fmt: skip
    return count


def _image_builds(logs: Path) -> int:
    """Toolchain images the build jobs made themselves (their logs/run.json, extracted by
    _cargo_builds): not found on the engine, nor loaded from the CI cache."""
    runs = [json.loads(path.read_text()) for path in logs.rglob("logs/run.json")]
    assert runs, f"no run.json below {logs}"
    return sum(1 for run in runs if run["images"]["toolchain"]["built_this_run"])


def _image_cache_used(first: list[JobRun], second: list[JobRun]) -> None:
    """The toolchain image's archive: saved by builder a's jobs of the tag's first run,
    restored and checked by them on the re-run (this machine's one engine holds the image
    already, so it is compared, not loaded: the same image id); builder b's jobs of a tag
    neither restore nor save it (they make their own compiler)."""
    for runs, wanted in (
        (first, r"image cache: (saved|\S+ holds) orchestrator/cpu:\S+"),
        (
            second,
            r"image cache: (loaded orchestrator/cpu:\S+|orchestrator/cpu:\S+ is on this "
            r"engine already \(the archive's\))",
        ),
    ):
        for run in runs:
            if run.job != "build" or run.runner is None:
                continue
            log = run.runner.log.read_text()
            if run.matrix["target"]["builder"] == "a":
                assert re.search(wanted, log), log[-3000:]
            else:
                assert "image cache:" not in log, log[-3000:]
                assert "orchestrator-image-" not in log, log[-3000:]


def _report(what: str, runs: list[JobRun]) -> None:
    lines = [f"{what}: {sum(r.seconds for r in runs):.0f} s of jobs"]
    lines += [f"  {r.title:<60} {r.status:<8} {r.seconds:6.1f} s" for r in runs]
    sys.stdout.write("\n".join(lines) + "\n")


def test_a_tag_through_github_actions_publishes_the_one_shot_release(
    project: Project, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    github = GitHub(
        project.repo, tmp_path / "github", tmp_path / "runners",
        repository="example/ci-release",
        secrets={
            "MINISIGN_SECRET_KEY": project.key.read_text(),
            "ORCHESTRATOR_CACHE_KEY": secrets.token_hex(32),
        },
        image_cache=resolve_cache_dir(os.environ, None),
        parallel=2,
    )  # fmt: skip
    push = Event("push", f"refs/tags/{TAG}", project.sha)
    first = github.run(".github/workflows/release.yml", push)
    _report(f"one-shot release {project.seconds:.0f} s; GitHub, first run", first)
    assert [(r.job, r.status) for r in first] == [
        ("plan", "success"), *[("build", "success")] * 4, ("assemble", "success"),
    ]  # fmt: skip
    assert [(r.matrix["target"]["level"], r.matrix["target"]["builder"]) for r in first[1:5]] == [
        ("x86-64-v2", "a"), ("x86-64-v3", "a"), ("x86-64-v2", "b"), ("x86-64-v3", "b"),
    ]  # fmt: skip
    (assemble,) = (r.runner for r in first if r.job == "assemble")
    assert assemble is not None
    for artifact in (f"{RELEASE}-linux-x86_64-cpu", f"{RELEASE}-linux-x86_64-cpu-v3"):
        agreed = rf"agreed: {artifact}: \d+ shipped file\(s\) byte-identical"
        assert re.search(agreed, assemble.log.read_text()), artifact
    received = github.releases / TAG / "assets"
    _same_as_one_shot(received, project, assemble.temp / "artifacts" / RELEASE)
    _verified(received, assemble.temp / "artifacts" / RELEASE, project.public)
    # the seal key was set: no runner sealed with a key of its own
    assert not [w for r in first for w in r.warnings if "ORCHESTRATOR_CACHE_KEY" in w]

    # The tag's re-run: the cache the first run saved (crates and sealed profiles) is
    # restored, no built binary; the release is the same bytes, with fewer compilations.
    shutil.rmtree(github.releases)
    second = github.run(".github/workflows/release.yml", push)
    _report("GitHub, the tag's re-run", second)
    (again,) = (r.runner for r in second if r.job == "assemble")
    assert again is not None
    _same_as_one_shot(received, project, again.temp / "artifacts" / RELEASE)
    builds = [_cargo_builds(first, tmp_path / "logs-1"), _cargo_builds(second, tmp_path / "logs-2")]
    sys.stdout.write(f"cargo builds: first run {builds[0]}, re-run {builds[1]}\n")
    assert builds[1] < builds[0]
    images = [_image_builds(tmp_path / "logs-1"), _image_builds(tmp_path / "logs-2")]
    sys.stdout.write(f"toolchain images built: first run {images[0]}, re-run {images[1]}\n")
    assert images[1] <= images[0]
    _image_cache_used(first, second)
    for run in second:
        if run.job == "build" and run.runner is not None:
            # the entry its own builder saved in the first run, on this tag
            builder = run.matrix["target"]["builder"]
            assert re.search(
                rf"cache restore: \S+-{builder}-\w+ \(saved on refs/tags/{TAG}\)",
                run.runner.log.read_text(),
            )
    assert managed_containers(docker_client) == []


@pytest.mark.extended
def test_a_tag_through_gitlab_ci_publishes_the_one_shot_release(
    project: Project, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    gitlab = GitLab(
        project.repo, tmp_path / "gitlab", tmp_path / "runners",
        variables={"ORCHESTRATOR_CACHE_KEY": secrets.token_hex(32)},
        file_variables={"MINISIGN_SECRET_KEY": project.key.read_text()},
        image_cache=resolve_cache_dir(os.environ, None),
        parallel=2,
    )  # fmt: skip
    runs, registry = gitlab.run(".gitlab-ci.yml", TAG, project.sha)
    _report("GitLab", runs)
    assert [r.title for r in runs] == [
        "plan",
        "build-cpu: [x86-64-v2]",
        "build-cpu: [x86-64-v3]",
        "build-cpu-b: [x86-64-v2]",
        "build-cpu-b: [x86-64-v3]",
        "assemble",
    ]
    received = registry.files(gitlab.project_id, "ci-release", "0.0.1")
    (assemble,) = (r.runner for r in runs if r.job == "assemble")
    assert assemble is not None
    signed = assemble.workspace / "project" / ".orchestrator" / RELEASE
    _same_as_one_shot(received, project, signed)
    _verified(received, signed, project.public)
    assert managed_containers(docker_client) == []
