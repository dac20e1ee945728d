"""For the memory tests: how many pages of a range this process has mapped in (Linux
/proc/self/pagemap; a page the process never touched, or handed back, is not mapped), and a
process's resident set."""

from __future__ import annotations

from pathlib import Path

import numpy as np

PAGE = 4096
HAVE_PAGEMAP = Path("/proc/self/pagemap").exists()


def mapped_pages(addr: int, n: int) -> int:
    first, last = addr // PAGE, (addr + n - 1) // PAGE
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        entries = np.frombuffer(f.read((last - first + 1) * 8), np.uint64)
    return int(np.count_nonzero(entries >> np.uint64(63)))


def rss_kb(pid: int) -> int:
    """VmRSS of process `pid`, in kB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")
