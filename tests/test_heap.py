"""core/model/kernels/heap.py: freed arrays stay in malloc's heap for the next layer. Each check
runs in a fresh process (the thresholds are process-wide); glibc's mallinfo2 reads the heap's
size."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="glibc's mallinfo2 reads the heap",
)

# A layer's worth of arrays, allocated, touched and freed three times (as three layers do);
# then the heap's size (mallinfo2's `arena`: bytes obtained with brk).
_CHILD = """
import ctypes, sys
import numpy as np
from llamacli.core.model.kernels import heap

class Info(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
kept = heap.keep_freed() if sys.argv[1] == "keep" else False
for _ in range(3):
    arrays = [np.ones(2 << 20, dtype=np.float32) for _ in range(6)]  # 6 x 8 MB
    del arrays
print(int(kept), libc.mallinfo2().arena >> 20)
"""


def _run(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return bool(int(out[0])), int(out[1])


def test_freed_arrays_stay_in_the_heap() -> None:
    kept, heap_mb = _run("keep")
    assert kept
    assert heap_mb >= 48  # the six arrays' memory stayed: the next layer's arrays reuse it


def test_without_it_malloc_gives_freed_memory_back_at_every_layer() -> None:
    """glibc's own thresholds: what `keep_freed` changes (the next layer faults its pages in)."""
    kept, heap_mb = _run("default")
    assert not kept and heap_mb < 48
