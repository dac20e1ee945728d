"""The model files opened with `-m` lately, so that `llama list` shows what was run (as ollama's
`list` does), not only what the Hugging Face cache holds.

A small JSON list of absolute paths, newest first, in the user's cache folder
($XDG_CACHE_HOME/llamacli/recent-models.json, default ~/.cache/llamacli/). It is replaced
atomically (a temporary file renamed over it), so a reader never sees half a list; files that
no longer exist are dropped when it is read. Losing it loses nothing but the listing: every
error writing it is ignored.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

MAX_ENTRIES = 20


def list_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llamacli" / "recent-models.json"


def _read() -> list[str]:
    try:
        data = json.loads(list_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [p for p in data if isinstance(p, str)] if isinstance(data, list) else []


def _write(paths: list[str]) -> None:
    target = list_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".recent-models-", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(paths, f, indent=1)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only home only costs the listing


def remember(model: str) -> None:
    """Put the model file `model` first in the list (once)."""
    path = os.path.abspath(model)
    paths = [p for p in _read() if p != path]
    _write([path, *paths][:MAX_ENTRIES])


def recent() -> list[str]:
    """The remembered model files that still exist, newest first."""
    paths = _read()
    present = [p for p in paths if os.path.isfile(p)]
    if present != paths:
        _write(present)
    return present
