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
    Haswell/SkylakeX sgemm kernels);
  - place each row at a row index whose "class" does not depend on the batch: the kernel
    sums rows differently by their index within a period (OpenBLAS: index % 12 < 6 or not),
    so a prompt chunk starting at position p goes to an index = p (mod period), and a
    one-token decode row to an index of the class of index 0 (`RowLayout`).
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
def limit_blas() -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


@lru_cache(maxsize=1)
def row_classes() -> tuple[int, tuple[int, ...]]:
    """(period, class of each index in one period): rows whose indices share a class are
    summed identically by the kernel (given full tiles)."""
    tile = row_tile()
    rng = np.random.default_rng(11)
    k, n = 640, 64
    w = rng.standard_normal((k, n)).astype(np.float32)
    v = rng.standard_normal(k).astype(np.float32)
    span = 4 * tile
    x = rng.standard_normal((span, k)).astype(np.float32)
    results = []
    for p in range(span):
        xp = x.copy()
        xp[p] = v
        results.append((xp @ w)[p])
    reps: list[int] = []
    cls: list[int] = []
    for p in range(span):
        for ci, r in enumerate(reps):
            if np.array_equal(results[r], results[p]):
                cls.append(ci)
                break
        else:
            reps.append(p)
            cls.append(len(reps) - 1)
    for period in range(1, span // 2 + 1):
        if all(cls[i] == cls[i % period] for i in range(span)):
            return period, tuple(cls[:period])
    return span, tuple(cls)


class RowLayout:
    """Where each batch row goes in the padded matmul input (batch-invariant mode)."""

    def __init__(self, index: np.ndarray, n_rows: int) -> None:
        self.index = index  # (T,) row index in the padded input
        self.n_rows = n_rows  # padded row count, a multiple of the tile

    @classmethod
    def build(cls, seq_ids: np.ndarray, positions: np.ndarray, decode: np.ndarray | None, tile: int) -> "RowLayout":
        """Runs of consecutive positions of one sequence start at an index = their first
        position (mod period); decode rows fill the indices of class 0."""
        period, classes = row_classes()
        slots0 = [i for i in range(period) if classes[i] == classes[0]]
        t = seq_ids.shape[0]
        index = np.empty(t, dtype=np.int64)
        cursor = 0
        i = 0
        while i < t:
            if decode is not None and decode[i]:
                base, off = divmod(cursor, period)
                nxt = next((s for s in slots0 if s >= off), None)
                if nxt is None:
                    base, nxt = base + 1, slots0[0]
                index[i] = base * period + nxt
                cursor = int(index[i]) + 1
                i += 1
                continue
            j = i + 1
            while j < t and seq_ids[j] == seq_ids[i] and positions[j] == positions[j - 1] + 1 and not (
                decode is not None and decode[j]
            ):
                j += 1
            start = cursor + (int(positions[i]) - cursor) % period
            index[i:j] = np.arange(start, start + (j - i))
            cursor = start + (j - i)
            i = j
        n_rows = -(-max(cursor, 1) // tile) * tile
        return cls(index, n_rows)


@lru_cache(maxsize=1)
def row_tile() -> int:
    """The smallest row tile under which single-threaded sgemm rows are shape-invariant."""
    limit_blas()
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
        self.layout: RowLayout | None = None  # set per batch by the model (invariant mode)
        self._pool: ThreadPoolExecutor | None = None
        if batch_invariant:
            limit_blas()
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
        lay = self.layout
        if lay is None or lay.index.shape[0] != t:
            lay = RowLayout(np.arange(t), -(-t // self.tile) * self.tile)
        xp = np.zeros((lay.n_rows, x.shape[1]), dtype=np.float32)
        xp[lay.index] = x
        out = np.empty((lay.n_rows, w.shape[1]), dtype=np.float32)

        def part(a: int, b: int) -> None:
            out[:, a:b] = xp @ w[:, a:b]

        self._run(self._split(w.shape[1]), part)
        return out[lay.index]

    def project(self, x: np.ndarray, w_rows: np.ndarray, block: int = 2048) -> np.ndarray:
        """x (T, K) @ w_rows.T where w_rows is (N, K) row-major (the vocabulary matrix)."""
        n = w_rows.shape[0]
        few = x.shape[0] < 4
        if few and not self.batch_invariant:
            # OpenBLAS's sgemm with 2-3 rows against the vocabulary matrix runs at half the
            # speed of one sgemv per row (measured: 2 rows 47 ms vs 24 ms on the demo model)
            return np.stack([w_rows @ row for row in x]) if x.shape[0] > 1 else x @ w_rows.T
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
