"""The README's settings table is the one made from config/settings.py, not a copy."""

from __future__ import annotations

from orchestrator.config.flags import settings_table_markdown
from orchestrator.config.resources import repository_root

START = "<!-- settings table: generated from orchestrator/config/settings.py -->\n"
END = "\n<!-- end of settings table -->"


def test_readme_settings_table_is_generated_from_the_declarations() -> None:
    root = repository_root()
    assert root is not None
    text = (root / "README.md").read_text()
    table = text[text.index(START) + len(START) : text.index(END)]
    assert table == settings_table_markdown().rstrip()
