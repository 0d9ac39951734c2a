"""docs/exit-codes.md's exit-code table is the one made from the error classes, not a copy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from orchestrator.cli.exit_codes import (
    END,
    START,
    error_classes,
    exit_codes_markdown,
    write_docs_table,
)
from orchestrator.config.resources import repository_root
from orchestrator.errors import BuildInterruptedError, ConfigError, OrchestratorError
from orchestrator.host.vault import VaultCorruptError
from orchestrator.model.documents.records import RecordError


def _docs_table() -> str:
    root = repository_root()
    assert root is not None
    text = (root / "docs" / "exit-codes.md").read_text()
    return text[text.index(START) + len(START) : text.index(END)]


def test_docs_exit_code_table_is_generated_from_the_error_classes() -> None:
    # On a failure: `python -m orchestrator.cli.exit_codes --write` updates the page.
    assert _docs_table() == exit_codes_markdown().rstrip("\n")


def test_every_error_class_has_a_row_with_its_code_and_summary() -> None:
    table = _docs_table()
    classes = error_classes()
    assert {RecordError, VaultCorruptError, BuildInterruptedError} <= set(classes)
    for cls in classes:
        assert cls.summary, f"{cls.__qualname__} has no summary for docs/exit-codes.md"
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


def test_write_puts_the_table_between_the_markers_and_keeps_the_rest(tmp_path: Path) -> None:
    page = tmp_path / "exit-codes.md"
    page.write_text("# Exit codes\n\n" + START + "| stale |" + END + "\n\nafter\n")
    assert write_docs_table(page)
    text = page.read_text()
    assert (
        text
        == "# Exit codes\n\n" + START + exit_codes_markdown().rstrip("\n") + END + "\n\nafter\n"
    )
    assert not write_docs_table(page)  # already current: nothing written
