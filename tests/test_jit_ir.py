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

