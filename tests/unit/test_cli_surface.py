"""What the CLI prints, as text: help that reads like cargo's, messages and tables that
keep every character they are given, and shell completion.

Rich markup used to eat `[flavors.cpu]` and `[x]`, crash on `[/]` and turn `:lock:` into
an emoji; each case below goes through a real command with typer's runner.
"""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.cli.complete import (
    complete_flavor,
    complete_flavor_list,
    complete_release_dir,
    complete_target_cpu,
    complete_toolchain,
)
from orchestrator.config.declarations.flags import flag_specs
from orchestrator.config.resolve.toolchains import available_toolchains
from orchestrator.execute.ship.release_index import update_release_index
from orchestrator.execute.verdict import bench as bench_module
from orchestrator.execute.verdict import bench_report
from orchestrator.execute.verdict.bench import VariantStats
from orchestrator.progress.reporter import Reporter
from orchestrator.runtime import doctor
from orchestrator.runtime.doctor import Check
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import CHECKSUMS

from .fakes import FakeEngine
from .test_supply_release_files import make_release

runner = CliRunner()
# Text that rich markup and emoji codes would change: a tag, a closing tag that crashes
# rich, a config section and an emoji code.
TRICKY = ("[x]", "[/]", '["/"]', ":lock:")


def _commands(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(typer.main.get_command(app))
# How typer names a value's type when no metavar is given: `<bool>`, `<list[str]>`, ...
TYPER_TYPE = re.compile(r"<(bool|str|int|float|path|file|dir|list\[[^]]*\]|(int|float) range)>")


def _help(path: tuple[str, ...]) -> str:
    result = runner.invoke(app, [*path, "--help"], prog_name="orchestrator")
    assert result.exit_code == 0, result.output
    assert result.exception is None
    return result.output


def test_every_command_is_walked() -> None:
    assert ("build",) in COMMANDS
    assert ("vault", "export") in COMMANDS
    assert len(COMMANDS) >= 15  # the root, 11 commands, vault and its 2 subcommands


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "orchestrator")
def test_help_reads_like_cargo(path: tuple[str, ...]) -> None:
    text = _help(path)
    usage = text.splitlines()[0]
    assert usage.startswith(f"Usage: orchestrator {' '.join(path)}".rstrip())
    assert "{" not in usage, usage  # arguments are RELEASE_DIR, not {release_dir}
    assert TYPER_TYPE.search(text) is None, TYPER_TYPE.search(text)
    assert "─" not in text  # no rich panels
    # The help ends with examples, one per line as written, before the option list.
    blocks = text.split("\n\n")
    examples = next(i for i, block in enumerate(blocks) if block.startswith("  Example"))
    lines = blocks[examples].splitlines()
    assert lines[0] == "  Examples:"
    assert lines[1:], text
    assert all(line.startswith("    ") and "orchestrator" in line for line in lines[1:])
    assert blocks[examples + 1].startswith(("Arguments:", "Options:")), text


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "orchestrator")
def test_values_have_upper_case_names_and_flags_none(path: tuple[str, ...]) -> None:
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    for param in command.params:
        if getattr(param, "is_flag", False) or param.name == "help":
            continue
        assert param.metavar is not None, f"{' '.join(path)} {param.name}: no metavar"
        assert re.fullmatch(r"[A-Z][A-Z_]*", param.metavar), param.metavar


def test_help_keeps_brackets_defaults_and_says_what_each_command_does() -> None:
    release = _help(("release",))
    assert '[flavors.cpu] levels = ["x86-64-v2", "x86-64-v3"]' in " ".join(release.split())
    assert "--bench-runs N" in release
    assert "[x>=0]" in release  # its default: bench.runs where set, else 3, as it says
    assert "bench.runs where the config or environment sets it, else 3" in " ".join(release.split())
    build = _help(("build",))
    assert "-f, --flavor FLAVOR" in build
    assert "Flavor to build" in build
    assert "[default: cpu]" in build
    assert "--target-cpu CPU" in build
    assert "--artifacts-dir DIR" in build
    assert "--pgo / --no-pgo" in build
    assert "--dry-run  " in build or "--dry-run\n" in build  # a flag takes no value
    bench = _help(("bench",))
    assert "Flavor whose published build to benchmark" in bench
    assert "Flavor to build" not in bench
    assert "--runs N" in bench
    assert "Usage: orchestrator verify [OPTIONS] RELEASE_DIR" in _help(("verify",))
    assert "Usage: orchestrator keygen [OPTIONS] [KEY]" in _help(("keygen",))
    assert "--artifact NAME" in _help(("reproduce",))


def test_short_help_option_is_the_long_one() -> None:
    short = runner.invoke(app, ["vault", "export", "-h"], prog_name="orchestrator")
    assert short.exit_code == 0
    assert short.output == _help(("vault", "export"))


