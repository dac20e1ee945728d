"""Copy the web UI's third-party JavaScript from npm into http/static/vendor/ (committed).

    python scripts/vendor_js.py           # fetch with `npm pack`, check integrity, copy, write manifest
    python scripts/vendor_js.py --check   # offline: the vendored files equal the manifest and the pins

Each package is pinned by exact version and by the sha512 integrity of its npm tarball; only
the files the page loads are copied, with the package's licence. manifest.json records the
pins and the sha256 of every copied file; tests/test_ui_vendor.py runs the --check logic, so a
hand-edited or stale vendored file fails the suite. There is no build step at install time.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "http" / "static" / "vendor"
MANIFEST = VENDOR / "manifest.json"

KATEX_FONTS = [
    "AMS-Regular", "Caligraphic-Bold", "Caligraphic-Regular", "Fraktur-Bold", "Fraktur-Regular",
    "Main-Bold", "Main-BoldItalic", "Main-Italic", "Main-Regular", "Math-BoldItalic", "Math-Italic",
    "SansSerif-Bold", "SansSerif-Italic", "SansSerif-Regular", "Script-Regular", "Size1-Regular",
    "Size2-Regular", "Size3-Regular", "Size4-Regular", "Typewriter-Regular",
]


@dataclass(frozen=True)
class Pin:
    """One npm package: exact version, tarball integrity, files copied (package path -> vendor path)."""

    name: str
    version: str
    integrity: str
    files: dict[str, str] = field(default_factory=dict)


PINS: list[Pin] = [
    Pin("marked", "18.2.1",
        "sha512-ii4bxCTCqqwpT86XZWgJNs+ZnAIZksmLGYMViWA7PDIXYIeNo1x6cDdX3JOip9NM/cI6p8z57FxliACboTruMA==",
        {"lib/marked.umd.js": "marked/marked.umd.js", "LICENSE": "marked/LICENSE"}),
    Pin("dompurify", "3.4.18",
        "sha512-ofe3wI/uNm68HInABYFJYqQxRw1EaKAjNdrFVKqjUY+UZurvNd2L/HuQe097s/4RivWiZyP6tT7aoT8atjfhwg==",
        {"dist/purify.min.js": "dompurify/purify.min.js", "LICENSE": "dompurify/LICENSE"}),
    Pin("@highlightjs/cdn-assets", "11.12.0",
        "sha512-KvOKXODaiFmId9xaq3xc5xCL66wVLUuOngDbO9B/kewbFTqdGbn2nJxNhN3H5R1cgDTVj6R8vH0zgiNDEGjpDw==",
        {"highlight.min.js": "highlight/highlight.min.js", "styles/github.min.css": "highlight/github.min.css",
         "styles/github-dark.min.css": "highlight/github-dark.min.css", "LICENSE": "highlight/LICENSE"}),
    Pin("katex", "0.19.1",
        "sha512-jG8uKntjSEcm2EpQOh0XturpPuuC9r3Sq5HLHdsFdWZT27E672SF19QEi+of0/YeOy15lDgRhKvr5614uRrEfA==",
        {"dist/katex.min.js": "katex/katex.min.js", "dist/katex.min.css": "katex/katex.min.css",
         "LICENSE": "katex/LICENSE",
         **{f"dist/fonts/KaTeX_{f}.woff2": f"katex/fonts/KaTeX_{f}.woff2" for f in KATEX_FONTS}}),
    # PDF attachments: text extraction in the browser (the worker does the parsing)
    Pin("pdfjs-dist", "6.5.438",
        "sha512-vg8Pw1x+AFKy4AMDvhuWl5cOYV8d698UoEANoFFhc79hqXDnZQqnOXoxw3HG907WHOg1JYOvLhP756boddFxpA==",
        {"build/pdf.min.mjs": "pdfjs/pdf.min.mjs", "build/pdf.worker.min.mjs": "pdfjs/pdf.worker.min.mjs",
         "LICENSE": "pdfjs/LICENSE"}),
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expected_manifest_pins() -> dict[str, dict[str, object]]:
    return {p.name: {"version": p.version, "integrity": p.integrity, "files": sorted(p.files.values())} for p in PINS}


def check(vendor: Path = VENDOR) -> list[str]:
    """Problems with the vendored tree (empty when it is what this script produces)."""
    problems: list[str] = []
    manifest_path = vendor / "manifest.json"
    if not manifest_path.is_file():
        return [f"{manifest_path} is missing: run python scripts/vendor_js.py"]
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("packages") != expected_manifest_pins():
        problems.append("manifest.json pins differ from scripts/vendor_js.py PINS: re-run the script")
    recorded: dict[str, str] = manifest.get("sha256", {})
    wanted = {dest for p in PINS for dest in p.files.values()}
    if set(recorded) != wanted:
        problems.append(f"manifest.json lists other files than PINS: {sorted(set(recorded) ^ wanted)}")
    present = {f.relative_to(vendor).as_posix() for f in vendor.rglob("*") if f.is_file()} - {"manifest.json"}
    for extra in sorted(present - wanted):
        problems.append(f"{extra}: not produced by scripts/vendor_js.py")
    for rel, digest in sorted(recorded.items()):
        f = vendor / rel
        if not f.is_file():
            problems.append(f"{rel}: missing")
        elif sha256(f) != digest:
            problems.append(f"{rel}: sha256 differs from manifest.json (edited by hand?)")
    return problems


def _integrity(tgz: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(tgz.read_bytes()).digest()).decode()


def fetch(pin: Pin, work: Path) -> Path:
    """`npm pack NAME@VERSION` into `work`; the tarball, its integrity checked against the pin."""
    out = subprocess.run(
        ["npm", "pack", "--silent", "--json", f"{pin.name}@{pin.version}"],
        cwd=work, check=True, capture_output=True, text=True,
    ).stdout
    tgz = work / json.loads(out)[0]["filename"]
    got = _integrity(tgz)
    if got != pin.integrity:
        raise SystemExit(f"{pin.name}@{pin.version}: integrity {got} != pinned {pin.integrity}")
    return tgz


def vendor_all(vendor: Path = VENDOR) -> None:
    if vendor.exists():
        shutil.rmtree(vendor)
    vendor.mkdir(parents=True)
    digests: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for pin in PINS:
            tgz = fetch(pin, work)
            with tarfile.open(tgz) as tar:
                for src, dest in pin.files.items():
                    member = tar.extractfile(f"package/{src}")
                    if member is None:
                        raise SystemExit(f"{pin.name}: {src} is not a file in the tarball")
                    target = vendor / dest
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(member.read())
                    digests[dest] = sha256(target)
    manifest = {"packages": expected_manifest_pins(), "sha256": dict(sorted(digests.items()))}
    (vendor / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="verify the vendored files offline")
    args = ap.parse_args()
    if not args.check:
        vendor_all()
    problems = check()
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
