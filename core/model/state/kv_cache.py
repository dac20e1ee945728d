"""Per-sequence KV cache: one row per sequence, one cell per position.

Cell index == token position, so a sequence's cache holds positions 0..n-1 contiguously and
truncating to a prefix (prompt reuse) is just lowering its length.
"""

from __future__ import annotations

import mmap

import numpy as np


def lazy_zeros(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 array of zeros in its own anonymous mapping: its pages are mapped as they are
    written, 4 KiB at a time. (np.zeros advises huge pages for 4 MiB or more: the first cell
    written would bring in 2 MiB of each layer's K and V, 72 MiB for the demo model at -c 8192.)"""
    n = int(np.prod(shape))
    return np.frombuffer(mmap.mmap(-1, max(4 * n, 1)), np.float32, count=n).reshape(shape)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KVCache:
    """k[layer], v[layer]: float32 arrays (n_seq, Hkv, n_ctx, D).

    Their pages are mapped as cells are written (`lazy_zeros`): a large n_ctx costs memory only
    as it fills.
    `lengths[s]` counts the valid cells of sequence s.
    """

    def __init__(self, n_layer: int, n_seq: int, n_ctx: int, n_head_kv: int, head_dim: int, head_dim_v: int) -> None:
        self.n_layer = n_layer
        self.n_seq = n_seq
        self.n_ctx = n_ctx
        self.k = [lazy_zeros((n_seq, n_head_kv, n_ctx, head_dim)) for _ in range(n_layer)]
        self.v = [lazy_zeros((n_seq, n_head_kv, n_ctx, head_dim_v)) for _ in range(n_layer)]
        self.lengths = np.zeros(n_seq, dtype=np.int64)

    def write(self, layer: int, seq_ids: np.ndarray, positions: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store k (T, Hkv, D) and v (T, Hkv, Dv) at (seq_ids[t], positions[t])."""
        self.k[layer][seq_ids, :, positions] = k
        self.v[layer][seq_ids, :, positions] = v

    def commit(self, seq_ids: np.ndarray, positions: np.ndarray) -> None:
        """Record that the batch's cells are now filled (after all layers wrote them)."""
        np.maximum.at(self.lengths, seq_ids, positions + 1)

    def view(self, layer: int, seq_ids: np.ndarray, k_start: int, k_end: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys/values of positions [k_start, k_end) for the given sequences: (S, Hkv, L, D).

        A contiguous run of sequence ids is a view (no copy); otherwise only the window is copied.
        """
        s0 = int(seq_ids[0])
        if seq_ids.shape[0] == 1 or np.array_equal(seq_ids, np.arange(s0, s0 + seq_ids.shape[0])):
            sl = slice(s0, s0 + seq_ids.shape[0])
            return self.k[layer][sl, :, k_start:k_end], self.v[layer][sl, :, k_start:k_end]
        return (
            self.k[layer][:, :, k_start:k_end][seq_ids],
            self.v[layer][:, :, k_start:k_end][seq_ids],
        )

    can_roll_back = True  # truncate() may cut a sequence back to any prefix
    max_checkpoints = 0  # context checkpoints kept per sequence (where a state needs them)

    def reusable(self, seq: int, n: int) -> int:
        """How many of the first n cached cells of a sequence a new prompt may keep (all of
        them here; a recurrent state keeps its whole sequence or nothing: state/recurrent.py)."""
        return n

    def plan_checkpoints(self, seq: int, n_prompt: int, n_reuse: int, n_batch: int) -> None:
        """Where to copy a sequence's state while its prompt is evaluated (a recurrent state's
        context checkpoints: state/recurrent.py); K/V cells need none."""

    def check_batch(self, seq_ids: np.ndarray, positions: np.ndarray) -> None:
        """Raise ValueError where a batch cannot extend this cache (any batch can, here)."""

    def seq_state(self, seq: int) -> dict[str, np.ndarray]:
        """A sequence's state beyond its K/V cells, by name (a recurrent state), for slot files."""
        return {}

    def state_names(self) -> list[str]:
        """The names `seq_state` gives."""
        return []

    def load_seq_state(self, seq: int, arrays: dict[str, np.ndarray]) -> None:
        """Set a sequence's state beyond its K/V cells from `seq_state`'s arrays."""

    def truncate(self, seq_id: int, n: int) -> None:
        """Keep only the first n cells of a sequence (the common prefix of a new prompt)."""
        self.lengths[seq_id] = min(int(self.lengths[seq_id]), max(0, n))

    def clear(self, seq_id: int | None = None) -> None:
        if seq_id is None:
            self.lengths[:] = 0
        else:
            self.lengths[seq_id] = 0

    def copy_seq(self, src: int, dst: int, n: int | None = None) -> None:
        """Copy the first n cells (default all) of sequence src into dst."""
        n = int(self.lengths[src]) if n is None else n
        for layer in range(self.n_layer):
            self.k[layer][dst, :, :n] = self.k[layer][src, :, :n]
            self.v[layer][dst, :, :n] = self.v[layer][src, :, :n]
        self.lengths[dst] = n

    @property
    def nbytes_used(self) -> int:
        per_cell = sum(k.shape[1] * k.shape[3] * 4 for k in self.k) + sum(v.shape[1] * v.shape[3] * 4 for v in self.v)
        return int(self.lengths.sum()) * per_cell
