"""The packaging promises: every package is in the wheel, and http/ never shadows the stdlib."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _packages_on_disk() -> set[str]:
    found = {"llamacli.http"}  # a namespace package on purpose (no __init__.py)
    for top, dotted in (("llamacli", "llamacli"), ("core", "llamacli.core")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([dotted, *rel.parts]) if rel.parts else dotted)
    return found


def test_pyproject_lists_every_package() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(cfg["tool"]["setuptools"]["packages"])
    assert listed == _packages_on_disk()


def test_http_folder_does_not_shadow_stdlib() -> None:
    assert not (ROOT / "http" / "__init__.py").exists()
    out = subprocess.run(
        [sys.executable, "-c", "import http, http.client, llamacli.http.app; print(http.__file__)"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    assert "site-packages" not in out and str(ROOT / "http") not in out


def test_core_and_http_are_links_to_the_top_level_folders() -> None:
    # One file, one module name: the links make llamacli.core/llamacli.http resolve for Python,
    # setuptools and mypy alike (pyproject.toml's layout note).
    for name in ("core", "http"):
        link = ROOT / "llamacli" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve()
