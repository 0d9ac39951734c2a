"""Run a GitHub Actions workflow as GitHub would for one event: the triggers decide whether
it runs, jobs go in the order `needs` gives, a matrix is expanded from the values its
expression gives (the plan job's real output), and each matrix entry is a job on a fresh
runner (runner.py) whose `uses:` steps are stand-ins (actions.py) and whose `run:` steps
run with bash as on ubuntu-latest, with GitHub's variables and files (GITHUB_OUTPUT,
GITHUB_ENV, GITHUB_PATH, RUNNER_TEMP, GITHUB_REF_TYPE/NAME, GITHUB_REPOSITORY, ...)."""

from __future__ import annotations

import fnmatch
import itertools
import re
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tests.ci_executor.actions import JobState, hash_files, run_action
from tests.ci_executor.errors import WorkflowError
from tests.ci_executor.expressions import Context, condition, render
from tests.ci_executor.runner import Runner, git
from tests.ci_executor.services import ArtifactStore, CacheStore

WORKFLOW_KEYS = {"name", "on", "permissions", "concurrency", "env", "jobs"}
JOB_KEYS = {
    "name", "needs", "runs-on", "permissions", "strategy", "steps", "outputs", "if",
    "environment", "env", "timeout-minutes",
}  # fmt: skip
STEP_KEYS = {"name", "id", "if", "uses", "with", "run", "env", "working-directory", "shell"}
STRATEGY_KEYS = {"matrix", "fail-fast", "max-parallel"}
TOKEN = "ghs_executor-token"  # noqa: S105 - what github.token is on these runners


@dataclass(frozen=True)
class Event:
    """A push of `ref` (refs/tags/v1.2.3 or refs/heads/main) or a run by hand."""

    name: str  # "push" or "workflow_dispatch"
    ref: str
    sha: str


@dataclass
class JobRun:
    job: str
    title: str
    matrix: dict[str, Any]
    runs_on: object
    seconds: float
    status: str  # success, failure, skipped
    runner: Runner | None
    outputs: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class GitHub:
    """The GitHub of one repository: its cache, releases and secrets, kept across runs."""

    source: Path  # the git repository that is pushed
    services: Path  # where the cache and the releases live
    work: Path  # runners' folders go below
    repository: str = "example/project"
    secrets: Mapping[str, str] = field(default_factory=dict)
    image_cache: Path | None = None  # see Runner.seed_image
    parallel: int = 1  # matrix jobs at once
    runs: int = 0

    @property
    def cache(self) -> CacheStore:
        return CacheStore(self.services / "cache")

    @property
    def releases(self) -> Path:
        return self.services / "releases"

    def run(self, workflow: str, event: Event) -> list[JobRun]:
        """Run the workflow at `workflow` (a path in the repository) as of `event`'s commit;
        every job run, in order. WorkflowError when the workflow fails or holds something
        the executor does not know."""
        self.runs += 1
        run_dir = self.work / f"run-{self.runs}"
        text = git("show", f"{event.sha}:{workflow}", cwd=self.source)
        document = YAML(typ="safe").load(text)
        _known(document, WORKFLOW_KEYS, "the workflow")
        if not _triggered(document["on"], event):
            raise WorkflowError(f"the workflow does not run on {event.name} of {event.ref}")
        return _Run(self, document, event, run_dir).all_jobs()


def _known(mapping: Mapping[str, Any], keys: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - keys)
    if unknown:
        raise WorkflowError(f"{where}: the executor does not know {unknown}")


def _triggered(on: Mapping[str, Any], event: Event) -> bool:
    _known(on, {"push", "workflow_dispatch"}, "on:")
    if event.name == "workflow_dispatch":
        return "workflow_dispatch" in on
    push = on.get("push") or {}
    _known(push, {"tags"}, "on.push")
    if not event.ref.startswith("refs/tags/"):
        return False
    tag = event.ref.removeprefix("refs/tags/")
    # a filter pattern's * matches anything but /
    return any(
        re.fullmatch(fnmatch.translate(p).replace(".*", "[^/]*"), tag) for p in push.get("tags", [])
    )


