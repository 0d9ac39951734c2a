"""`orchestrator init` proposes workloads that can work (issue 31, point 1).

On four fixture crates of different shapes (tests/fixtures/init-*): a README that
downloads its data, a clap binary with subcommands, a workspace whose member's tests show
the runs, a README without a runnable example. Every run `init` writes names only files
of the tree (or is a marked placeholder), and `build --dry-run` / `release --dry-run` warn
about what is left while `release` refuses it before any work.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.config.init.clap_source import read_commands
from orchestrator.config.init.run_files import (
    is_placeholder,
    looks_like_path,
    missing_files,
    path_arguments,
)
from orchestrator.config.init.workload_scan import find_workloads

from .test_cli_bad_input import docker_down  # noqa: F401 (a fixture)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
runner = CliRunner()
TRIVIAL = {"--help", "-h", "--version", "-V"}

# What init proposes for each fixture: the workloads, in order.
EXPECTED = {
    "init-download": [["count", "tests/data/cities.csv"], ["stats", "tests/data/cities.csv"]],
    "init-subcommands": [
        ["word-count", "tests/fixtures/harbour-notes.txt"],
        ["stats", "tests/fixtures/harbour-notes.txt"],
    ],
    "init-workspace": [["lines", "crates/tally/tests/data/log.txt"]],
    "init-no-example": None,  # a placeholder
}


def _copy(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    return root


def _runs(config: dict[str, object]) -> list[list[str]]:
    train = config["train"]
    assert isinstance(train, dict)
    runs = [list(run) for run in train["workloads"]]
    for section in ("validate", "bench"):
        table = config.get(section)
        if isinstance(table, dict) and table.get("command"):
            runs.append(list(table["command"]))
    return runs


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_proposed_run_names_existing_files_or_is_a_marked_placeholder(
    name: str, tmp_path: Path
) -> None:
    root = _copy(name, tmp_path)
    result = runner.invoke(app, ["init", str(root)])
    assert result.exit_code == 0, result.output
    path = root / "orchestrator.toml"
    config = tomllib.loads(path.read_text())
    placeholders = 0
    for run in _runs(config):
        if any(is_placeholder(arg) for arg in run):
            placeholders += 1
            continue
        assert not set(run) <= TRIVIAL, run  # more than --help/--version
        named = list(path_arguments(run))
        assert named, run  # each proposed run reads a file of the tree
        assert missing_files(run, root) == [], run
    workloads = config["train"]["workloads"]
    assert (workloads if EXPECTED[name] is not None else None) == EXPECTED[name]
    planned = runner.invoke(app, ["build", "--dry-run", "--config", str(path)])
    assert planned.exit_code == 0, planned.output
    warned = "placeholder left by `orchestrator init`" in planned.stderr
    assert warned == (placeholders > 0), planned.stderr
    assert (placeholders > 0) == (EXPECTED[name] is None)
    # init says what to run next, committing the file it wrote first
    assert f"git -C {root} add orchestrator.toml && git -C {root} commit" in result.output
    assert f"orchestrator build --config {path}" in result.output


@pytest.mark.usefixtures("docker_down")
def test_the_readme_file_the_tree_lacks_is_swapped_and_said_so(tmp_path: Path) -> None:
    root = _copy("init-download", tmp_path)
    runner.invoke(app, ["init", str(root)])
    text = (root / "orchestrator.toml").read_text()
    assert (
        "# worldcitiespop.csv is not in the tree; README.md fetches it from "
        "https://example.org/data/worldcitiespop.csv.gz: tests/data/cities.csv instead"
    ) in text
    assert '["--version"]: prints help or the version only' in text
    assert '["sample", "--random", "10", "worldcitiespop.csv"]: \'random\'' in text
    assert '["count", "/dev/stdin"]: reads its input from another command' in text


@pytest.mark.usefixtures("docker_down")
def test_a_readme_without_a_runnable_example_leaves_a_placeholder_release_refuses(
    tmp_path: Path,
) -> None:
    root = _copy("init-no-example", tmp_path)
    result = runner.invoke(app, ["init", str(root)])
    assert "first: edit" in result.output and "PLACEHOLDER" in result.output
    path = root / "orchestrator.toml"
    text = path.read_text()
    assert '["-e", "zip", "-x", "unzip"]: looks for .zip files and the tree has none' in text
    assert '["--changed-within", "1d", "--exec", "sleep", "0.3"]: runs another program' in text
    assert '[".", "~/Downloads"]: needs a shell' in text
    refused = runner.invoke(app, ["release", "--config", str(path)])
    assert refused.exit_code == 10, refused.output
    assert "cannot release: train.workloads[0] is a placeholder" in refused.output
    assert "Edit the runs in orchestrator.toml" in refused.output
    assert "Traceback" not in refused.output
    planned = runner.invoke(app, ["release", "--dry-run", "--config", str(path)])
    assert "a release would fail: train.workloads[0] is a placeholder" in planned.output
    assert "a release would fail: validate.command is a placeholder" in planned.output


CONFIG = """[package]
crate = "crate"
[train]
workloads = [
  ["count", "data/corpus.csv"],
  ["count", "/build/inputs/extra.csv"],
  ["count", "../inputs/extra.csv", "/dev/null"],
]
{inputs}
[bench]
command = ["count", "--in=data/corpus.csv"]
"""


@pytest.mark.usefixtures("docker_down")
def test_a_run_naming_a_missing_file_is_warned_about_and_refused(project: Path) -> None:
    path = project / "orchestrator.toml"
    path.write_text(CONFIG.format(inputs=""))
    planned = runner.invoke(app, ["build", "--dry-run", "--config", str(path)])
    assert planned.exit_code == 0, planned.output
    assert "train.workloads[0] (count data/corpus.csv) names data/corpus.csv" in planned.stderr
    assert "train.workloads[1] (count /build/inputs/extra.csv) names" in planned.stderr
    assert "bench.command (count --in=data/corpus.csv) names data/corpus.csv" in planned.stderr
    refused = runner.invoke(app, ["release", "--config", str(path)])
    assert refused.exit_code == 10, refused.output
    assert "names data/corpus.csv, which is neither in" in refused.output
    assert "train.workloads[2] (count ../inputs/extra.csv /dev/null) names" in planned.stderr
    assert "names /dev/null" not in planned.stderr  # the container's own files
    assert "(and 3 more)" in refused.output
    # the files provided, in the crate and as a [train] input: nothing to say
    (project / "crate" / "data").mkdir()
    (project / "crate" / "data" / "corpus.csv").write_text("a,b\n1,2\n")
    (project / "extra.csv").write_text("x\n")
    path.write_text(CONFIG.format(inputs='inputs = ["extra.csv"]'))
    clean = runner.invoke(app, ["build", "--dry-run", "--config", str(path)])
    assert clean.exit_code == 0, clean.output
    assert "names" not in clean.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("data/corpus.txt", True),
        ("cities.csv", True),
        ("./input", True),
        ("model.gguf", True),
        ("--in=x.csv", False),  # an option: path_arguments takes its value
        ("hello", False),
        ("a.*b", False),  # a regex
        ("https://example.org/x.csv", False),
        ("1.5", False),
        ("x86-64-v3", False),
    ],
)
def test_what_counts_as_a_file(text: str, expected: bool) -> None:
    assert looks_like_path(text) is expected


def test_path_arguments_take_option_values() -> None:
    assert list(path_arguments(["-i", "--in=a/b.txt", "c.csv", "--n=3"])) == ["a/b.txt", "c.csv"]


def test_clap_derive_commands_are_read_from_the_source() -> None:
    source = FIXTURES / "init-subcommands" / "src"
    commands = {c.words: c for c in read_commands(sorted(source.glob("*.rs")), source / "main.rs")}
    assert set(commands) == {
        ("word-count",),
        ("grep",),
        ("stats",),
        ("shuffle",),
        ("serve",),
        ("debug",),
    }
    assert commands[("debug",)].hidden
    grep = commands[("grep",)]
    assert [(a.name, a.required) for a in grep.positionals] == [
        ("pattern", True),
        ("files", False),
    ]
    stats = commands[("stats",)]  # a variant holding an Args struct of another module
    assert [a.name for a in stats.positionals] == ["file"] and stats.positionals[0].is_path
    assert [a.name for a in commands[("serve",)].arguments] == ["verbose", "port"]
    assert not commands[("serve",)].positionals  # --port: an option with a default


def test_nested_subcommands_and_flattened_args(tmp_path: Path) -> None:
    main = tmp_path / "main.rs"
    main.write_text(
        """
