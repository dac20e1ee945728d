"""Giving freed heap memory back to the system: glibc keeps the pages of freed blocks (in each
thread's arena) until told otherwise. Called after a model loads (its building leaves ~10 MiB
of freed pages behind: the GGUF header's parse, the packing of the weights) and after the model
is released on idle (http/sleep.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


def return_freed_memory() -> None:
    """Collect garbage, then malloc_trim(0) where the C library has it (glibc)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass
