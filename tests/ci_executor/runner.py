"""One CI runner, made fresh for each job: its own HOME (so its own orchestrator cache and
cache-seal key), temporary folder, tool folder and checkout of the commit, an environment
that holds nothing of the test's, and stand-ins for what a runner image brings: Python
(a virtualenv of the test's interpreter that sees the test's installed packages, pip with
no index), `sudo` and `apt-get` that only check that the packages a job asks for are on
this machine, and a `gh` that records what GitHub Releases would get."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

from tests.ci_executor.errors import WorkflowError

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Passed through from the test's environment: how to reach this machine's Docker Engine.
PASSED = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "LANG")
HERE = Path(__file__).resolve().parent

_APT_GET = """#!/bin/sh
# apt-get of the runner image: nothing is downloaded; what a job installs must already be
# on this machine (the executor never changes the host's packages).
case "$1" in
  update) echo "apt-get update: (stand-in) nothing fetched"; exit 0 ;;
  install) shift ;;
  *) echo "apt-get stand-in: '$*' is not something a generated file runs" >&2; exit 97 ;;
esac
for arg in "$@"; do
  case "$arg" in
    -*) ;;
    *) if ! dpkg-query -W -f='${Status}' "$arg" 2>/dev/null | grep -q 'install ok installed'; then
         echo "apt-get stand-in: $arg is not installed on this machine" >&2; exit 100
       fi ;;
  esac
done
echo "apt-get install: (stand-in) $* already installed"
"""
_SUDO = """#!/bin/sh
# sudo of the runner image: only what the generated files run with it
case "$1" in
  apt-get) shift; exec "$(dirname "$0")/apt-get" "$@" ;;
  *) echo "sudo stand-in: '$*' is not something a generated file runs" >&2; exit 97 ;;
esac
"""


@dataclass
class Runner:
    """The folders of one job's runner below `root`."""

    root: Path
    name: str
    log_lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for folder in (self.home, self.temp, self.tools, self.shims, self.workspace):
            folder.mkdir(parents=True, exist_ok=True)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def temp(self) -> Path:
        return self.root / "temp"

    @property
    def tools(self) -> Path:
        return self.root / "tools"

    @property
    def shims(self) -> Path:
        return self.root / "shims"

    @property
    def workspace(self) -> Path:
        return self.root / "work"

    @property
    def log(self) -> Path:
        return self.root / "job.log"

    def write(self, text: str) -> None:
        with self.log.open("a") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")

    def base_env(self, path_dirs: list[Path]) -> dict[str, str]:
        passed = {name: os.environ[name] for name in PASSED if os.environ.get(name)}
        return {
            **passed,
            "HOME": str(self.home),
            "PATH": os.pathsep.join([*map(str, path_dirs), str(self.shims), SYSTEM_PATH]),
            "PIP_NO_INDEX": "1",  # the image's Python has the packages; nothing is fetched
            "LC_ALL": "C.UTF-8",
            "CI": "true",
        }

    def install_shims(self, *, apt: bool) -> None:
        if apt:
            for name, text in (("apt-get", _APT_GET), ("sudo", _SUDO)):
                (self.shims / name).write_text(text)
                (self.shims / name).chmod(0o755)

    def seed_image(self, image_cache: Path | None, env: dict[str, str]) -> None:
        """What the runner image holds besides the engine's images: the base rootfs tarballs
        and the .deb sets they and the toolchain images were made from (named by what they
        were made from), hard-linked from `image_cache` into the cache folder the job's
        environment names. A runner whose engine already holds the images has these too
        (as a self-hosted runner would); without them each job spends minutes on Debian's
        mirror making them again. Nothing else: no profile, step, crate or key."""
        if image_cache is None:
            return
        named = env.get("ORCHESTRATOR_CACHE_DIR")
        if named:
            cache = self.home / named[2:] if named.startswith("~/") else Path(named)
        else:
            cache = self.home / ".cache" / "orchestrator"
        for part in ("rootfs", "packages"):
            if (image_cache / part).is_dir():
                shutil.copytree(image_cache / part, cache / part, copy_function=os.link)
        self.write(f"runner image: rootfs and .debs of {image_cache} in {cache}")

    def install_gh(self, state: Path, repository: str, tags: list[str]) -> None:
        """`gh` that records into `state` what GitHub Releases of `repository` would get."""
        words = [str(HERE / "fake_gh.py"), str(state), repository, ",".join(tags)]
        script = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.join(words)} "$@"\n'
        (self.shims / "gh").write_text(script)
        (self.shims / "gh").chmod(0o755)

    def python(self, requested: str) -> Path:
        """The stand-in for a Python of the runner image: a virtualenv of the test's
        interpreter whose pip sees the test's installed packages (so installing
        orchestrator fetches nothing); its bin folder, for PATH."""
        folder = self.tools / "python"
        # no pip of its own: `python -m pip` is the test's, and installs into this one
        venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        site = folder / "lib" / f"python{version}" / "site-packages"
        (site / "runner-image.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        self.write(f"setup-python: {requested} asked for, Python {version} of the test stands in")
        return folder / "bin"

    def run(self, script: str, env: dict[str, str], cwd: Path, *, interpreter: list[str]) -> int:
        """Run `script` with `interpreter`, its output into the job's log; its exit status."""
        path = self.temp / f"script-{time.monotonic_ns()}.sh"
        path.write_text(script)
        with self.log.open("a") as log:
            log.flush()
            process = subprocess.run(
                [*interpreter, str(path)],
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
                timeout=3600,
            )
        return process.returncode


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode != 0:
        raise WorkflowError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def checkout(source: Path, sha: str, ref: str, into: Path) -> None:
    """What actions/checkout (fetch-depth 1) and GitLab's runner leave: `ref` fetched at
    depth 1 from `source` into a new repository, `sha` checked out (detached for a tag,
    on the branch otherwise)."""
    into.mkdir(parents=True, exist_ok=True)
    git("init", "-q", str(into))
    git("remote", "add", "origin", source.resolve().as_uri(), cwd=into)
    local = (
        ref if ref.startswith("refs/tags/") else ref.replace("refs/heads/", "refs/remotes/origin/")
    )
    git("fetch", "-q", "--no-tags", "--depth=1", "origin", f"+{sha}:{local}", cwd=into)
    if ref.startswith("refs/tags/"):
        git("checkout", "-q", "--force", "--detach", local, cwd=into)
    else:
        git("checkout", "-q", "--force", "-B", ref.removeprefix("refs/heads/"), local, cwd=into)
    if git("rev-parse", "HEAD", cwd=into).strip() != sha:
        raise WorkflowError(f"checkout of {ref} gave another commit than {sha}")
