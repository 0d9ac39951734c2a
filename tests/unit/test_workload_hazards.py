"""Runs that make poor workloads for a flavor: interactive, a GPU the flavor lacks,
sampling without a seed (issue 42, point 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.config.init.workload_hazards import CliFacts, read_cli_facts, workload_hazards

from .test_cli_bad_input import docker_down  # noqa: F401 (a fixture)

runner = CliRunner()

# A clap derive like an inference engine's: -i reads prompts from stdin.
ENGINE_MAIN = """
use clap::Parser;

#[derive(Parser)]
struct Cli {
    /// Read prompts from stdin, one per line, and answer each (a REPL).
    #[arg(short = 'i', long)]
    interactive_mode: bool,
    /// Sampling temperature.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    #[arg(long)]
    seed: Option<u64>,
    #[arg(
        short,
        long,
        help = "print tokens as they come"
    )]
    stream: bool,
    model: std::path::PathBuf,
}
"""

# ripgrep's -i ignores case; a builder chain with a switch that does read stdin.
SEARCH_MAIN = """
fn cli() -> Command {
    Command::new("search")
        .arg(Arg::new("ignore-case").short('i').long("ignore-case")
             .help("Case insensitive search.").action(ArgAction::SetTrue))
        .arg(Arg::new("prompt").short('P').long("prompt").help("Ask for patterns interactively"))
        .arg(Arg::new("path").value_name("PATH").num_args(1..));
}
"""


@pytest.mark.parametrize(
    ("args", "flavor", "reason"),
    [
        (["--chat", "--model", "m.gguf"], "cpu", "--chat starts an interactive session"),
        (["--interactive"], "cuda", "--interactive starts an interactive session"),
        (["--repl", "x.txt"], "cpu", "--repl starts an interactive session"),
        (["--backend", "cuda", "x.txt"], "cpu", "--backend cuda needs a GPU, and the cpu"),
        (["--device=cuda:0", "x"], "aarch64", "--device cuda:0 needs a GPU, and the aarch64"),
        (["--gpu", "x"], "cpu", "--gpu needs a GPU, and the cpu flavor's runs have none"),
        (["--backend", "rocm"], "cuda", "--backend rocm needs a GPU the cuda flavor's runs"),
        (["--backend", "metal"], "rocm", "--backend metal needs a GPU the rocm flavor's"),
        (["gen", "--temperature", "0.7"], "cpu", "samples at --temperature 0.7 without a seed"),
        (["gen", "--top-k", "40"], "cpu", "samples with --top-k without a seed"),
        (["--top-p=0.9", "x"], "cpu", "samples with --top-p without a seed"),
        (["generate", "--prompt", "hi"], "cpu", "sampling without a seed or --temperature 0"),
        (["chat", "--max-tokens", "8"], "cpu", "sampling without a seed"),
    ],
)
def test_each_hazard_is_named(args: list[str], flavor: str, reason: str) -> None:
    found = workload_hazards(args, flavor)
    assert [text for text in found if text.startswith(reason)], found


@pytest.mark.parametrize(
    ("args", "flavor"),
    [
        (["-i", "foo"], "cpu"),  # ripgrep: ignore case, no evidence it reads stdin
        (["-w", "fn write\\(", "src"], "cpu"),
        (["--backend", "cpu", "--model", "m"], "cpu"),
        (["--backend", "cuda", "--model", "m"], "cuda"),
        (["--device", "gpu"], "rocm"),
        (["--backend", "hip"], "rocm"),
        (["--interactive=false", "x.txt"], "cpu"),
        (["generate", "--temperature", "0", "--prompt", "hi"], "cpu"),
        (["generate", "--temperature=0.0"], "cpu"),
        (["generate", "--seed", "42", "--top-k", "40"], "cpu"),
        (["sample", "--temperature", "0.8", "--rng-seed=1"], "cpu"),
        (["generate", "--greedy"], "cpu"),
        (["count", "data.txt"], "cpu"),
    ],
)
def test_runs_without_hazards_pass(args: list[str], flavor: str) -> None:
    assert workload_hazards(args, flavor) == []


def test_a_short_switch_is_interactive_only_when_its_help_says_so(tmp_path: Path) -> None:
    engine = tmp_path / "engine.rs"
    engine.write_text(ENGINE_MAIN)
    search = tmp_path / "search.rs"
    search.write_text(SEARCH_MAIN)
    facts = read_cli_facts([engine])
    assert {"-i", "--interactive-mode", "--temperature", "--seed", "-s", "--stream"} <= set(
        facts.options
    )
    assert "stdin" in facts.switches["-i"]
    assert "print tokens" in facts.switches["--stream"]
    assert "--temperature" not in facts.switches  # takes a value: not a switch
    [reason] = workload_hazards(["-i", "--seed", "1", "m.gguf"], "cpu", facts)
    assert reason.startswith("-i reads stdin (its help: 'Read prompts from stdin")
    assert workload_hazards(["-s", "--seed", "1", "m.gguf"], "cpu", facts) == []

    only_search = read_cli_facts([search])
    assert "Case insensitive" in only_search.switches["-i"]
    assert "--path" not in only_search.options
    assert workload_hazards(["-i", "foo"], "cpu", only_search) == []
    assert workload_hazards(["-P", "x"], "cpu", only_search)[0].startswith("-P reads stdin")


def test_an_inference_word_of_a_binary_that_cannot_sample_is_no_hazard() -> None:
    greedy_only = CliFacts({}, frozenset({"--model", "--max-tokens"}))
    assert workload_hazards(["generate", "--max-tokens", "8"], "cpu", greedy_only) == []
    samples = CliFacts({}, frozenset({"--model", "--temperature"}))
    assert workload_hazards(["generate", "--max-tokens", "8"], "cpu", samples) != []


def test_every_hazard_of_one_run_is_listed() -> None:
    found = workload_hazards(["--chat", "--backend", "cuda", "--temperature", "1"], "cpu")
    assert len(found) == 3, found


DRY_RUN_CONFIG = """[package]
crate = "crate"
[build]
flavors = ["cpu", "cuda"]
[train]
workloads = [["--chat", "data.txt"], ["count", "data.txt"]]
[validate]
command = ["generate", "--prompt", "hi"]
[bench]
command = ["--backend", "cuda", "data.txt"]
{cpu_bench}
"""


@pytest.mark.usefixtures("docker_down")
def test_dry_runs_warn_about_each_hazardous_run(project: Path) -> None:
    crate = project / "crate"
    (crate / "data.txt").write_text("words\n")
    path = project / "orchestrator.toml"
    path.write_text(DRY_RUN_CONFIG.format(cpu_bench=""))
    planned = runner.invoke(app, ["build", "--dry-run", "--config", str(path)])
    assert planned.exit_code == 0, planned.output
    warnings = [line for line in planned.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: train.workloads[0] (--chat data.txt) for cpu: --chat starts an interactive "
        "session: a run has no input to give it",
        "warning: validate.command (generate --prompt hi) for cpu: sampling without a seed or "
        "--temperature 0: its output differs from run to run, so validation cannot compare it",
        "warning: bench.command (--backend cuda data.txt) for cpu: --backend cuda needs a GPU, "
        "and the cpu flavor's runs have none",
    ]
    cuda = runner.invoke(app, ["build", "--dry-run", "--flavor", "cuda", "--config", str(path)])
    assert cuda.exit_code == 0, cuda.output
    assert "bench.command" not in cuda.stderr  # the cuda flavor's runs may use cuda
    assert "train.workloads[0] (--chat data.txt) for cuda: --chat" in cuda.stderr
    # a [flavors.cpu.bench] table that runs on the CPU: no warning about it for cpu
    path.write_text(
        DRY_RUN_CONFIG.format(cpu_bench='[flavors.cpu.bench]\ncommand = ["--backend", "cpu"]')
    )
    release = runner.invoke(app, ["release", "--dry-run", "--config", str(path)])
    assert release.exit_code == 0, release.output
    assert "train.workloads[0] (--chat data.txt) for cpu, cuda: --chat" in release.stderr
    assert "validate.command (generate --prompt hi) for cpu, cuda: sampling" in release.stderr
    assert "bench.command" not in release.stderr
    assert "Traceback" not in release.output
