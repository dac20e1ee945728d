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
TRIM_MAX free at its top stay there. `trim` gives the free memory back (malloc_trim) after a
large batch, so that between requests the process holds no more than before. Without glibc's
mallopt (another C library) both do nothing. Results never depend on either.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

MMAP_MAX = 32 << 20  # glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit)
TRIM_MAX = 64 << 20  # the trim threshold glibc's own adjustment reaches with it (2 x)
_M_TRIM_THRESHOLD = -1  # malloc.h
_M_MMAP_THRESHOLD = -3
# Batches of at least this many tokens trim the heap when they end: their arrays are the large
# ones; a decode step's (one token, or one per parallel sequence) are small and trimming after
# each would fault its pages in at every step.
TRIM_TOKENS = 64

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
        if not (hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim")):
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


def trim(n_tokens: int) -> None:
    """After a batch of n_tokens: give the heap's free memory back when the batch was large."""
    if n_tokens >= TRIM_TOKENS and _kept:
        lib = _glibc()
        if lib is not None:
            lib.malloc_trim(0)
