"""Float32 matmuls for the forward pass: fast by default, batch-invariant on request.

Fast mode: NumPy's BLAS as it is (multi-threaded sgemm/sgemv).

Batch-invariant mode (`--batch-invariant`):

A token's result must not depend on which other tokens share its batch: this model family
amplifies a last-bit difference in one layer into a different greedy token a few layers
later, so "eight concurrent requests give the same text as each alone" needs every row of
`x @ w` to be computed the same way whatever the number of rows. Multi-threaded BLAS is not
like that (how it splits work and handles the last, partial row tile depends on the shape),
so we:
  - run BLAS single-threaded (threadpoolctl) and parallelise ourselves over column blocks of
    the weight, one block per thread (NumPy releases the GIL inside matmul);
  - pad the rows up to a multiple of the BLAS kernel's row tile, so every row sits in a full
    tile; the tile is found once per process by a short probe (24 for OpenBLAS's
    Haswell/SkylakeX sgemm kernels).
The vocabulary projection only feeds sampling, so it is parallel but not padded.
The price is decode speed: a one-token step computes a full row tile (docs/benchmarks.md).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

_CANDIDATE_TILES = (24, 16, 32, 48, 8, 64)


@lru_cache(maxsize=1)
def _limit_blas() -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


@lru_cache(maxsize=1)
def row_tile() -> int:
    """The smallest row tile under which single-threaded sgemm rows are shape-invariant."""
    _limit_blas()
    rng = np.random.default_rng(7)
    for tile in _CANDIDATE_TILES:
        ok = True
        for k, n in ((640, 200), (1100, 72)):
            w = rng.standard_normal((k, n)).astype(np.float32)
            x = rng.standard_normal((tile * 6, k)).astype(np.float32)
            ref = x @ w
            for m in range(tile, tile * 6 + 1, tile):
                y = x[:m] @ w
                if not np.array_equal(y, ref[:m]):
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return tile
    return _CANDIDATE_TILES[-1]


class MatmulPool:
    """Runs `x @ w`: with BLAS's own threads (fast), or batch-invariantly over column blocks
    of w on our own threads."""

    def __init__(self, threads: int | None = None, batch_invariant: bool = False) -> None:
        self.batch_invariant = batch_invariant
        self.threads = max(1, threads if threads else min(os.cpu_count() or 1, 8))
        self.tile = 1
        self._pool: ThreadPoolExecutor | None = None
        if batch_invariant:
            _limit_blas()
            self.tile = row_tile()
            if self.threads > 1:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="llama-mm")

    def _split(self, n: int) -> list[tuple[int, int]]:
        k = self.threads if n >= 64 * self.threads else 1
        step = -(-n // k)
        return [(a, min(n, a + step)) for a in range(0, n, step)]

    def _run(self, parts: list[tuple[int, int]], fn) -> None:  # type: ignore[no-untyped-def]
        if self._pool is None or len(parts) == 1:
            for a, b in parts:
                fn(a, b)
            return
        futs = [self._pool.submit(fn, a, b) for a, b in parts[1:]]
        fn(*parts[0])
        for f in futs:
            f.result()

    def linear(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        """x (T, K) @ w (K, N) -> (T, N); batch-invariant: every row computed as it would be alone."""
        if not self.batch_invariant:
            return x @ w
        t = x.shape[0]
        tp = -(-t // self.tile) * self.tile
        if tp != t:
            xp = np.zeros((tp, x.shape[1]), dtype=np.float32)
            xp[:t] = x
        else:
            xp = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty((tp, w.shape[1]), dtype=np.float32)

        def part(a: int, b: int) -> None:
            out[:, a:b] = xp @ w[:, a:b]

        self._run(self._split(w.shape[1]), part)
        return out[:t]

    def project(self, x: np.ndarray, w_rows: np.ndarray, block: int = 2048) -> np.ndarray:
        """x (T, K) @ w_rows.T where w_rows is (N, K) row-major (the vocabulary matrix)."""
        n = w_rows.shape[0]
        few = x.shape[0] < 4
        if few and not self.batch_invariant:
            return x @ w_rows.T
        out = np.empty((x.shape[0], n), dtype=np.float32)

        def part(a: int, b: int) -> None:
            if few:  # one streaming pass over the rows
                out[:, a:b] = x @ w_rows[a:b].T
                return
            for i in range(a, b, block):  # blocks stay in cache while every row of x uses them
                j = min(b, i + block)
                out[:, i:j] = x @ w_rows[i:j].T

        self._run(self._split(n), part)
        return out