class _Run:
    def __init__(self, github: GitHub, document: dict[str, Any], event: Event, root: Path) -> None:
        self.github = github
        self.document = document
        self.event = event
        self.root = root
        self.artifacts = ArtifactStore(root / "artifacts")
        self.results: dict[str, list[JobRun]] = {}
        ref_type = "tag" if event.ref.startswith("refs/tags/") else "branch"
        self.github_context = {
            "ref": event.ref,
            "ref_name": event.ref.split("/", 2)[2],
            "ref_type": ref_type,
            "sha": event.sha,
            "repository": github.repository,
            "event_name": event.name,
            "token": TOKEN,
            "run_id": str(github.runs),
            "run_attempt": "1",
        }

    def all_jobs(self) -> list[JobRun]:
        jobs: dict[str, Any] = self.document["jobs"]
        done: list[JobRun] = []
        for name in _order(jobs):
            runs = self.job(name, jobs[name])
            self.results[name] = runs
            done += runs
        failed = [run.title for run in done if run.status == "failure"]
        if failed:
            raise WorkflowError(f"job(s) failed: {', '.join(failed)} (logs below {self.root})")
        return done

    def needs_context(self, job: Mapping[str, Any]) -> dict[str, Any]:
        context = {}
        for need in _needs(job):
            runs = self.results[need]
            statuses = {run.status for run in runs}
            result = (
                "failure"
                if "failure" in statuses
                else "skipped"
                if statuses == {"skipped"}
                else "success"
            )
            outputs: dict[str, str] = {}
            for run in runs:
                outputs.update(run.outputs)
            context[need] = {"result": result, "outputs": outputs}
        return context

    def contexts(self, **more: object) -> dict[str, Any]:
        return {
            "github": self.github_context,
            "secrets": dict(self.github.secrets),
            **more,
        }

    def job(self, name: str, job: Mapping[str, Any]) -> list[JobRun]:
        _known(job, JOB_KEYS, f"job {name}")
        needs = self.needs_context(job)
        failed_before = any(n["result"] != "success" for n in needs.values())
        gate = Context(self.contexts(needs=needs), failed=failed_before)
        if not condition(job.get("if", "success()"), gate):
            return [JobRun(name, name, {}, None, 0.0, "skipped", None)]
        strategy = job.get("strategy") or {}
        _known(strategy, STRATEGY_KEYS, f"job {name}: strategy")
        entries = list(enumerate(self.matrix(name, strategy.get("matrix"), gate)))
        # a matrix's jobs run side by side, as many at once as the runners allow
        with ThreadPoolExecutor(max_workers=self.github.parallel) as pool:
            return list(pool.map(lambda e: self.one(name, job, e[1], needs, e[0]), entries))

    def matrix(self, name: str, matrix: object, gate: Context) -> list[dict[str, Any]]:
        if matrix is None:
            return [{}]
        if not isinstance(matrix, dict) or {"include", "exclude"} & set(matrix):
            raise WorkflowError(f"job {name}: the executor knows only a plain matrix")
        values: dict[str, list[Any]] = {}
        for key, value in matrix.items():
            rendered = render(value, gate)
            if not isinstance(rendered, list) or not rendered:
                raise WorkflowError(f"job {name}: matrix.{key} is {rendered!r}, not a list")
            values[key] = rendered
        return [
            dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())
        ]

    def one(
        self,
        name: str,
        job: Mapping[str, Any],
        matrix: dict[str, Any],
        needs: dict[str, Any],
        index: int,
    ) -> JobRun:
        runner = Runner(self.root / f"{name}-{index}", name)
        steps_context: dict[str, Any] = {}
        runner_context = {
            "temp": str(runner.temp),
            "os": "Linux",
            "arch": "X64",
            "name": runner.name,
        }
        state = JobState(
            runner, self.github.source, self.event.sha, self.event.ref, [],
            self.github.cache, self.artifacts,
        )  # fmt: skip
        runner.install_shims(apt=True)
        runner.install_gh(self.github.releases, self.github.repository, self._tags())
        env: dict[str, str] = {}
        context = Context(
            self.contexts(
                matrix=matrix, needs=needs, steps=steps_context, runner=runner_context, env=env
            ),
            functions={"hashFiles": lambda *p: hash_files(runner.workspace, *p)},
        )
        for layer in (self.document.get("env") or {}, job.get("env") or {}):
            env.update({k: _text(render(v, context)) for k, v in layer.items()})
        runner.seed_image(self.github.image_cache, env)
        title = _text(render(job.get("name", name), context))
        runs_on = render(job["runs-on"], context)
        runner.write(f"== {title} on {runs_on}")
        started = time.monotonic()
        for number, step in enumerate(job["steps"]):
            self.step(step, number, state, context, env, steps_context)
        outputs = {k: _text(render(v, context)) for k, v in (job.get("outputs") or {}).items()}
        warnings = [line for line in runner.log.read_text().splitlines() if "::warning::" in line]
        status = "failure" if context.failed else "success"
        return JobRun(
            name,
            title,
            matrix,
            runs_on,
            time.monotonic() - started,
            status,
            runner,
            outputs,
            warnings,
        )

    def _tags(self) -> list[str]:
        return git("tag", "--list", cwd=self.github.source).split()

    def step(
        self,
        step: Mapping[str, Any],
        number: int,
        state: JobState,
        context: Context,
        env: dict[str, str],
        steps_context: dict[str, Any],
    ) -> None:
        _known(step, STEP_KEYS, f"step {step.get('name', number)}")
        runner = state.runner
        if not condition(step.get("if", "success()"), context):
            runner.write(f"-- skipped: {step.get('name', step.get('uses'))}")
            if "id" in step:
                steps_context[step["id"]] = {
                    "outputs": {},
                    "outcome": "skipped",
                    "conclusion": "skipped",
                }
            return
        step_env = {
            **env,
            **{k: _text(render(v, context)) for k, v in (step.get("env") or {}).items()},
        }
        runner.write(f"-- {render(step.get('name', step.get('uses', 'run')), context)}")
        outputs: dict[str, str] = {}
        if "uses" in step:
            inputs = {k: _text(render(v, context)) for k, v in (step.get("with") or {}).items()}
            outputs = run_action(step["uses"], inputs, state)
            ok = True
        else:
            ok, outputs = self.script(step, number, state, context, step_env, env)
        if "id" in step:
            outcome = "success" if ok else "failure"
            steps_context[step["id"]] = {
                "outputs": outputs,
                "outcome": outcome,
                "conclusion": outcome,
            }
        if not ok:
            context.failed = True

    def script(
        self,
        step: Mapping[str, Any],
        number: int,
        state: JobState,
        context: Context,
        step_env: dict[str, str],
        env: dict[str, str],
    ) -> tuple[bool, dict[str, str]]:
        runner = state.runner
        if step.get("shell", "bash") != "bash":
            raise WorkflowError(f"step {number}: the executor runs only bash")
        files = {
            name: runner.temp / f"_{name.lower()}_{number}"
            for name in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY")
        }
        for path in files.values():
            path.write_text("")
        full = {
            **runner.base_env(state.path_dirs),
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(runner.workspace),
            "GITHUB_REF": self.event.ref,
            "GITHUB_REF_NAME": self.github_context["ref_name"],
            "GITHUB_REF_TYPE": self.github_context["ref_type"],
            "GITHUB_SHA": self.event.sha,
            "GITHUB_REPOSITORY": self.github.repository,
            "GITHUB_EVENT_NAME": self.event.name,
            "GITHUB_RUN_ID": self.github_context["run_id"],
            "RUNNER_TEMP": str(runner.temp),
            "RUNNER_OS": "Linux",
            "RUNNER_ARCH": "X64",
            **{name: str(path) for name, path in files.items()},
            **step_env,
        }
        cwd = state.expand(step.get("working-directory", "."))
        # bash -e {0}, GitHub's default where no shell is named
        code = runner.run(step["run"], full, cwd, interpreter=["bash", "-e"])
        outputs = _file_values(files["GITHUB_OUTPUT"])
        env.update(_file_values(files["GITHUB_ENV"]))
        state.path_dirs[:0] = [Path(p) for p in reversed(files["GITHUB_PATH"].read_text().split())]
        if code != 0:
            runner.write(f"::error::the step exited {code}")
        return code == 0, outputs


def _order(jobs: Mapping[str, Any]) -> list[str]:
    order: list[str] = []
    while len(order) < len(jobs):
        ready = [n for n, j in jobs.items() if n not in order and set(_needs(j)) <= set(order)]
        if not ready:
            raise WorkflowError(f"jobs whose needs never finish: {sorted(set(jobs) - set(order))}")
        order += ready
    return order


def _needs(job: Mapping[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float | str):
        return str(value)
    raise WorkflowError(f"a value that is not text: {value!r}")


def _file_values(path: Path) -> dict[str, str]:
    """name=value lines and name<<DELIMITER blocks, as GITHUB_OUTPUT and GITHUB_ENV hold."""
    values: dict[str, str] = {}
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, index + 1)
            values[name] = "\n".join(lines[index + 1 : end])
            index = end + 1
            continue
        if line:
            name, sep, value = line.partition("=")
            if not sep:
                raise WorkflowError(f"{path.name}: {line!r} is neither name=value nor name<<EOF")
            values[name] = value
        index += 1
    return values
