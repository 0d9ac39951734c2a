"""The settings table of docs/configuration.md (the configuration reference) is the one made
from config/declarations/settings.py, not a copy."""

from __future__ import annotations

from orchestrator.config.declarations.flags import settings_table_markdown
from orchestrator.config.resources import repository_root

START = "<!-- settings table: generated from orchestrator/config/declarations/settings.py -->\n"
END = "\n<!-- end of settings table -->"


def test_docs_settings_table_is_generated_from_the_declarations() -> None:
    root = repository_root()
    assert root is not None
    text = (root / "docs" / "configuration.md").read_text()
    table = text[text.index(START) + len(START) : text.index(END)]
    # On a failure, paste `settings_table_markdown()`'s output between the markers.
    assert table == settings_table_markdown().rstrip()
