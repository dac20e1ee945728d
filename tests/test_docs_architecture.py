"""docs/architecture.md follows the code: its module table names every module and package of
core/ (so a new or moved one shows up here), and every path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _table_names() -> set[str]:
    section = DOC.split("## Modules of core/", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}


def test_every_core_module_is_in_the_table() -> None:
    names = _table_names()
    on_disk = {p.name for p in (ROOT / "core").glob("*.py") if p.name != "__init__.py"}
    on_disk |= {p.name + "/" for p in (ROOT / "core").iterdir() if (p / "__init__.py").exists() and p.name != "runtime"}
    on_disk |= {f"runtime/{p.name}" for p in (ROOT / "core" / "runtime").glob("*.py") if p.name != "__init__.py"}
    assert on_disk - names == set()


def test_every_path_named_exists() -> None:
    for name in _table_names():
        assert (ROOT / "core" / name).exists(), name
    for path in re.findall(r"`((?:core|http|llamacli)/[\w/]+\.py)", DOC):
        assert (ROOT / path).exists(), path