fn quote() -> char { '"' } // a char literal and a comment: "not a string
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Option<Top>,
}
#[derive(clap::Args)]
struct Global { #[arg(long)] quiet: bool }
#[derive(Subcommand)]
enum Top {
    #[command(subcommand)]
    Remote(RemoteCmd),
    #[command(name = "ls")]
    List { dir: std::path::PathBuf },
}
#[derive(Subcommand)]
enum RemoteCmd { Add { name: String, url: String }, Show }
"""
    )
    commands = read_commands([main], main)
    assert [c.words for c in commands] == [(), ("remote", "add"), ("remote", "show"), ("ls",)]
    assert all(c.arguments[0].name == "quiet" for c in commands)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("$ tool --version", "prints help or the version only"),
        ("$ tool --help", "prints help or the version only"),
        ("$ tool --quiet", "options only"),
        ("$ tool sleep 0.3", "'sleep'"),
        ("$ tool --warmup 3 'sleep 0.3'", "'sleep'"),  # a benchmarking tool's example
        ("$ tool --date now data.txt", "'date'"),
        ("$ tool fetch https://example.org/x", "reaches the network"),
        ("$ tool count $HOME/x.txt", "needs a shell"),
        ("$ tool count src/*.txt", "glob"),
        ("$ tool serve --port 80", "waits"),
        ("$ tool count data.txt -o out.txt", "writes out.txt"),
        ("$ tool count < data.txt", "reads stdin from data.txt"),
        ("$ cat data.txt | tool count", "reads its input from another command"),
        ("$ tool count missing.csv", "missing.csv is not in the tree"),  # no .csv to swap in
    ],
)
def test_example_runs_that_cannot_be_workloads_are_left_out_with_the_reason(
    tmp_path: Path, line: str, reason: str
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "data.txt").write_text("some words\n")
    (tmp_path / "README.md").write_text(f"```console\n{line}\n```\n")
    proposal = find_workloads(tmp_path, tmp_path, "tool")
    assert proposal.workloads == ()
    assert [r.reason for r in proposal.rejected if reason in r.reason], proposal.rejected


def test_a_downloaded_model_the_tree_lacks_is_not_proposed(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "README.md").write_text(
        "```sh\nwget https://example.org/models/mistral.bin\n"
        "tool generate --model mistral.bin --prompt hello\n```\n"
    )
    proposal = find_workloads(tmp_path, tmp_path, "tool")
    assert proposal.workloads == ()
    assert [r.reason for r in proposal.rejected] == [
        "mistral.bin is not in the tree; README.md fetches it from "
        "https://example.org/models/mistral.bin"
    ]


def test_example_runs_that_work_are_kept(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "data.txt").write_text("some words\n")
    (tmp_path / "README.md").write_text(
        "```sh\n"
        "cargo run --release -- count data.txt\n"
        "./target/release/tool grep --ignore-case word data.txt | head\n"
        "RUST_LOG=info tool count --in=data.txt > counts.txt 2>&1\n"
        "hyperfine 'tool count data.txt'\n"
        "cargo run --bin other -- count data.txt\n"
        "```\n"
    )
    proposal = find_workloads(tmp_path, tmp_path, "tool")
    assert [c.args for c in proposal.workloads] == [
        ("count", "data.txt"),
        ("grep", "--ignore-case", "word", "data.txt"),
        ("count", "--in=data.txt"),
    ]
    assert all(c.source == "README.md" for c in proposal.workloads)


def test_a_slash_pattern_is_a_path_only_under_a_folder_of_the_crate() -> None:
    crate = FIXTURES / "init-download"
    args = ["foo/bar", "tests/nope", "tests/data/cities.csv", "x/y.csv", "w.csv", "tests"]
    assert missing_files(args, crate) == ["tests/nope", "x/y.csv", "w.csv"]


def test_a_search_tools_examples_in_prose_tables_and_guides_become_workloads(
    tmp_path: Path,
) -> None:
    """ripgrep's shape: the README shows its runs only as inline code (a table, prose, a
    span broken over two lines), the guide beside it in code blocks; a search without a
    path searches the crate's tree, and a bare -i (ignore case) is no hazard."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.rs").write_text("fn main() {}\n")
    (tmp_path / "README.md").write_text(
        "search recursively searches the current directory for a regex.\n\n"
        "| Tool | Command | Time |\n| --- | --- | --- |\n"
        "| search | `search -n -w '[A-Z]+_SUSPEND'` | 0.08s |\n"
        "| grep | `grep -r -n -w '[A-Z]+_SUSPEND'` | 0.67s |\n\n"
        "Disable filtering with `search -uuu`. For example, `search -tpy foo` limits\n"
        "the search to Python files and `search -Tjs\n  foo` excludes JavaScript.\n"
    )
    (tmp_path / "GUIDE.md").write_text(
        "```\n$ search fast README.md\n75: faster than both\n```\n\n"
        "```\n$ search -i 'fn main'\nsrc/main.rs\n1:fn main() {}\n```\n"
    )
    (tmp_path / "CHANGELOG.md").write_text("```\n$ search old-flag README.md\n```\n")
    proposal = find_workloads(tmp_path, tmp_path, "search")
    runs = [c.args for c in proposal.workloads]
    assert runs == [("fast", "README.md"), ("-n", "-w", "[A-Z]+_SUSPEND"), ("-tpy", "foo")]
    found = {c.args: c.source for c in proposal.workloads}
    assert found[("fast", "README.md")] == "GUIDE.md"
    scanned = [c.args for c in proposal.workloads] + [r.candidate.args for r in proposal.rejected]
    assert ("-uuu",) in scanned  # rejected: options only
    assert ("old-flag", "README.md") not in scanned  # a changelog is no guide
    more = find_workloads(tmp_path, tmp_path, "search")
    assert more == proposal


