"""Issue 31, points 4, 5 and 7: every declared flag exists; keygen judges the key's own
path; typos and contradictions from the environment and the command line are errors that
name what was meant (as the config file's already were)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest
import typer
from typer._click import Command, Parameter
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.config.declarations.flags import flag_specs
from orchestrator.config.declarations.setting import Setting
from orchestrator.config.declarations.settings import SETTINGS
from orchestrator.config.resolve.options import resolve
from orchestrator.config.resolve.target_cpus import check_recorded_cpu, recorded_target_cpus
from orchestrator.config.resolve.typos import (
    DIRECT_VARIABLES,
    check_environment,
    check_flag_conflicts,
    known_variables,
)
from orchestrator.errors import ConfigError
from orchestrator.flavors import FLAVORS, get_flavor
from orchestrator.runtime import doctor
from orchestrator.supply.attest import keygen

from .conftest import write_config

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
CONFIG = '[package]\ncrate = "crate"\n[train]\nworkloads = [["--seed", "1"]]\n'


# -- 4. every declared flag is a flag of the commands ------------------------------------


def _walk(command: Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Command]]:
    yield " ".join(path) or "orchestrator", command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _walk(sub, (*path, name))


def _names(param: Parameter) -> tuple[str, ...]:
    return (*param.opts, *param.secondary_opts)


def _options(command: Command) -> set[str]:
    return {n for p in command.params if p.param_type_name == "option" for n in _names(p)}


COMMANDS = dict(_walk(typer.main.get_command(app)))


def missing_flags(settings: Iterable[Setting], commands: dict[str, Command]) -> list[str]:
    """Each flag a setting declares that no command accepts."""
    accepted = set().union(*(_options(c) for c in commands.values()))
    return [name for s in settings for name in s.flag_names if name not in accepted]


def misspelt_uses(commands: dict[str, Command]) -> list[str]:
    """Options made from a setting's declaration (their help ends with its default and
    variables) whose names are not the declared ones."""
    wrong = []
    for spec in flag_specs().values():
        for where, command in commands.items():
            for param in command.params:
                help_text = getattr(param, "help", None) or ""
                if param.param_type_name != "option" or not help_text.endswith(spec.origin):
                    continue
                names = _names(param)
                if sorted(names) != sorted(spec.names):
                    wrong.append(f"{where}: {names} for {spec.key} {spec.names}")
    return wrong


def test_every_declared_flag_is_accepted_by_a_command() -> None:
    assert missing_flags(SETTINGS, COMMANDS) == []
    assert misspelt_uses(COMMANDS) == []


def test_the_walk_finds_a_made_up_flag() -> None:
    made_up = Setting("build.made_up", "str", "x", "nothing", attr="made_up", flag="--made-up")
    toggle = Setting("pgo.made_up", "bool", True, "nothing", attr="t", flag="--pgo/--no-pgo-x")
    assert missing_flags((*SETTINGS, made_up, toggle), COMMANDS) == ["--made-up", "--no-pgo-x"]


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("build", {"--gate", "--glibc-floor", "--distro-check", "--allow-privileged"}),
        ("doctor", {"--allow-privileged", "--no-allow-privileged"}),
    ],
)
def test_the_flags_the_readme_names_exist(command: str, flags: set[str]) -> None:
    assert flags <= _options(COMMANDS[command])


def test_builds_flags_reach_the_plan(project: Path) -> None:
    config = str(write_config(project, CONFIG))
    base = ["build", "--dry-run", "--config", config]
    plain = runner.invoke(app, base)
    assert plain.exit_code == 0, plain.output
    assert '"speed-gate"' in plain.output and '"distros"' in plain.output
    assert "/build/glibc-2.28" in plain.output
    flagged = runner.invoke(
        app, [*base, "--gate", "off", "--distro-check", "off", "--glibc-floor", "2.31"]
    )
    assert flagged.exit_code == 0, flagged.output
    assert '"speed-gate"' not in flagged.output and '"distros"' not in flagged.output
    assert "/build/glibc-2.28" not in flagged.output
    wrong = runner.invoke(app, [*base, "--gate", "bset"])
    assert wrong.exit_code == 10
    assert "expected one of best, require-all, off, got 'bset'" in wrong.output


def test_doctor_passes_allow_privileged_to_the_perf_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    def checks(_cache: Path | None, *, allow_privileged: bool = False) -> list[doctor.Check]:
        seen.append(allow_privileged)
        return [doctor.Check("docker", "ok", "fake")]

    monkeypatch.setattr(doctor, "run_checks", checks)
    monkeypatch.chdir(tmp_path)  # no project: the flag alone decides
    env = {"ORCHESTRATOR_CONFIG": None}
    assert runner.invoke(app, ["doctor"], env=env).exit_code == 0
    assert runner.invoke(app, ["doctor", "--allow-privileged"], env=env).exit_code == 0
    assert seen == [False, True]


# -- 5. keygen judges the key's own path -------------------------------------------------


def _git_init(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return folder


def test_keygen_from_a_repository_writes_outside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from $HOME's repository folder, the recommended ~/.config/... is no repository's."""
    home = tmp_path / "home"
    work = _git_init(home / "src" / "project")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    key = "~/.config/orchestrator/signing.key"
    result = runner.invoke(app, ["keygen", key, "--unencrypted"])
    assert result.exit_code == 0, result.output
    assert (home / ".config" / "orchestrator" / "signing.key").is_file()
    assert (home / ".config" / "orchestrator" / "signing.pub").is_file()
    monkeypatch.chdir(home)  # from $HOME itself too (not a repository)
    again = runner.invoke(app, ["keygen", "~/.config/orchestrator/ci.key", "--unencrypted"])
    assert again.exit_code == 0, again.output


