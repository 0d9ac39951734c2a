"""Run a .gitlab-ci.yml as GitLab would for a pushed tag: workflow rules decide whether a
pipeline starts, jobs run stage by stage (each `parallel:matrix` entry on a runner of its
own), `rules` pick jobs, `needs` bring the artifacts of the jobs named, the cache is keyed
by `cache:key:files` (the last commits of the files) with the prefix and a `-protected`
suffix on protected refs, and the generic package registry is an HTTP server here. The
job image must be a python:* image (a virtualenv stands in) and services Docker-in-Docker
(this machine's engine stands in)."""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tests.ci_executor.actions import matching
from tests.ci_executor.errors import WorkflowError
from tests.ci_executor.github import JobRun
from tests.ci_executor.gitlab_rules import expand, rule_matches
from tests.ci_executor.runner import Runner, checkout, git
from tests.ci_executor.services import CacheStore, PackageRegistry

TOP_KEYS = {"workflow", "stages", "variables", "default"}
RESERVED = {"include", "image", "services", "before_script", "after_script", "cache", "pages"}
JOB_KEYS = {
    "stage", "needs", "tags", "services", "variables", "parallel", "cache", "script",
    "before_script", "artifacts", "rules", "image",
}  # fmt: skip
DIND = re.compile(r"docker:[\w.-]*dind")
TLS_VARIABLES = ("DOCKER_TLS_CERTDIR", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")


@dataclass
class GitLab:
    """A GitLab project: its cache, package registry and CI/CD variables, across runs."""

    source: Path
    services: Path
    work: Path
    project_id: str = "4242"
    variables: Mapping[str, str] = field(default_factory=dict)  # CI/CD variables
    file_variables: Mapping[str, str] = field(default_factory=dict)  # type File: contents
    protected_tags: tuple[str, ...] = ("v*",)
    image_cache: Path | None = None  # see Runner.seed_image
    parallel: int = 1  # jobs of a stage at once
    runs: int = 0

    @property
    def cache(self) -> CacheStore:
        return CacheStore(self.services / "cache")

    @property
    def registry(self) -> PackageRegistry:
        return PackageRegistry(self.services / "packages")

    def run(self, ci_file: str, tag: str, sha: str) -> tuple[list[JobRun], PackageRegistry]:
        """The pipeline of a push of `tag` (at `sha`); every job run, in order, and the
        package registry it published to."""
        self.runs += 1
        document = YAML(typ="safe").load(git("show", f"{sha}:{ci_file}", cwd=self.source))
        registry = self.registry
        with registry.serving() as api:
            pipeline = _Pipeline(
                self, document, tag, sha, api, registry, self.work / f"run-{self.runs}"
            )
            return pipeline.all_jobs(), registry


class _Pipeline:
    def __init__(
        self, gitlab: GitLab, document: dict[str, Any], tag: str, sha: str, api: str,
        registry: PackageRegistry, root: Path,
    ) -> None:  # fmt: skip
        self.gitlab, self.document, self.tag, self.sha, self.root = gitlab, document, tag, sha, root
        self.registry = registry
        protected = any(re.fullmatch(p.replace("*", ".*"), tag) for p in gitlab.protected_tags)
        self.protected = protected
        self.predefined = {
            "CI": "true",
            "GITLAB_CI": "true",
            "CI_COMMIT_TAG": tag,
            "CI_COMMIT_REF_NAME": tag,
            "CI_COMMIT_REF_SLUG": re.sub(r"[^a-z0-9]", "-", tag.lower()),
            "CI_COMMIT_SHA": sha,
            "CI_COMMIT_REF_PROTECTED": "true" if protected else "false",
            "CI_PIPELINE_SOURCE": "push",
            "CI_PROJECT_ID": gitlab.project_id,
            "CI_API_V4_URL": api,
            "CI_DEFAULT_BRANCH": "main",
            **gitlab.variables,
        }
        self.done: dict[str, list[tuple[JobRun, Path]]] = {}

    def all_jobs(self) -> list[JobRun]:
        unknown = sorted(
            k
            for k in self.document
            if k in RESERVED or (k not in TOP_KEYS and not isinstance(self.document[k], dict))
        )
        if unknown:
            raise WorkflowError(f".gitlab-ci.yml: the executor does not know {unknown}")
        # for rules: the global variables as a runner at GitLab's usual /builds sees them
        nominal = {
            **self.predefined,
            "CI_PROJECT_DIR": "/builds/project",
            "CI_BUILDS_DIR": "/builds",
        }
        globals_ = {**nominal, **self._variables(self.document.get("variables") or {}, nominal)}
        rules = (self.document.get("workflow") or {}).get("rules")
        if rules is not None and not self._rules(rules, globals_):
            raise WorkflowError(f"no pipeline: the workflow rules do not match the tag {self.tag}")
        jobs = {
            k: v for k, v in self.document.items() if k not in TOP_KEYS and not k.startswith(".")
        }
        runs: list[JobRun] = []
        for stage in self.document["stages"]:
            chosen: list[tuple[str, str, dict[str, Any], dict[str, str]]] = []
            for name, job in jobs.items():
                if job.get("stage", "test") != stage:
                    continue
                unknown_keys = sorted(set(job) - JOB_KEYS)
                if unknown_keys:
                    raise WorkflowError(f"job {name}: the executor does not know {unknown_keys}")
                if "rules" in job and not self._rules(job["rules"], globals_):
                    continue
                chosen += [(name, t, job, m) for t, m in _matrix(name, job.get("parallel"))]
            # the jobs of a stage run side by side, as many at once as the runners allow
            with ThreadPoolExecutor(max_workers=self.gitlab.parallel) as pool:
                done = list(pool.map(lambda c: self.one(c[0], c[1], c[2], c[3]), chosen))
            for (name, *_), (run, artifacts) in zip(chosen, done, strict=True):
                self.done.setdefault(name, []).append((run, artifacts))
                runs.append(run)
            failed = [run.title for run, _ in done if run.status == "failure"]
            if failed:
                raise WorkflowError(f"job(s) {', '.join(failed)} failed (logs below {self.root})")
        if self.registry.refused:
            raise WorkflowError(f"the package registry refused: {self.registry.refused}")
        return runs

    def _rules(self, rules: list[dict[str, Any]], variables: Mapping[str, str]) -> bool:
        for rule in rules:
            if set(rule) - {"if", "when"} or rule.get("when", "on_success") not in (
                "on_success",
                "always",
            ):
                raise WorkflowError(f"a rule the executor does not know: {rule}")
            if "if" not in rule or rule_matches(rule["if"], variables):
                return True
        return False

    def _variables(self, given: Mapping[str, object], known: Mapping[str, str]) -> dict[str, str]:
        values: dict[str, str] = {}
        for name, value in given.items():
            if not isinstance(value, str):
                raise WorkflowError(f"variable {name}: {value!r} is not a string")
            values[name] = expand(value, {**known, **values})
        return values

    def one(
        self,
        name: str,
        title: str,
        job: Mapping[str, Any],
        matrix: dict[str, str],
    ) -> tuple[JobRun, Path]:
        runner = Runner(self.root / re.sub(r"[^\w.-]", "_", title), name)
        project = runner.workspace / "project"
        token = secrets.token_hex(16)
        base = {
            **self.predefined,
            "CI_JOB_NAME": title,
            "CI_JOB_TOKEN": token,
            "CI_PROJECT_DIR": str(project),
            "CI_BUILDS_DIR": str(runner.workspace),
        }
        for variable, content in self.gitlab.file_variables.items():
            path = runner.temp / variable
            path.write_text(content)
            base[variable] = str(path)
        # the global variables, expanded where this job runs, then the matrix's and the job's
        variables = {**base, **self._variables(self.document.get("variables") or {}, base)}
        variables.update(matrix)
        variables.update(self._variables(job.get("variables") or {}, variables))
        image = job.get("image") or (self.document.get("default") or {}).get("image", "")
        if not str(image).startswith("python:"):
            raise WorkflowError(f"job {title}: the image {image!r} has no stand-in (python:* only)")
        self._services(title, job.get("services") or [], variables)
        runner.install_shims(apt=True)
        path_dirs = [runner.python(str(image))]
        started = time.monotonic()
        runner.write(f"== {title} (tags {job.get('tags', [])})")
        checkout(self.gitlab.source, self.sha, f"refs/tags/{self.tag}", project)
        runner.seed_image(self.gitlab.image_cache, variables)
        for need in job.get("needs", []):
            if need not in self.done:
                raise WorkflowError(f"job {title} needs {need}, which has not run")
            for _, artifacts in self.done[need]:
                shutil.copytree(artifacts, project, dirs_exist_ok=True)
        # cache: one, or a list of them (GitLab takes up to four)
        given = job.get("cache") or []
        caches = [
            (cache, self._cache_key(cache, variables, project))
            for cache in (given if isinstance(given, list) else [given])
        ]
        for cache, key in caches:
            self._restore(cache, key, project)
        script = [
            *(
                job.get("before_script")
                or (self.document.get("default") or {}).get("before_script", [])
            ),
            *job["script"],
        ]
        env = {**runner.base_env(path_dirs), **variables}
        self.registry.tokens.add(token)
        code = runner.run(
            "\n".join(script) + "\n",
            env,
            project,
            interpreter=["bash", "--noprofile", "--norc", "-eo", "pipefail"],
        )
        self.registry.tokens.discard(token)
        artifacts = runner.root / "artifacts"
        artifacts.mkdir()
        if code == 0:
            for cache, key in caches:
                self._save(cache, key, project)
            for pattern in (job.get("artifacts") or {}).get("paths", []):
                for match in matching(project / pattern):
                    relative = match.relative_to(project)
                    (artifacts / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(match, artifacts / relative)
        status = "success" if code == 0 else "failure"
        run = JobRun(
            name, title, matrix, job.get("tags", []), time.monotonic() - started, status, runner
        )
        return run, artifacts

    def _services(self, title: str, services: list[Any], variables: dict[str, str]) -> None:
        for service in services:
            image = service["name"] if isinstance(service, dict) else service
            alias = service.get("alias", "") if isinstance(service, dict) else ""
            if not DIND.fullmatch(image):
                raise WorkflowError(f"job {title}: the service {image!r} has no stand-in")
            host = variables.get("DOCKER_HOST", "")
            if not host.startswith(f"tcp://{alias}:"):
                raise WorkflowError(
                    f"job {title}: DOCKER_HOST {host!r} is not the service {alias!r}"
                )
            # this machine's engine stands in for the service: its socket, no TLS
            for name in ("DOCKER_HOST", *TLS_VARIABLES):
                variables.pop(name, None)

    def _cache_key(
        self, cache: Mapping[str, Any], variables: Mapping[str, str], project: Path
    ) -> str:
        if set(cache) - {"key", "paths"} or set(cache["key"]) - {"files", "prefix"}:
            raise WorkflowError(f"a cache the executor does not know: {cache}")
        files = cache["key"]["files"]
        if not 1 <= len(files) <= 2:
            raise WorkflowError("cache:key:files names one or two files")
        # GitLab: a checksum of the last commits that changed the files
        commits = [git("log", "-1", "--format=%H", "--", f, cwd=project).strip() for f in files]
        digest = hashlib.sha256("\n".join(commits).encode()).hexdigest()[:40]
        prefix = expand(cache["key"].get("prefix", ""), variables)
        key = f"{prefix}-{digest}" if prefix else digest
        return key + ("-protected" if self.protected else "-non_protected")

    def _restore(self, cache: Mapping[str, Any], key: str, project: Path) -> None:
        entry, _ = self.gitlab.cache.lookup([""], key, [], "")
        if entry is not None and entry.key == key:
            self.gitlab.cache.restore(entry, [project / p for p in cache["paths"]], tag_build=True)

    def _save(self, cache: Mapping[str, Any], key: str, project: Path) -> None:
        paths = [project / p if (project / p).exists() else None for p in cache["paths"]]
        if any(p is not None for p in paths):
            self.gitlab.cache.save("", key, "", paths)


def _matrix(name: str, parallel: object) -> list[tuple[str, dict[str, str]]]:
    if parallel is None:
        return [(name, {})]
    if not isinstance(parallel, dict) or set(parallel) != {"matrix"}:
        raise WorkflowError(f"job {name}: parallel: the executor knows only matrix")
    instances = []
    for entry in parallel["matrix"]:
        values = {k: v if isinstance(v, list) else [v] for k, v in entry.items()}
        for combo in itertools.product(*values.values()):
            chosen = dict(zip(values, map(str, combo), strict=True))
            instances.append((f"{name}: [{', '.join(chosen.values())}]", chosen))
    return instances
