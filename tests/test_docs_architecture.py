"""docs/architecture.md follows the code: its module table covers every module of core/ (so a
new or moved one shows up here), and every path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
# Folders whose modules the table names one by one (a row naming the folder alone is a heading).
ROOMS = {"model", "model/weights", "model/kernels", "model/state", "runtime", "text"}


def _table_names() -> set[str]:
    section = DOC.split("## Modules of core/", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}


def _covered(rel: Path, names: set[str]) -> bool:
    """A module is named itself, or inside a named package that is not one of the ROOMS."""
    if rel.as_posix() in names:
        return True
    return any(p.as_posix() + "/" in names and p.as_posix() not in ROOMS for p in rel.parents if p != Path("."))


def test_every_core_module_is_in_the_table() -> None:
    names = _table_names()
    modules = [p.relative_to(ROOT / "core") for p in (ROOT / "core").rglob("*.py") if p.name != "__init__.py"]
    assert modules
    assert [m.as_posix() for m in modules if not _covered(m, names)] == []


def test_every_path_named_exists() -> None:
    for name in _table_names():
        assert (ROOT / "core" / name).exists(), name
    for path in re.findall(r"`((?:core|http|llamacli)/[\w/]+\.py)", DOC):
        assert (ROOT / path).exists(), path