def test_keygen_refuses_another_clone_named_relatively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a folder outside any repository, ../clone/signing.key lands in a git clone."""
    clone = _git_init(tmp_path / "clone")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    result = runner.invoke(app, ["keygen", "../clone/keys/signing.key", "--unencrypted"])
    assert result.exit_code == 47, result.output
    assert f"inside the repository {clone}" in result.output
    assert not (clone / "keys").exists()
    # Refused before a passphrase is asked for: no terminal, no passphrase, same refusal.
    asked = runner.invoke(
        app, ["keygen", "../clone/signing.key"], env={"ORCHESTRATOR_SIGNING_PASSPHRASE": None}
    )
    assert asked.exit_code == 47
    assert "inside the repository" in asked.output


def test_keygen_finds_a_worktree_or_submodule_by_its_git_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    with pytest.raises(Exception, match="inside the repository"):
        keygen(tmp_path / "sub" / "k.key", passphrase=None)
    assert keygen(tmp_path / "k.key", passphrase=None) == tmp_path / "k.pub"


# -- 7. typos and contradictions ---------------------------------------------------------


def test_a_misspelt_variable_is_an_error_naming_the_right_one(project: Path) -> None:
    config = write_config(project, CONFIG)
    env = {"ORCHESTRATOR_BUILD_TARGTE_CPU": "x86-64-v3"}
    with pytest.raises(ConfigError) as caught:
        resolve(config, env=env)
    assert caught.value.exit_code == 10
    assert caught.value.message == (
        "unknown environment variable: ORCHESTRATOR_BUILD_TARGTE_CPU "
        "(did you mean ORCHESTRATOR_BUILD_TARGET_CPU?)"
    )
    assert "unset ORCHESTRATOR_BUILD_TARGTE_CPU" in (caught.value.hint or "")
    result = runner.invoke(app, ["build", "--dry-run", "-c", str(config)], env=env)
    assert result.exit_code == 10
    assert "did you mean ORCHESTRATOR_BUILD_TARGET_CPU?" in result.output
    assert "Traceback" not in result.output


def test_variables_read_directly_and_empty_ones_pass() -> None:
    check_environment(dict.fromkeys(DIRECT_VARIABLES, "1"))
    check_environment({"ORCHESTRATOR_NOTHING": "", "PATH": "/bin", "_ORCHESTRATOR_COMPLETE": "x"})
    with pytest.raises(ConfigError, match=r"variables: ORCHESTRATOR_A; ORCHESTRATOR_ZZZ$"):
        check_environment({"ORCHESTRATOR_ZZZ": "1", "ORCHESTRATOR_A": "1"})


def test_every_variable_the_code_names_is_known() -> None:
    """A variable read anywhere (settings, or code of its own) must be accepted: the source
    and the tests are searched for ORCHESTRATOR_ names."""
    pattern = re.compile(r"(?<![A-Z_])ORCHESTRATOR_[A-Z0-9_]*[A-Z0-9]\b(?!_)")
    found: set[str] = set()
    for folder in ("orchestrator", "tests"):
        for path in (REPO / folder).rglob("*.py"):
            if path.name != Path(__file__).name:
                found |= set(pattern.findall(path.read_text()))
    assert "ORCHESTRATOR_SIGNING_PASSPHRASE" in found and "ORCHESTRATOR_CONFIG" in found
    assert sorted(found - known_variables()) == []


def test_a_misspelt_flavor_gets_a_suggestion(project: Path) -> None:
    config = str(write_config(project, CONFIG))
    result = runner.invoke(app, ["build", "--dry-run", "--flavor", "rcom", "-c", config])
    assert result.exit_code == 10
    assert "unknown flavor 'rcom'; did you mean 'rocm'?" in result.output
    assert "Known flavors: cpu, cuda, rocm, aarch64" in result.output
    with pytest.raises(ConfigError, match="an empty flavor name"):
        get_flavor("")


def test_the_recorded_cpu_lists_are_rustcs() -> None:
    recorded = recorded_target_cpus("rustc-web-1.96")
    assert recorded is not None
    x86 = recorded.targets["x86_64-unknown-linux-gnu"]
    assert {"skylake", "znver4", "native", "x86-64-v3"} <= set(x86)
    assert {"neoverse-n1", "generic"} <= set(recorded.targets["aarch64-unknown-linux-gnu"])
    # every name every rustc knows is in the recorded lists too
    for name, flavor in FLAVORS.items():
        assert set(flavor.known_cpus) <= set(recorded.targets[flavor.rust_target]), name
    assert recorded_target_cpus("rustc-1.85") is None  # none recorded: the image decides


def test_a_misspelt_cpu_fails_the_dry_run(project: Path) -> None:
    config = str(write_config(project, CONFIG))
    result = runner.invoke(app, ["build", "--dry-run", "--target-cpu", "skylkae", "-c", config])
    assert result.exit_code == 10
    assert "target-cpu 'skylkae' is not a CPU that rustc 1.96.0" in result.output
    assert "did you mean 'skylake'?" in result.output
    known = runner.invoke(app, ["build", "--dry-run", "--target-cpu", "skylake", "-c", config])
    assert known.exit_code == 0, known.output
    arm = ["build", "--dry-run", "-f", "aarch64", "-c", config, "--target-cpu"]
    refused = runner.invoke(app, [*arm, "neoverse-n2x"])
    assert refused.exit_code == 10
    assert "for aarch64-unknown-linux-gnu; did you mean 'neoverse-n2'?" in refused.output
    assert runner.invoke(app, [*arm, "neoverse-n2"]).exit_code == 0


def test_a_misspelt_level_fails_the_release_dry_run(project: Path) -> None:
    config = write_config(project, CONFIG + '[flavors.cpu]\nlevels = ["x86-64-v2", "znver44"]\n')
    result = runner.invoke(app, ["release", "--dry-run", "-c", str(config)])
    assert result.exit_code == 10
    assert "target-cpu 'znver44'" in result.output and "did you mean 'znver4'?" in result.output


def test_a_toolchain_without_a_list_is_left_to_the_image(tmp_path: Path) -> None:
    check_recorded_cpu("skylkae", "x86_64-unknown-linux-gnu", "rustc-1.85")
    check_recorded_cpu("anything", "riscv64gc-unknown-linux-gnu", "rustc-web-1.96")
    check_recorded_cpu("native", "x86_64-unknown-linux-gnu", "x", always_known=("native",))
    (tmp_path / "target-cpus").mkdir()
    (tmp_path / "target-cpus" / "bad.toml").write_text('rustc = "1"\n[targets]\nx = []\n')
    with pytest.raises(ConfigError, match="must be a non-empty list"):
        check_recorded_cpu("a", "x", "bad", directory=tmp_path)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--no-bolt", "--bolt-mode", "lbr", "--bolt-policy", "require"],
            "--no-bolt contradicts --bolt-mode lbr and --bolt-policy require",
        ),
        (["--no-bolt", "--bolt-policy", "fallback"], "--no-bolt contradicts --bolt-policy"),
        (["--no-privileged", "--allow-privileged"], "--no-privileged contradicts --allow-"),
    ],
)
def test_contradictory_flags_are_refused(project: Path, flags: Sequence[str], message: str) -> None:
    config = str(write_config(project, CONFIG))
    result = runner.invoke(app, ["build", "--dry-run", *flags, "-c", config])
    assert result.exit_code == 10, result.output
    assert message in result.output
    assert "hint: Give" in result.output


def test_flags_that_agree_pass_and_the_file_may_keep_what_a_flag_turns_off(
    project: Path,
) -> None:
    check_flag_conflicts({"bolt.enabled": True, "bolt.mode": "lbr"})
    check_flag_conflicts({"profiling.privileges": False, "bolt.mode": "instrument"})
    check_flag_conflicts({"profiling.privileges": False, "profiling.allow_privileged": False})
    config = write_config(project, CONFIG + '[bolt]\nmode = "lbr"\npolicy = "require"\n')
    result = runner.invoke(app, ["build", "--dry-run", "--no-bolt", "-c", str(config)])
    assert result.exit_code == 0, result.output


def test_an_empty_value_says_so(project: Path) -> None:
    config = str(write_config(project, CONFIG))
    result = runner.invoke(app, ["build", "--dry-run", "--target-cpu", "", "-c", config])
    assert result.exit_code == 10
    assert "--target-cpu is empty" in result.output
    assert "expected a string, got str" not in result.output
    assert "leave --target-cpu out for the default (x86-64-v2)" in result.output
    in_file = write_config(project, CONFIG + '[build]\ntarget_cpu = ""\n')
    with pytest.raises(ConfigError, match=r"build.target_cpu: empty; expected a string"):
        resolve(in_file, env={})
