"""README.md's exit-code table is the one made from the error classes, not a copy."""

from __future__ import annotations

import re
import subprocess
import sys

from orchestrator.cli.exit_codes import END, START, error_classes, exit_codes_markdown
from orchestrator.config.resources import repository_root
from orchestrator.errors import BuildInterruptedError, ConfigError, OrchestratorError
from orchestrator.host.vault import VaultCorruptError
from orchestrator.model.records import RecordError


def _readme_table() -> str:
    root = repository_root()
    assert root is not None
    text = (root / "README.md").read_text()
    return text[text.index(START) + len(START) : text.index(END)]


def test_readme_exit_code_table_is_generated_from_the_error_classes() -> None:
    assert _readme_table() == exit_codes_markdown().rstrip("\n")


def test_every_error_class_has_a_row_with_its_code_and_summary() -> None:
    table = _readme_table()
    classes = error_classes()
    assert {RecordError, VaultCorruptError, BuildInterruptedError} <= set(classes)
    for cls in classes:
        assert cls.summary, f"{cls.__qualname__} has no summary for README.md"
        assert f"| {cls.exit_code} | `{cls.__name__}` | " in table, cls.__qualname__
    codes = [int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)]
    assert codes == sorted(codes)
    assert {0, 2, 130} <= set(codes)
    assert len(codes) == len(set(codes)) == len(classes) + 2  # 0 and 2 have no class


def test_a_class_or_summary_that_changes_changes_the_table() -> None:
    class HypotheticalError(OrchestratorError):
        exit_code = 199
        summary = "a made-up failure | with a pipe"

    known = [ConfigError, HypotheticalError]
    table = exit_codes_markdown(known)
    assert "| 199 | `HypotheticalError` | a made-up failure \\| with a pipe |" in table
    assert table != exit_codes_markdown([ConfigError])
    assert table.index("| 10 |") < table.index("| 199 |")


def test_the_module_prints_the_block_to_paste_into_the_readme() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.exit_codes"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert printed == START + exit_codes_markdown() + END.lstrip("\n") + "\n"