def test_interactive_gpu_and_sampling_examples_are_rejected_with_the_reason(
    tmp_path: Path,
) -> None:
    """An inference engine's README (issue 42, point 8): --chat, a cuda backend for the
    cpu flavor and sampling without a seed are left out, a greedy run is kept."""
    (tmp_path / "src").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.bin").write_bytes(b"\0" * 64)
    (tmp_path / "src" / "main.rs").write_text(
        "#[derive(Parser)]\nstruct Cli {\n    /// Read prompts from stdin.\n"
        "    #[arg(short, long)]\n    interactive: bool,\n"
        "    #[arg(long)]\n    temperature: Option<f32>,\n}\n"
    )
    (tmp_path / "README.md").write_text(
        "```sh\n"
        "llm --chat --model models/tiny.bin\n"
        "llm -i --model models/tiny.bin\n"
        "llm generate --model models/tiny.bin --backend cuda --temperature 0\n"
        "llm generate --model models/tiny.bin --prompt hello\n"
        "llm generate --model models/tiny.bin --prompt hello --temperature 0\n"
        "```\n"
    )
    proposal = find_workloads(tmp_path, tmp_path, "llm")
    assert [c.args for c in proposal.workloads] == [
        ("generate", "--model", "models/tiny.bin", "--prompt", "hello", "--temperature", "0")
    ]
    reasons = [r.reason for r in proposal.rejected]
    assert reasons[0].startswith("--chat starts an interactive session")
    assert reasons[1].startswith("-i reads stdin (its help: 'Read prompts from stdin.")
    assert reasons[2] == "--backend cuda needs a GPU, and the cpu flavor's runs have none"
    assert reasons[3].startswith("sampling without a seed or --temperature 0")
    assert len(reasons) == 4
    cuda = find_workloads(tmp_path, tmp_path, "llm", flavor="cuda")
    backend = ("--backend", "cuda", "--temperature", "0")
    assert ("generate", "--model", "models/tiny.bin", *backend) in [c.args for c in cuda.workloads]
