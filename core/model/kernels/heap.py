"""The C heap under a forward pass: freed arrays reused by the next layer, not faulted in again.

A batch of many tokens allocates and frees the same few arrays in every layer (activations,
their quantized codes, attention scratch: 1 to 8 MB each for a 512-token prompt of the demo
model). glibc's malloc hands the free memory at the top of its heap back to the kernel past a
threshold that it adjusts itself (twice the largest chunk it had mapped on its own and freed),
and maps larger chunks on their own: the next layer then takes page faults (and the kernel
zeroes each page) for memory it had a moment ago. perf on a 512-token prompt of the demo model
(AMD EPYC, one thread): 13% of the CPU time in the kernel, brk and page faults; with the
thresholds fixed high, 15% less CPU time for the prompt.

`keep_freed` fixes them once per process: chunks up to MMAP_MAX come from the heap, and up to
TRIM_MAX free at its top stay there (the values glibc's own adjustment can reach). The server
gives the free pages back when its engine has no task left (http/heap.py: malloc_trim), so
between requests it holds no more than before. Without glibc's mallopt (another C library)
nothing changes. Results never depend on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

MMAP_MAX = 32 << 20  # glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit)
TRIM_MAX = 64 << 20  # the trim threshold glibc's own adjustment reaches with it (2 x)
_M_TRIM_THRESHOLD = -1  # malloc.h
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
_libc: ctypes.CDLL | None = None
_kept = False


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or None)
        except OSError:
            return None
        if not hasattr(lib, "mallopt"):
            return None
        _libc = lib
    return _libc


def keep_freed() -> bool:
    """Fix malloc's thresholds (once per process; module docstring). Whether they are set."""
    global _kept
    with _lock:
        if not _kept:
            lib = _glibc()
            _kept = lib is not None and bool(lib.mallopt(_M_MMAP_THRESHOLD, MMAP_MAX)) and bool(lib.mallopt(_M_TRIM_THRESHOLD, TRIM_MAX))
        return _kept

