"""Per-flavor overrides of [train], [validate], [bench], [gate] and [test]: parsed, checked
and explained like any setting, and applied through `Options.for_flavor` to that flavor's
plan alone (its steps' keys and its action key change; the other flavors' do not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.options import Options, resolve
from orchestrator.errors import ConfigError
from orchestrator.model.documents.reports import config_report
from orchestrator.plan.serialize import action_key
from orchestrator.plan.step_keys import cargo_test_key, pgo_key
from orchestrator.release.targets.target import targets

from .conftest import plan_for, write_config

BASE = """\
[package]
crate = "crate"
[train]
workloads = [["gen", "--n", "3"]]
[validate]
command = ["check"]
[bench]
command = ["bench"]
"""
BACKEND = ["--backend", "cpu"]


def _resolve(project: Path, extra: str, env: dict[str, str] | None = None) -> Options:
    return resolve(write_config(project, BASE + extra), env=env or {})


def _refused(project: Path, extra: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _resolve(project, extra)
    return caught.value.message + "\n" + caught.value.hint


CUDA_ON_CPU = """\
[flavors.cuda.train]
args_append = ["--backend", "cpu"]
[flavors.cuda.validate]
args_append = ["--backend", "cpu"]
[flavors.cuda.bench]
args_append = ["--backend", "cpu"]
[flavors.cuda.gate]
args_append = ["--backend", "cpu"]
[flavors.aarch64.test]
enabled = false
reason = "its tests start the binary"
"""


# -- parsing and what each flavor gets -------------------------------------------------------
def test_args_append_reaches_every_command_of_its_section_for_that_flavor_only(
    project: Path,
) -> None:
    options = _resolve(project, CUDA_ON_CPU)
    cuda = options.for_flavor("cuda")
    assert cuda.workloads == (Run(("gen", "--n", "3", *BACKEND)),)
    assert cuda.validate_command == ("check", *BACKEND)
    assert cuda.bench_command == ("bench", *BACKEND)
    # The gate counts the [train] workloads with its own args_append, not twice.
    assert cuda.gate_workloads == (Run(("gen", "--n", "3", *BACKEND)),)
    assert cuda.test_enabled
    cpu = options.for_flavor("cpu")
    assert (cpu.workloads, cpu.validate_command, cpu.bench_command, cpu.gate_workloads) == (
        options.workloads,
        ("check",),
        ("bench",),
        (),
    )
    aarch64 = options.for_flavor("aarch64")
    assert (aarch64.test_enabled, aarch64.test_reason) == (False, "its tests start the binary")
    assert aarch64.workloads == options.workloads
    assert options.test_enabled  # the top level is untouched


def test_a_key_replaces_the_top_level_value_and_args_append_follows_it(project: Path) -> None:
    options = _resolve(
        project,
        """\
[flavors.cuda.train]
workloads = [["small"], {binary = "demo", args = ["tiny"]}]
args_append = ["-q"]
[flavors.cuda.validate]
command = ["verify"]
tolerance = 0.25
runs = [["--version"]]
[flavors.cuda.test]
args = ["--", "--skip", "gpu_"]
[flavors.cuda.gate]
workloads = [["count"]]
policy = "require-all"
""",
    )
    cuda = options.for_flavor("cuda")
    # A run naming the main binary is a plain argument list, as at the top level.
    assert cuda.workloads == (Run(("small", "-q")), Run(("tiny", "-q")))
    assert (cuda.validate_command, cuda.validate_tolerance) == (("verify",), 0.25)
    assert cuda.validate_runs == (Run(("--version",)),)
    assert cuda.test_args == ("--", "--skip", "gpu_")
    assert (cuda.gate_workloads, cuda.gate_policy) == ((Run(("count",)),), "require-all")
    assert options.for_flavor("rocm").gate_policy == options.gate_policy == "best"


def test_for_flavor_is_idempotent_and_never_crosses_flavors(project: Path) -> None:
    cuda = _resolve(project, CUDA_ON_CPU).for_flavor("cuda")
    assert cuda.for_flavor("cuda") is cuda  # appended once, however often it is asked
    with pytest.raises(ValueError, match="options of flavor cuda used for cpu"):
        cuda.for_flavor("cpu")


def test_release_targets_carry_their_flavors_settings(project: Path) -> None:
    options = _resolve(project, CUDA_ON_CPU)
    found = {t.flavor: t.options for t in targets(options, ["cpu", "aarch64"])}
    assert found["cpu"].workloads == options.workloads
    assert not found["aarch64"].test_enabled


# -- provenance and typos -------------------------------------------------------------------
def test_config_shows_each_override_with_its_table(project: Path) -> None:
    rows = {
        key: (shown, source) for key, shown, source in _resolve(project, CUDA_ON_CPU).describe()
    }
    assert rows["flavors.cuda.train.args_append"] == (
        "['--backend', 'cpu']",
        "file orchestrator.toml [flavors.cuda.train]",
    )
    assert rows["flavors.aarch64.test.enabled"] == (
        "False",
        "file orchestrator.toml [flavors.aarch64.test]",
    )
    assert "flavors.cpu.train.args_append" not in rows  # only what was given is listed


def test_a_flag_or_variable_of_the_same_key_beats_the_flavors_table(project: Path) -> None:
    extra = '[flavors.cuda.gate]\npolicy = "require-all"\n'
    options = _resolve(project, extra, env={"ORCHESTRATOR_GATE_POLICY": "off"})
    assert options.for_flavor("cuda").gate_policy == "off"
    sources = {key: source for key, _, source in options.describe()}
    assert sources["flavors.cuda.gate.policy"] == (
        "file orchestrator.toml [flavors.cuda.gate]; env ORCHESTRATOR_GATE_POLICY wins"
    )
    assert _resolve(project, extra).for_flavor("cuda").gate_policy == "require-all"


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        (
            '[flavors.cuda.train]\nargs_apend = ["-q"]\n',
            ["unknown key 'flavors.cuda.train.args_apend'", "'flavors.cuda.train.args_append'"],
        ),
        (
            '[flavors.cuda.test]\nargs_append = ["-q"]\n',  # cargo test: use test.args
            ["unknown key 'flavors.cuda.test.args_append'", "takes: args, enabled, reason"],
        ),
        ("[flavors.cuda.trian]\nenv = []\n", ["did you mean 'flavors.cuda.train'"]),
        (
            "[flavors.cuda.validate]\ncommand = 3\n",
            ["[flavors.cuda.validate] command: expected a list of strings, got int 3"],
        ),
        (
            '[flavors.cuda.gate]\npolicy = "fast"\n',
            ["[flavors.cuda.gate] policy: expected one of best, require-all, off"],
        ),
        ('[flavors.cuda]\ntrain = ["-q"]\n', ["[flavors.cuda.train] must be a table"]),
        (
            '[flavors.cuda.train]\ninputs = ["data"]\n',
            ["inputs cannot differ per flavor", "Set inputs in [train] only"],
        ),
        (
            "[flavors.aarch64.test]\nenabled = false\n",
            ["[flavors.aarch64.test] enabled = false needs a reason", "reason ="],
        ),
        (
            '[flavors.cuda.train]\nworkloads = [{binary = "democtl", args = []}]\n',
            ["'democtl', ...} is not a binary the artifact ships", "[flavors.cuda.*]"],
        ),
        (
            '[flavors.cuda.train]\nenv = ["NOEQUALS"]\n',
            ["train.env entry 'NOEQUALS' is not KEY=VALUE", "[flavors.cuda.*]"],
        ),
    ],
)
def test_bad_overrides_name_their_table(project: Path, extra: str, fragments: list[str]) -> None:
    text = _refused(project, extra)
    for fragment in fragments:
        assert fragment in text


# -- the plan and its keys ------------------------------------------------------------------
def test_the_plan_uses_the_flavors_settings_and_only_its_keys_change(project: Path) -> None:
    plain = _resolve(project, "")
    overridden = _resolve(
        project,
        '[flavors.aarch64.train]\nargs_append = ["--backend", "cpu"]\n'
        '[flavors.aarch64.test]\nargs = ["--", "--skip", "spawns"]\n',
    )
    before = {name: plan_for(plain, name) for name in ("cpu", "aarch64")}
    after = {name: plan_for(overridden, name) for name in ("cpu", "aarch64")}
    assert after["aarch64"].workloads == (Run(("gen", "--n", "3", *BACKEND)),)
    assert after["aarch64"].test.argv[-3:] == ("--", "--skip", "spawns")
    assert pgo_key(after["aarch64"]) != pgo_key(before["aarch64"])
    assert cargo_test_key(after["aarch64"], None) != cargo_test_key(before["aarch64"], None)
    assert action_key(after["aarch64"], overridden) != action_key(before["aarch64"], plain)
    # The cpu target reads none of it: its plan and keys are the same as before.
    assert after["cpu"].workloads == before["cpu"].workloads
    assert pgo_key(after["cpu"]) == pgo_key(before["cpu"])
    assert cargo_test_key(after["cpu"], None) == cargo_test_key(before["cpu"], None)
    assert action_key(after["cpu"], overridden) == action_key(before["cpu"], plain)


def test_a_flavor_turning_its_tests_off_drops_its_test_step(project: Path) -> None:
    options = _resolve(project, CUDA_ON_CPU)
    aarch64, cpu = plan_for(options, "aarch64"), plan_for(options, "cpu")
    assert aarch64.test_skipped == "its tests start the binary"
    assert "test" not in {step.name.value for step in aarch64.steps}
    assert "test" in {step.name.value for step in cpu.steps}


def test_config_json_gives_each_override_its_value(project: Path) -> None:
    report = config_report(_resolve(project, CUDA_ON_CPU))
    entries = {entry.key: entry for entry in report.settings}
    assert entries["flavors.cuda.gate.args_append"].value == BACKEND
    assert entries["flavors.aarch64.test.reason"].value == "its tests start the binary"
    assert entries["flavors.aarch64.test.enabled"].source.endswith("[flavors.aarch64.test]")
