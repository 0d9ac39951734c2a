"""Stand-ins for the GitHub Actions the generated workflow uses, each at the commit the
product pins (orchestrator/supply/workflows.py ACTIONS): an action at another commit, an
unknown action or an input a stand-in does not know stops the run."""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.supply.workflows import ACTIONS
from tests.ci_executor.errors import WorkflowError
from tests.ci_executor.runner import Runner, checkout
from tests.ci_executor.services import ArtifactStore, CacheStore


@dataclass
class JobState:
    """What the stand-ins read and change of the job that runs them."""

    runner: Runner
    source: Path  # the repository pushed to (checkout copies the commit from it)
    sha: str
    ref: str
    path_dirs: list[Path]  # prepended to PATH (GITHUB_PATH, setup-python)
    cache: CacheStore
    artifacts: ArtifactStore
    default_branch: str = "refs/heads/main"

    @property
    def tag_build(self) -> bool:
        return self.ref.startswith("refs/tags/")

    def expand(self, text: str) -> Path:
        """A path as the actions read one: ~ is the runner's HOME, relative is below the
        workspace."""
        if text.startswith("~/") or text == "~":
            return self.runner.home / text[2:]
        path = Path(text)
        return path if path.is_absolute() else self.runner.workspace / path


Outputs = dict[str, str]
Action = Callable[[JobState, Mapping[str, str]], Outputs]


