"""The vendored JavaScript (http/static/vendor) is exactly what scripts/vendor_js.py produces
from the pinned npm packages: same versions, same files, same sha256, licences included."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vendor_js", ROOT / "scripts" / "vendor_js.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["vendor_js"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_vendored_files_match_the_pins() -> None:
    assert _script().check() == []


def test_pins_are_exact_versions_with_licences() -> None:
    vj = _script()
    for pin in vj.PINS:
        assert re.fullmatch(r"\d+\.\d+\.\d+", pin.version), pin
        assert pin.integrity.startswith("sha512-"), pin
        assert any(dest.endswith("LICENSE") for dest in pin.files.values()), f"{pin.name}: no licence copied"


def test_check_notices_an_edited_file(tmp_path: Path) -> None:
    import shutil

    vj = _script()
    copy = tmp_path / "vendor"
    shutil.copytree(vj.VENDOR, copy)
    target = copy / "dompurify" / "purify.min.js"
    target.write_bytes(target.read_bytes() + b"\n// edited")
    (copy / "extra.js").write_text("x")
    problems = vj.check(copy)
    assert any("purify.min.js" in p and "sha256" in p for p in problems)
    assert any("extra.js" in p for p in problems)


def test_page_loads_only_vendored_and_own_files() -> None:
    html = (ROOT / "http" / "static" / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    # the page's files, and the web-app manifest (served at /manifest.webmanifest from http/static)
    assert refs and all(r.startswith("static/") or r == "manifest.webmanifest" for r in refs), refs
    for r in refs:
        assert (ROOT / "http" / (r if r.startswith("static/") else "static/" + r)).is_file(), r


def test_package_data_ships_every_static_file() -> None:
    import glob
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = cfg["tool"]["setuptools"]["package-data"]["llamacli.http"]
    http = ROOT / "http"
    shipped = {p for pat in patterns for p in glob.glob(pat, root_dir=http, recursive=True) if (http / p).is_file()}
    on_disk = {f.relative_to(http).as_posix() for f in (http / "static").rglob("*") if f.is_file()}
    assert on_disk - shipped == set()