def test_setting_flags_name_their_values_by_type() -> None:
    specs = flag_specs()
    names = {key: spec.metavar for key, spec in specs.items()}
    assert names["build.target_cpu"] == "CPU"
    assert names["build.toolchain"] == "TOOLCHAIN"
    assert names["build.artifacts_dir"] == names["build.cache_dir"] == "DIR"
    assert names["bench.runs"] == "N"
    assert names["bolt.mode"] == "MODE"
    assert names["build.flavors"] == "LIST"
    assert names["pgo.enabled"] is None  # --pgo/--no-pgo takes no value
    cpu = specs["build.target_cpu"]
    assert cpu.help_for("the CPU to bench") == (
        "the CPU to bench (default x86-64-v2; env ORCHESTRATOR_BUILD_TARGET_CPU or "
        "ORCHESTRATOR_TARGET_CPU)."
    )


def test_completion_is_offered() -> None:
    text = _help(())
    assert "--install-completion" in text
    assert "--show-completion" in text


# ---- text that markup would eat ----------------------------------------------------


def _no_traceback(result: object) -> str:
    output: str = result.output  # type: ignore[attr-defined]
    exception = result.exception  # type: ignore[attr-defined]
    assert exception is None or isinstance(exception, SystemExit), exception
    assert "Traceback" not in output
    return output


def _config(project: Path, text: str) -> Path:
    path = project / "orchestrator.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[x]\na = 1\n", "unknown section [x];"),
        ('["/"]\na = 1\n', "unknown section [/];"),
        ('[build]\n"[x]" = 1\n', "unknown key 'build.[x]'; [build] takes:"),
        ('[bolt]\nmode = "[/]:lock:"\n', "got '[/]:lock:'"),
        ('[train]\nworkloads = [":lock:", "[/]"]\n', "got list [':lock:', '[/]']"),
    ],
)
def test_config_errors_keep_their_text(project: Path, toml: str, expected: str) -> None:
    config = _config(project, '[package]\ncrate = "crate"\n' + toml)
    result = runner.invoke(app, ["config", "--config", str(config)])
    output = _no_traceback(result)
    assert result.exit_code == 10, output
    assert expected in output
    assert "🔒" not in output
    assert "hint: Fix the value named above" in output


def test_a_crate_path_with_markup_in_an_error(project: Path) -> None:
    config = _config(project, '[package]\ncrate = ":lock:[x][/]"\n')
    result = runner.invoke(app, ["config", "--config", str(config)])
    assert result.exit_code == 10
    assert f"{project}/:lock:[x][/] has no Cargo.toml" in _no_traceback(result)


def test_a_hint_keeps_its_config_sections(project: Path) -> None:
    config = _config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
        '[flavors.cpu]\ngpu_targets = ["sm_80"]\n',
    )
    result = runner.invoke(app, ["build", "--dry-run", "--config", str(config)])
    assert result.exit_code == 10
    output = _no_traceback(result)
    assert "hint: gpu_targets belongs under [flavors.cuda] or [flavors.rocm]." in output


