"""Dev-only: what ggml's argsort (libstdc++'s std::sort with `x[a] > x[b]`) gives for rows with
many equal values, for tests/test_moe.py (the router's top-k order on ties).

    python scripts/argsort_fixture.py        (needs g++; writes tests/fixtures/moe/argsort.npz)

    rows   float32 [n_rows, n]   values drawn from a few levels, so that most rows have ties
    order  int32 [n_rows, n]     std::sort(idx, idx + n, [&](int a, int b){ return x[a] > x[b]; })
One file per row length n in (8, 16, 17, 32, 64, 128, 300): insertion sort only (n <= 16), the
introsort partitions above it, and (300, 3 levels) rows that exhaust the depth limit (heap sort).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "moe" / "argsort.npz"
CPP = r"""
#include <algorithm>
#include <cstdio>
#include <vector>
int main() {
    int rows, n;
    while (std::fread(&rows, 4, 1, stdin) == 1 && std::fread(&n, 4, 1, stdin) == 1) {
        std::vector<float> x(n);
        std::vector<int> idx(n);
        for (int r = 0; r < rows; ++r) {
            if (std::fread(x.data(), 4, n, stdin) != (size_t) n) return 1;
            for (int j = 0; j < n; ++j) idx[j] = j;
            std::sort(idx.begin(), idx.end(), [&](int a, int b) { return x[a] > x[b]; });
            std::fwrite(idx.data(), 4, n, stdout);
        }
    }
    return 0;
}
"""


def main() -> None:
    rng = np.random.default_rng(5)
    arrays: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as td:
        exe = Path(td) / "argsort"
        (Path(td) / "a.cpp").write_text(CPP)
        subprocess.run(["g++", "-O2", "-o", str(exe), str(Path(td) / "a.cpp")], check=True)
        for n, levels in ((8, 4), (16, 5), (17, 5), (32, 8), (64, 10), (128, 12), (128, 128), (300, 3)):
            rows = rng.integers(0, levels, size=(200, n)).astype(np.float32) / levels
            inp = np.array([rows.shape[0], n], dtype=np.int32).tobytes() + rows.tobytes()
            out = subprocess.run([str(exe)], input=inp, capture_output=True, check=True).stdout
            arrays[f"rows_{n}_{levels}"] = rows
            arrays[f"order_{n}_{levels}"] = np.frombuffer(out, dtype=np.int32).reshape(rows.shape)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
