"""The import rules of docs/architecture.md ("The packages and their imports"), read off every
import statement of core/ and http/: nothing below imports what stands above it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_MODEL_ROOMS = ("kernels", "weights", "state", "families")
# What each layer may import besides itself (its own layer is always allowed).
_KERNELS = {"core.errors", "core.string_array"}
_WEIGHTS = _KERNELS | {"core.model.kernels"}
_STATE = _WEIGHTS | {"core.model.weights"}
_PRECISION = _STATE | {"core.model.state"}
_FAMILIES = _PRECISION | {"core.model.precision"}
_MODEL_TOP = _FAMILIES | {"core.model.families", "core.text"}
_MODEL = _MODEL_TOP | {"core.model"}
ALLOWED: dict[str, set[str]] = {
    "core.errors": set(),
    "core.string_array": set(),
    "core.model.kernels": _KERNELS,
    "core.model.weights": _WEIGHTS,
    "core.model.state": _STATE,
    "core.model.precision": _PRECISION,
    "core.model.families": _FAMILIES,
    "core.model": _MODEL_TOP,
    "core.text": {"core.errors", "core.string_array"},
    "core.sampling": {"core.errors"},
    "core.quantize": {"core.errors", "core.model.kernels", "core.model.weights"},
    "core.quality": _MODEL | {"core.quantize"},
    "core.speculative": _MODEL | {"core.sampling"},
    "core.multimodal": _MODEL,  # projectors, media preprocessing, the encoders (tools/mtmd)
    "core.runtime": _MODEL | {"core.sampling", "core.speculative", "core.multimodal"},
    "core.tools": {"core.errors"},  # the agent's tools: files, shell, MCP; no engine
}
# The HTTP adapter may import the whole engine, never the CLI.
ALLOWED["http"] = set(ALLOWED) | {"core"}


def layer(module: str) -> str:
    """The layer of a dotted module name under llamacli (e.g. core.model.families.base)."""
    parts = module.split(".")
    if parts[0] != "core":
        return parts[0]
    if len(parts) == 1:
        return "core"
    if parts[1] == "model" and len(parts) > 2:
        if parts[2] in _MODEL_ROOMS:
            return f"core.model.{parts[2]}"
        if parts[2] == "precision":
            return "core.model.precision"
    return f"core.{parts[1]}"


def _imports(path: Path, module: str) -> list[str]:
    """Every llamacli module `path` imports (a `from X import name` counts X.name when that is
    a module), as dotted names without the `llamacli.` prefix."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y (module names end in __init__ for packages)
                pkg = module.split(".")[: -node.level]
                base = ".".join(["llamacli", *pkg] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}")]
        else:
            continue
        out += [n.removeprefix("llamacli.") for n in names if n.startswith("llamacli.")]
    return out


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    base = ROOT / rel
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _modules(top: str) -> list[tuple[Path, str]]:
    return [(p, ".".join(p.relative_to(ROOT).with_suffix("").parts)) for p in sorted((ROOT / top).rglob("*.py"))]


def _violations(top: str) -> list[str]:
    bad = []
    for path, module in _modules(top):
        here = layer(module)
        for imported in _imports(path, module):
            there = layer(imported)
            if there != here and there not in ALLOWED[here]:
                bad.append(f"{path.relative_to(ROOT)}: {here} imports {imported}")
    return bad


def test_layer_of_a_module() -> None:
    assert layer("core.model.families.base") == "core.model.families"
    assert layer("core.model.precision") == "core.model.precision"
    assert layer("core.model.loaded") == "core.model"
    assert layer("core.text.tokenizer.bpe") == "core.text"
    assert layer("http.routes_oai") == "http"


def test_a_violation_is_seen(tmp_path: Path) -> None:
    """The reader sees an upward import, in both import forms."""
    f = tmp_path / "x.py"
    f.write_text("from llamacli.core.runtime.engine import Engine\nfrom llamacli.core.model import load\n")
    found = _imports(f, "core.model.kernels.x")
    assert "core.runtime.engine" in found and "core.model.load" in found


def test_core_imports_run_down() -> None:
    assert _violations("core") == []


def test_http_never_imports_the_cli() -> None:
    assert _violations("http") == []
