"""The memory of a hybrid model (llama.cpp's llama_memory_hybrid): K/V cells for its attention
layers and, per sequence, a fixed-size recurrent state for its recurrent layers (Mamba-2: the
convolution's last inputs and the scan's state; llama_memory_recurrent's r_l and s_l).

A recurrent state summarises every token of its sequence: it cannot be cut back to a shorter
prefix. So, as llama.cpp's memory, a sequence keeps its state when nothing is removed, is
cleared when everything is, and refuses anything between (`truncate` raises; `reusable` says
how much of a cached prefix a new prompt may keep: all of it or nothing). Removing cells from
the middle (the context shift) keeps the recurrent state as it is, as llama_memory_recurrent's
seq_rm and seq_add do for a range that does not hold the sequence's last position.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.model.state.kv_cache import KVCache


class HybridCache(KVCache):
    """KVCache whose recurrent layers hold no K/V cells (zero heads) but conv[il] (n_seq, C,
    W - 1) and ssm[il] (n_seq, H, P, N) float32 states."""

    def __init__(self, n_layer: int, n_seq: int, n_ctx: int, n_head_kv: int, head_dim: int, head_dim_v: int,
                 recurrent: tuple[bool, ...], conv_shape: tuple[int, int], ssm_shape: tuple[int, int, int]) -> None:
        super().__init__(n_layer, n_seq, n_ctx, n_head_kv, head_dim, head_dim_v)
        self.recurrent = recurrent
        self.conv: dict[int, np.ndarray] = {}
        self.ssm: dict[int, np.ndarray] = {}
        for il, r in enumerate(recurrent):
            if r:
                self.k[il] = np.zeros((n_seq, 0, n_ctx, head_dim), dtype=np.float32)
                self.v[il] = np.zeros((n_seq, 0, n_ctx, head_dim_v), dtype=np.float32)
                self.conv[il] = np.zeros((n_seq, *conv_shape), dtype=np.float32)
                self.ssm[il] = np.zeros((n_seq, *ssm_shape), dtype=np.float32)

    can_roll_back = False

    def check_batch(self, seq_ids: np.ndarray, positions: np.ndarray) -> None:
        """ValueError unless each sequence's tokens continue it in order (position = cells so
        far, then one more per token): a recurrent state only moves forward."""
        want = self.lengths[seq_ids].copy()
        order = np.argsort(seq_ids, kind="stable")
        s_sorted = seq_ids[order]
        first = np.r_[True, s_sorted[1:] != s_sorted[:-1]]
        run_start = np.maximum.accumulate(np.where(first, np.arange(s_sorted.shape[0]), 0))
        want[order] += np.arange(s_sorted.shape[0]) - run_start
        if not np.array_equal(want, positions):
            raise ValueError("a recurrent model's batch must continue each sequence in order, from its last position")

    def reusable(self, seq: int, n: int) -> int:
        return n if n == int(self.lengths[seq]) else 0

    def truncate(self, seq_id: int, n: int) -> None:
        if n >= int(self.lengths[seq_id]):
            return
        if n > 0:
            raise ValueError(f"sequence {seq_id}: a recurrent state cannot go back to {n} of its "
                             f"{int(self.lengths[seq_id])} tokens")
        self.clear(seq_id)

    def clear(self, seq_id: int | None = None) -> None:
        super().clear(seq_id)
        rows = slice(None) if seq_id is None else seq_id
        for st in (*self.conv.values(), *self.ssm.values()):
            st[rows] = 0.0

    def copy_seq(self, src: int, dst: int, n: int | None = None) -> None:
        if n is not None and n != int(self.lengths[src]):
            raise ValueError(f"sequence {src}: a recurrent state is copied whole, not {n} of its tokens")
        super().copy_seq(src, dst, n)
        for st in (*self.conv.values(), *self.ssm.values()):
            st[dst] = st[src]

    def seq_state(self, seq: int) -> dict[str, np.ndarray]:
        return {**{f"conv{il}": st[seq] for il, st in self.conv.items()},
                **{f"ssm{il}": st[seq] for il, st in self.ssm.items()}}

    def load_seq_state(self, seq: int, arrays: dict[str, np.ndarray]) -> None:
        for name, st in self._states():
            if arrays[name].shape != st[seq].shape:
                raise ValueError(f"recurrent state {name} has shape {arrays[name].shape}, expected {st[seq].shape}")
        for name, st in self._states():
            st[seq] = arrays[name]

    def state_names(self) -> list[str]:
        return [name for name, _ in self._states()]

    def _states(self) -> list[tuple[str, np.ndarray]]:
        return [(f"conv{il}", st) for il, st in self.conv.items()] + [(f"ssm{il}", st) for il, st in self.ssm.items()]

    @property
    def nbytes_used(self) -> int:
        per_seq = sum(st[0].nbytes for _, st in self._states())
        return super().nbytes_used + int(np.count_nonzero(self.lengths)) * per_seq
