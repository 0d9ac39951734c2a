"""Which functions still take the whole `Options`, and why each needs it (issue 43 point 4).

A room reads a small frozen view of the settings it needs (`FlavorView`, `CrateView`,
`CiSettings`, `ReleaseView` with its `EngineSettings`, `ConfiguredRuns`), built once from
`Options` by the command that starts it. A function that takes a parameter annotated
`Options` must be listed here with the reason it needs all of them; one that no longer
takes it must leave the list. Entries marked "frozen:" sit in, or are called from, files
another change was editing this round: they are the next ones to narrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"

_FROZEN_PLAN = "frozen: plan/build_plan.py (make_plan) calls it with Options; it reads "

WHOLE_OPTIONS: dict[str, str] = {
    # -- the views: each is built from the whole options, once
    "flavors/base.py:FlavorView.from_options": "builds the flavors' view",
    "host/source.py:CrateView.from_options": "builds the crate snapshot's view",
    "supply/workflows.py:CiSettings.from_options": "builds the CI file's view",
    "release/targets/release_view.py:ReleaseView.from_options": "builds the release's view",
    "release/targets/release_view.py:EngineSettings.from_options": "builds the engines' view",
    "config/init/run_files.py:ConfiguredRuns.from_options": "builds the run checks' view",
    # -- every setting, by design
    "model/documents/reports.py:config_report": (
        "prints every setting and its source for `orchestrator config` (Options.describe)"
    ),
    "plan/serialize.py:action_key": (
        "hashes every setting that can change a build into the action key (any setting "
        "added later counts unless excluded), after the flavor's overrides (for_flavor)"
    ),
    "plan/build_plan.py:make_plan": (
        "makes a target's whole plan: reads most settings and builds the flavor's and the "
        "crate's views for the parts below it"
    ),
    "execute/build.py:prepare_plan": (
        "a target's plan from its options: the crate snapshot, the toolchain, make_plan"
    ),
    "release/targets/target.py:targets": (
        "makes each target's own Options (the flavor's overrides by for_flavor, its level "
        "as target_cpu), which its plan, its build and its action key read"
    ),
    "config/init/run_files.py:run_hazards": (
        "applies each flavor's overrides (Options.for_flavor) before it reads that flavor's "
        "runs: the runs differ by flavor"
    ),
    # -- a build's Pipeline carries the options of its flavor to every step executor
    "execute/steps/pipeline.py:start_pipeline": (
        "the Pipeline it makes hands the build's options to every step executor"
    ),
    "execute/build.py:run_build": (
        "applies the flavor's overrides (for_flavor) and starts the build's Pipeline with them"
    ),
    "execute/train_export.py:run_training_export": (
        "applies the flavor's overrides (for_flavor) and starts a Pipeline with them"
    ),
    "cli/build.py:_wrote_bundle": (
        "hands the options to run_training_export, which starts a Pipeline with them"
    ),
    "execute/verdict/bench.py:locate": (
        "builds the flavor's, the crate's and the runs' views (FlavorView, CrateView, "
        "run_plan) of the published build it benches, and finds its folder"
    ),
    # -- the CLI, where a command's resolved options become what runs
    "cli/app.py:signer_for": (
        "the one place where a command's resolved options become its Signer "
        "(signing.secret_key, refused inside the project or the cache), for the six "
        "commands that sign"
    ),
    "cli/rebuild.py:release_rebuilt": (
        "gives every target's options the second builder's own cache (replace cache_dir), "
        "resolves the signer, and hands the options on to publish_checked"
    ),
    "cli/rebuild.py:publish_checked": (
        "frozen: hands Options to assemble, below; builds the ReleaseView for the rest"
    ),
    "release/assemble/shard.py:assemble": (
        "frozen: sign_and_publish (execute/ship/publish.py) takes Options; builds the "
        "ReleaseView for release.json, logs/targets.json and release.lock"
    ),
    # -- frozen this round: these files were being changed in parallel
    "execute/ship/publish.py:sign_and_publish": (
        "frozen: execute/ship/publish.py; hands Options to stage_archives"
    ),
    "execute/ship/archive_stage.py:stage_archives": (
        "frozen: sign_and_publish (execute/ship/publish.py) calls it with Options; reads "
        "archive.formats, archive.include, binary, version, source_date_epoch"
    ),
    "config/resolve/options.py:lock_blocker": (
        "frozen: config/resolve/options.py; reads crate_dir, project_dir, config_path"
    ),
    "plan/build_plan.py:_pgo_plan": "frozen: plan/build_plan.py; reads the workloads and pgo",
    "plan/build_plan.py:_check_workloads": "frozen: plan/build_plan.py; checks the runs",
    "plan/build_plan.py:_check_settings": "frozen: plan/build_plan.py; checks [archive]",
    "plan/build_plan.py:_for_target": "frozen: plan/build_plan.py; for_flavor and FlavorView",
    "plan/c_code.py:c_code_plan": "frozen: plan/c_code.py; reads c_code.mode",
    "plan/cargo_commands.py:cargo_commands": (
        "frozen: plan/cargo_commands.py; the cargo command lines of every variant"
    ),
    "plan/cargo_flags.py:variant_rustflags": "frozen: plan/cargo_flags.py; the crate's flags",
    "plan/cargo_flags.py:shared_test_level": "frozen: plan/cargo_flags.py; the test level",
    "plan/cargo_flags.py:test_flags": "frozen: plan/cargo_flags.py; the tests' flags",
    "plan/gate.py:gate_plan": "frozen: plan/gate.py; reads the gate's settings",
    "plan/steps.py:steps_of": "frozen: plan/steps.py; which steps a plan runs",
    "plan/bolt.py:bolt_mode": _FROZEN_PLAN + "bolt.mode, profiling.privileges, sources",
    "plan/portable.py:sysroot_plan": _FROZEN_PLAN + "release.glibc_floor",
    "plan/portable.py:distro_validation": _FROZEN_PLAN + "release.distro_check, validate",
    "plan/runs.py:run_plan": _FROZEN_PLAN + "train.env and train.stdin (and bench's locate)",
}


def _takes_whole_options(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = node.args
    return any(
        arg.annotation is not None and ast.unparse(arg.annotation) in ("Options", "'Options'")
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs)
    )


def _whole_options_functions() -> set[str]:
    """`path:Qualified.name` of every function of the package with a parameter annotated
    `Options`, its path relative to the package."""
    found: set[str] = set()

    def visit(node: ast.AST, prefix: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", where)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if _takes_whole_options(child):
                    found.add(f"{where}:{prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.", where)
            else:
                visit(child, prefix, where)

    for path in sorted(PACKAGE.rglob("*.py")):
        visit(ast.parse(path.read_text()), "", path.relative_to(PACKAGE).as_posix())
    return found


def test_only_the_listed_functions_take_the_whole_options() -> None:
    unlisted = sorted(_whole_options_functions() - WHOLE_OPTIONS.keys())
    assert not unlisted, (
        "these take the whole Options: give them the view (or the values) they read, or "
        f"list them in WHOLE_OPTIONS with the reason they need every setting: {unlisted}"
    )


def test_every_listed_function_still_takes_the_whole_options() -> None:
    stale = sorted(WHOLE_OPTIONS.keys() - _whole_options_functions())
    assert not stale, f"no longer take Options (remove them from WHOLE_OPTIONS): {stale}"


def test_every_entry_says_why() -> None:
    assert all(len(reason) > 15 for reason in WHOLE_OPTIONS.values())