def test_the_config_table_shows_values_as_written(project: Path) -> None:
    config = _config(
        project,
        '[package]\ncrate = "crate"\n[bench]\ncommand = ["[x]", "[/]", "[/]", ":lock:"]\n',
    )
    result = runner.invoke(app, ["config", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "['[x]', '[/]', '[/]', ':lock:']" in _no_traceback(result)


def test_the_doctor_table_shows_details_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = [Check(text, "fail", f"detail {text}") for text in TRICKY]
    monkeypatch.setattr(doctor, "run_checks", lambda _cache, **_: checks)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["doctor"], env={"ORCHESTRATOR_CONFIG": None})
    output = _no_traceback(result)
    assert result.exit_code == 60
    for text in TRICKY:
        assert f"detail {text}" in output
    assert 'blocked by: [x], [/], ["/"], :lock:' in output


def test_verify_shows_the_signed_comment_and_paths_as_written(tmp_path: Path) -> None:
    release = make_release(tmp_path / "[x]" / ":lock:[/]")
    (release.root / "release.lock").write_text("{}\n")
    # now signed "inputs:lock:<sha>"
    update_release_index(release.root, release.signer, vouched=("release.lock",))
    result = runner.invoke(app, ["verify", str(release.root), "--key", str(release.public)])
    output = _no_traceback(result)
    assert result.exit_code == 0, output
    assert re.search(r"inputs:lock:[0-9a-f]{16}", output)
    assert str(release.root.resolve()) in output
    assert "🔒" not in output


def test_keygen_prints_its_paths_as_written(tmp_path: Path) -> None:
    key = tmp_path / "[x]" / ":lock:[/]" / "k.key"
    result = runner.invoke(app, ["keygen", "--unencrypted", str(key)])
    output = _no_traceback(result)
    assert result.exit_code == 0, output
    assert f"secret key: {key} (unencrypted)" in output


def test_the_bench_table_shows_the_command_as_written(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(project, '[package]\ncrate = "crate"\n[bench]\ncommand = ["[x]", ":lock:"]\n')
    artifact = project / "demo-[x]:lock:"
    stat = VariantStats(
        name="pgo [x]",
        times=(0.01,),
        median=0.01,
        p95=0.02,
        mean=0.01,
        stddev=0.0,
        speedup=1.5,
        speedup_ci=(1.4, 1.6),
        max_rss_kb=2048,
        size=10**6,
    )
    monkeypatch.setattr(Engine, "connect", staticmethod(FakeEngine))
    monkeypatch.setattr(bench_module, "locate", lambda _o, _f: SimpleNamespace(artifact=artifact))
    monkeypatch.setattr(bench_module, "bench_cpu", lambda _engine: 1)
    monkeypatch.setattr(bench_module, "measure", lambda *_a, **_k: [stat])
    monkeypatch.setattr(bench_report, "write_report", lambda *_a, **_k: artifact / "bench")
    result = runner.invoke(app, ["bench", "--config", str(config)])
    output = _no_traceback(result)
    assert result.exit_code == 0, output
    assert "benchmarking demo-[x]:lock:: `[x] :lock:`" in output
    assert "demo-[x]:lock:: [x] :lock:" in output  # the table's title
    assert "pgo [x]" in output
    assert f"report: {artifact / 'bench'}" in output


def test_progress_lines_keep_step_titles_and_messages(tmp_path: Path) -> None:
    out = StringIO()
    reporter = Reporter(Console(file=out, width=200), tmp_path, env={})
    reporter.info("info [x] :lock:")
    reporter.warn("warn [/]")
    with reporter.step("step[x]", 'title ["/"] :lock:') as log:
        log.line("output [/]")
    text = out.getvalue()
    assert "info [x] :lock:" in text
    assert "warning: warn [/]" in text
    assert 'step[x]: title ["/"] :lock:' in text
    assert "🔒" not in text


# ---- shell completion ----------------------------------------------------------------


def test_completion_functions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert complete_flavor() == ["cpu", "cuda", "rocm", "aarch64"]
    assert complete_flavor_list("cpu,") == ["cpu,cuda", "cpu,rocm", "cpu,aarch64"]
    assert complete_flavor_list("") == ["cpu", "cuda", "rocm", "aarch64"]
    assert complete_toolchain() == available_toolchains()
    assert "rustc-web-1.96" in complete_toolchain()
    monkeypatch.chdir(tmp_path)  # no project here: the flavors' own CPU names
    ctx = SimpleNamespace(params={"flavor": "aarch64", "config": None})
    assert complete_target_cpu(ctx) == ["generic"]  # type: ignore[arg-type]
    every = complete_target_cpu(SimpleNamespace(params={}))  # type: ignore[arg-type]
    assert {"x86-64-v2", "x86-64-v3", "x86-64-v4", "generic"} <= set(every)
    for name in ("demo-1.2.3", "other-0.1.0", "not-a-release"):
        (tmp_path / "artifacts" / name).mkdir(parents=True)
    for name in ("demo-1.2.3", "other-0.1.0"):
        (tmp_path / "artifacts" / name / CHECKSUMS).write_text("")
    releases = complete_release_dir(SimpleNamespace(params={}))  # type: ignore[arg-type]
    assert releases == ["artifacts/demo-1.2.3", "artifacts/other-0.1.0"]


def test_target_cpus_include_the_projects_levels(project: Path) -> None:
    config = _config(
        project, '[package]\ncrate = "crate"\n[flavors.aarch64]\nlevels = ["neoverse-n1"]\n'
    )
    ctx = SimpleNamespace(params={"flavor": "aarch64", "config": config})
    assert complete_target_cpu(ctx) == ["generic", "neoverse-n1"]  # type: ignore[arg-type]


def _complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash's completion script gets for `words` (the cursor after the last one)."""
    result = runner.invoke(
        app,
        [],
        prog_name="orchestrator",
        env={
            "_ORCHESTRATOR_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split(" ")) - 1),
            **(env or {}),
        },
    )
    assert result.exit_code == 0, result.output
    return result.output.split()


def test_completion_through_the_shell_protocol(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _complete("orchestrator build --flavor c") == ["cpu", "cuda"]
    assert _complete("orchestrator bench --flavor ") == ["cpu", "cuda", "rocm", "aarch64"]
    assert _complete("orchestrator build --toolchain rustc-w") == ["rustc-web-1.96"]
    assert _complete("orchestrator release --flavors cpu,r") == ["cpu,rocm"]
    assert "x86-64-v3" in _complete("orchestrator build --flavor cpu --target-cpu x86")
    release = project / "artifacts" / "demo-1.2.3"
    release.mkdir(parents=True)
    (release / CHECKSUMS).write_text("")
    monkeypatch.chdir(project)
    assert _complete("orchestrator verify ") == ["artifacts/demo-1.2.3"]
    assert _complete("orchestrator vault export art") == ["artifacts/demo-1.2.3"]
    assert _complete("orchestrator reproduce ") == ["artifacts/demo-1.2.3"]
