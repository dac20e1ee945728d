"""docs/cli.md is the `--help` of every command (regenerate: python scripts/gen_cli_docs.py)."""

from __future__ import annotations

from pathlib import Path

from llamacli.help_text import render_cli_reference


def test_cli_reference_equals_help() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    assert doc == render_cli_reference(), "docs/cli.md is stale: run python scripts/gen_cli_docs.py"
