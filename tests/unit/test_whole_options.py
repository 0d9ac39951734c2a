"""Which functions still take the whole `Options`, and why each needs it (issue 43 point 4).

A room reads a small frozen view of the settings it needs (`FlavorView`, `CrateView`,
`CiSettings`, `ReleaseView` with its `EngineSettings` and `PublishSettings`,
`ConfiguredRuns`, and the plan's `CargoSettings`, `GateSettings` and `BoltSettings`),
built once from `Options` by the command or the plan that starts it. A function that takes
a parameter annotated `Options` must be listed here with the reason it needs all of them;
one that no longer takes it must leave the list."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"

WHOLE_OPTIONS: dict[str, str] = {
    # -- the views: each is built from the whole options, once
    "flavors/base.py:FlavorView.from_options": "builds the flavors' view",
    "host/source.py:CrateView.from_options": "builds the crate snapshot's view",
    "supply/workflows.py:CiSettings.from_options": "builds the CI file's view",
    "release/targets/release_view.py:ReleaseView.from_options": "builds the release's view",
    "release/targets/release_view.py:EngineSettings.from_options": "builds the engines' view",
    "config/init/run_files.py:ConfiguredRuns.from_options": "builds the run checks' view",
    "plan/gate.py:GateSettings.from_options": "builds the speed gate's view",
    "plan/bolt.py:BoltSettings.from_options": "builds BOLT's view",
    "plan/cargo_flags.py:CargoSettings.from_options": "builds the cargo commands' view",
    "execute/ship/archive_stage.py:PublishSettings.from_options": "builds publication's view",
    # -- every setting, by design, or the options of each target
    "model/documents/reports.py:config_report": (
        "prints every setting and its source for `orchestrator config` (Options.describe)"
    ),
    "plan/serialize.py:action_key": (
        "hashes every setting that can change a build into the action key (any setting "
        "added later counts unless excluded), after the flavor's overrides (for_flavor)"
    ),
    "release/targets/target.py:targets": (
        "makes each target's own Options (the flavor's overrides by for_flavor, its level "
        "as target_cpu), which its plan, its build and its action key read"
    ),
    "config/init/run_files.py:run_hazards": (
        "applies each flavor's overrides (Options.for_flavor) before it reads that flavor's "
        "runs: the runs differ by flavor"
    ),
    # -- a target's plan: where the plan's views are built
    "plan/build_plan.py:make_plan": (
        "where a target's views are built (FlavorView, CargoSettings, GateSettings, "
        "BoltSettings) for the parts of its plan below it; it reads most other settings "
        "itself into the BuildPlan (validation, profiling, limits, tests, distros)"
    ),
    "plan/build_plan.py:_for_target": (
        "applies the flavor's overrides to the whole options (Options.for_flavor), which "
        "make_plan reads from then on, and builds the flavor's view of them"
    ),
    "execute/build.py:prepare_plan": (
        "reads a target's inputs from disk (toolchain, crate snapshot, [train] inputs) and "
        "hands the options on to make_plan, which builds the target's views"
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
        "builds the flavor's and the crate's views (FlavorView, CrateView) and the runs "
        "(run_plan) of the published build it benches, and finds its folder"
    ),
    # -- the CLI, where a command's resolved options become what runs
    "cli/app.py:signer_for": (
        "the one place where a command's resolved options become its Signer "
        "(signing.secret_key, refused inside the project or the cache), for the six "
        "commands that sign"
    ),
    "cli/rebuild.py:release_rebuilt": (
        "gives every target's options the second builder's own cache (replace cache_dir), "
        "which its plan and build read, resolves the signer, and builds the release's view "
        "that publish_checked reads"
    ),
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
