"""Giving freed heap memory back to the system: glibc keeps the pages of freed blocks (in each
thread's arena) until told otherwise. Called after a model loads (its building leaves ~10 MiB
of freed pages behind: the GGUF header's parse, the packing of the weights), when the engine
has no task left, and after the model is released on idle (http/sleep.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable


def return_freed_memory() -> None:
    """Collect garbage, then `trim`."""
    gc.collect()
    trim()


def trim() -> None:
    """malloc_trim(0) where the C library has it (glibc): the free pages of every arena go back
    (about a millisecond; the engine calls it when its last task ends, as a request leaves
    ~15 MiB of freed temporaries behind: logits, sampling candidates)."""
    if _TRIM is not None:
        _TRIM(0)


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


_TRIM = _malloc_trim()