def matching(pattern: Path) -> list[Path]:
    """The paths an absolute glob pattern matches, sorted (** spans folders)."""
    anchor = Path(pattern.anchor)
    return sorted(anchor.glob(str(pattern.relative_to(anchor))))


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _flag(value: str, name: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise WorkflowError(f"{name}: {value!r} is not true or false")
    return value.lower() == "true"


def _checkout(job: JobState, inputs: Mapping[str, str]) -> Outputs:
    _flag(inputs.get("persist-credentials", "true"), "persist-credentials")  # no token here
    checkout(job.source, job.sha, job.ref, job.runner.workspace)
    return {"commit": job.sha, "ref": job.ref}


def _setup_python(job: JobState, inputs: Mapping[str, str]) -> Outputs:
    job.path_dirs.insert(0, job.runner.python(inputs.get("python-version", "")))
    return {}


def _version(paths: list[str]) -> str:
    """actions/cache's version: the paths as written (an entry saved for other paths is
    not found)."""
    return hashlib.sha256("|".join(paths).encode()).hexdigest()


def _cache_restore(job: JobState, inputs: Mapping[str, str]) -> Outputs:
    paths = _lines(inputs["path"])
    key = inputs["key"]
    if not key or "," in key or len(key) > 512:
        raise WorkflowError(f"actions/cache: the key {key!r} is not valid")
    scopes = [job.ref] + ([job.default_branch] if job.ref != job.default_branch else [])
    entry, hit = job.cache.lookup(
        scopes, key, _lines(inputs.get("restore-keys", "")), _version(paths)
    )
    if entry is None:
        job.runner.write(f"cache restore: no entry for {key}")
        return {"cache-hit": "false", "cache-primary-key": key}
    job.cache.restore(entry, [job.expand(p) for p in paths], tag_build=job.tag_build)
    job.runner.write(f"cache restore: {entry.key} (saved on {entry.scope}) for {key}")
    return {
        "cache-hit": "true" if hit else "false",
        "cache-primary-key": key,
        "cache-matched-key": entry.key,
    }


def _cache_save(job: JobState, inputs: Mapping[str, str]) -> Outputs:
    paths = _lines(inputs["path"])
    key = inputs["key"]
    found = [job.expand(p) if job.expand(p).exists() else None for p in paths]
    if all(p is None for p in found):
        job.runner.write(f"::warning::cache save: none of {paths} exists, nothing saved")
    elif job.cache.save(job.ref, key, _version(paths), found):
        job.runner.write(f"cache save: {key} on {job.ref}")
    else:
        job.runner.write(f"::warning::cache save: unable to reserve {key}: it exists")
    return {}


def _upload(job: JobState, inputs: Mapping[str, str]) -> Outputs:
    matched: list[Path] = []
    for pattern in _lines(inputs["path"]):
        text = str(job.expand(pattern))
        matched += matching(Path(text)) if glob.has_magic(text) else [Path(text)]
    files = [(p, p) for p in matched if p.is_file()] + [
        (f, p) for p in matched if p.is_dir() for f in sorted(p.rglob("*")) if f.is_file()
    ]
    if not files:
        policy = inputs.get("if-no-files-found", "warn")
        if policy == "error":
            raise WorkflowError(f"upload-artifact: no files at {inputs['path']!r}")
        job.runner.write(f"::warning::upload-artifact: no files at {inputs['path']!r}")
        return {}
    # v4 keeps paths below the files' least common ancestor
    root = Path(os.path.commonpath([str(f.parent) for f, _ in files]))
    job.artifacts.upload(inputs["name"], [(str(f.relative_to(root)), f) for f, _ in files])
    return {}


def _download(job: JobState, inputs: Mapping[str, str]) -> Outputs:
    into = job.expand(inputs.get("path", "."))
    if "name" in inputs:
        job.artifacts.download(inputs["name"], into)
        return {"download-path": str(into)}
    merge = _flag(inputs.get("merge-multiple", "false"), "merge-multiple")
    names = job.artifacts.names(inputs.get("pattern"))
    for name in names:
        job.artifacts.download(name, into if merge else into / name)
    job.runner.write(f"download-artifact: {len(names)} artifact(s) into {into}")
    return {"download-path": str(into)}


# (repository[/path], the inputs each knows, the stand-in)
STAND_INS: dict[str, tuple[str, frozenset[str], Action]] = {
    "actions/checkout": ("checkout", frozenset({"persist-credentials"}), _checkout),
    "actions/setup-python": ("setup-python", frozenset({"python-version"}), _setup_python),
    "actions/cache/restore": ("cache", frozenset({"path", "key", "restore-keys"}), _cache_restore),
    "actions/cache/save": ("cache", frozenset({"path", "key"}), _cache_save),
    "actions/upload-artifact": (
        "upload-artifact",
        frozenset({"name", "path", "if-no-files-found", "retention-days"}),
        _upload,
    ),
    "actions/download-artifact": (
        "download-artifact",
        frozenset({"name", "pattern", "path", "merge-multiple"}),
        _download,
    ),
}


def run_action(uses: str, inputs: Mapping[str, str], job: JobState) -> Outputs:
    """The stand-in for `uses` (owner/repo[/path]@sha) run with `inputs`."""
    action, _, ref = uses.partition("@")
    known = STAND_INS.get(action)
    if known is None:
        raise WorkflowError(f"uses: {uses}: no stand-in for this action")
    pinned, accepted, stand_in = known
    sha = ACTIONS[pinned][1]
    if ref != sha:
        raise WorkflowError(
            f"uses: {uses}: the stand-in is for {action}@{sha} ({ACTIONS[pinned][2]})"
        )
    unknown = sorted(set(inputs) - accepted)
    if unknown:
        raise WorkflowError(f"uses: {action}: the stand-in does not know the input(s) {unknown}")
    return stand_in(job, inputs)


def hash_files(workspace: Path, *patterns: object) -> str:
    """hashFiles(): the sha256 over the sha256 of each matched file below the workspace,
    in the order matched (each pattern's matches sorted); '' when none matched."""
    seen: list[Path] = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise WorkflowError(f"hashFiles({pattern!r}): a pattern is a string")
        for path in matching(workspace / pattern):
            if path.is_file() and path not in seen:
                seen.append(path)
    if not seen:
        return ""
    total = hashlib.sha256()
    for path in seen:
        total.update(hashlib.sha256(path.read_bytes()).digest())
    return total.hexdigest()
