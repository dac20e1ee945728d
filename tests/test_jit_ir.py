"""core/model/kernels/jit_ir.py: a function numba loads from its disk cache does not keep its
parsed LLVM IR, and a later compilation that calls it still links it (the IR parsed again)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

KERNEL = """
import numba
import numpy as np

@numba.njit(cache=True)
def twice(x):
    return x * 2.0
"""

RUN = """
import sys
sys.path.insert(0, sys.argv[1])
from llamacli.core.model.kernels import jit_ir  # noqa: F401
import numba
import kernel

assert kernel.twice(1.5) == 3.0
library = next(iter(kernel.twice.overloads.values())).library
loaded = not kernel.twice.stats.cache_misses
print("loaded" if loaded else "compiled", library._shared_module is None)

@numba.njit
def caller(x):  # compiled now: links twice's library
    return kernel.twice(x) + 1.0

assert caller(2.0) == 5.0
print("linked")
"""


def test_cached_functions_drop_their_ir_and_still_link(tmp_path: Path) -> None:
    (tmp_path / "kernel.py").write_text(KERNEL)
    env_dir = tmp_path / "numba-cache"
    outs = []
    for _ in range(2):  # compiled and cached, then loaded from the cache
        r = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], capture_output=True, text=True,
                           env={**os.environ, "NUMBA_CACHE_DIR": str(env_dir)}, cwd=Path(__file__).resolve().parents[1])
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.split())
    assert outs[0] == ["compiled", "False", "linked"]
    assert outs[1] == ["loaded", "True", "linked"]



RELEASE = """
import numba
import numpy as np
from llamacli.core.model.kernels.jit_ir import release_llvm_pages


def llvm_pages():  # mapped pages of libllvmlite's code and read-only data
    out = 0
    with open("/proc/self/maps") as f:
        spans = [l.split() for l in f if "libllvmlite" in l]
    with open("/proc/self/pagemap", "rb") as pm:
        for s in spans:
            if s[1] not in ("r-xp", "r--p"):
                continue
            a, b = (int(x, 16) // 4096 for x in s[0].split("-"))
            pm.seek(a * 8)
            out += int(np.count_nonzero(np.frombuffer(pm.read((b - a) * 8), np.uint64) >> np.uint64(63)))
    return out


@numba.njit
def add(x):
    return x + 1

assert add(1) == 2
before = llvm_pages()
assert release_llvm_pages() >= 1
after = llvm_pages()

@numba.njit
def mul(x):  # a compilation after the release: LLVM's pages come back as it runs
    return x * 3

assert mul(2) == 6
print(before, after)
"""


def test_llvm_pages_leave_and_come_back(tmp_path: Path) -> None:
    if not Path("/proc/self/pagemap").exists():
        return
    r = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
                       env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    before, after = (int(x) for x in r.stdout.split())
    assert before > 5000 and after < before // 20, (before, after)  # 4 KiB pages: > 20 MiB before
