"""Write docs/cli.md from the `--help` text of every `llama` command.

tests/test_cli_docs.py checks that the file equals what this script would write now."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llamacli.help_text import render_cli_reference  # noqa: E402

if __name__ == "__main__":
    (ROOT / "docs" / "cli.md").write_text(render_cli_reference())
    print("wrote docs/cli.md")
