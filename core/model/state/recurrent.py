"""The memory of a hybrid model (llama.cpp's llama_memory_hybrid): K/V cells for its attention
layers and, per sequence, a fixed-size recurrent state for its recurrent layers (the
convolution's last inputs, and Mamba-2's scan state or the delta net's state matrices;
llama_memory_recurrent's r_l and s_l).

A recurrent state summarises every token of its sequence: it cannot be cut back to a shorter
prefix. So, as llama.cpp's memory, a sequence keeps its state when nothing is removed, is
cleared when everything is, and otherwise goes back only to a context checkpoint: a copy of
the states taken after its first n tokens (llama-server's context checkpoints). `truncate`
raises for any other length; `reusable` says how much of a cached prefix a new prompt may keep.
Removing cells from the middle (the context shift) keeps the recurrent state as it is, as
llama_memory_recurrent's seq_rm and seq_add do for a range that does not hold the sequence's
last position.

Checkpoints, as tools/server/server-context.cpp makes them for a completion prompt: one where
the prompt's last 4 tokens begin (the server evaluates them as a batch of their own and copies
the state before it), and one where a reused prefix ends when the rest of the prompt is within
one batch; at most `max_checkpoints` per sequence (`--ctx-checkpoints`, 32), the oldest dropped
first. `plan_checkpoints` names the lengths; the mixer copies the states when it reaches them
(`cuts`, `snapshot`), whatever chunks the prompt is evaluated in.

Speculative decoding: a generation step that verifies k draft tokens evaluates 1 + k tokens of
a sequence and may keep any first 1..k of them. Such a step (the batch's `decode` rows, more
than one for a sequence) also copies the states after each of its first k tokens
(`plan_rollback`, ggml's rollback snapshots of ssm_scan for K > 1): the `truncate` that drops
the rejected rows goes back to one of them; the copies last until the next truncate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from llamacli.core.model.state.kv_cache import KVCache

#: llama-server's offset of the last prompt checkpoint from the prompt's end
CHECKPOINT_TAIL = 4


@dataclass
class Checkpoint:
    """A sequence's recurrent states after its first n_tokens tokens, per recurrent layer."""

    n_tokens: int
    conv: dict[int, np.ndarray] = field(default_factory=dict)
    ssm: dict[int, np.ndarray] = field(default_factory=dict)


class HybridCache(KVCache):
    """KVCache whose recurrent layers hold no K/V cells (zero heads) but conv[il] (n_seq, C,
    W - 1) and ssm[il] float32 states (Mamba-2: (n_seq, H, P, N); the delta net: (n_seq, H_v,
    S, S)). `cells`: the layers with K/V cells (default: the others); a layer that is neither
    (Nemotron-H's FFN-only layers) holds nothing."""

    def __init__(self, n_layer: int, n_seq: int, n_ctx: int, n_head_kv: int, head_dim: int, head_dim_v: int,
                 recurrent: tuple[bool, ...], conv_shape: tuple[int, ...], ssm_shape: tuple[int, ...],
                 cells: tuple[bool, ...] | None = None) -> None:
        super().__init__(n_layer, n_seq, n_ctx, n_head_kv, head_dim, head_dim_v)
        for il, c in enumerate(cells or ()):
            if not c:
                self.k[il] = np.zeros((n_seq, 0, n_ctx, head_dim), dtype=np.float32)
                self.v[il] = np.zeros((n_seq, 0, n_ctx, head_dim_v), dtype=np.float32)
        self.recurrent = recurrent
        self.max_checkpoints = 32
        self.checkpoints: list[list[Checkpoint]] = [[] for _ in range(n_seq)]
        self.pending: list[list[int]] = [[] for _ in range(n_seq)]  # lengths to checkpoint at
        self.rollback: list[dict[int, Checkpoint]] = [{} for _ in range(n_seq)]  # a draft's rows
        self.rollback_at: list[set[int]] = [set() for _ in range(n_seq)]
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
        """n when the prefix is the whole sequence, else the longest checkpoint within it, else 0
        (llama-server: the newest checkpoint whose position is below the reused prefix's end)."""
        if n == int(self.lengths[seq]):
            return n
        return max((c.n_tokens for c in self.checkpoints[seq] if c.n_tokens <= n), default=0)

    def truncate(self, seq_id: int, n: int) -> None:
        rollback = self.rollback[seq_id].get(n)
        self.rollback[seq_id], self.rollback_at[seq_id] = {}, set()
        if n >= int(self.lengths[seq_id]):
            return
        self.pending[seq_id] = []
        if n <= 0:
            self.clear(seq_id)
            return
        cp = [rollback] if rollback is not None else [c for c in self.checkpoints[seq_id] if c.n_tokens == n]
        if not cp:
            raise ValueError(f"sequence {seq_id}: a recurrent state cannot go back to {n} of its "
                             f"{int(self.lengths[seq_id])} tokens (no checkpoint there)")
        for il, st in cp[-1].conv.items():
            self.conv[il][seq_id] = st
        for il, st in cp[-1].ssm.items():
            self.ssm[il][seq_id] = st
        self.lengths[seq_id] = n
        self.checkpoints[seq_id] = [c for c in self.checkpoints[seq_id] if c.n_tokens <= n]

    def plan_rollback(self, seq_ids: np.ndarray, positions: np.ndarray, decode: np.ndarray | None) -> None:
        """A batch's generation steps that verify drafts (several `decode` rows of a sequence):
        copy the states after each of their rows but the last."""
        if decode is None or not decode.any():
            return
        seqs, counts = np.unique(seq_ids[decode], return_counts=True)
        for s, c in zip(seqs[counts > 1], counts[counts > 1]):
            first = int(positions[decode & (seq_ids == s)].min())
            lengths = set(range(first + 1, first + int(c)))
            self.rollback_at[int(s)] = lengths
            self.pending[int(s)] = sorted(set(self.pending[int(s)]) | lengths)

    def clear(self, seq_id: int | None = None) -> None:
        super().clear(seq_id)
        rows = slice(None) if seq_id is None else seq_id
        for st in (*self.conv.values(), *self.ssm.values()):
            st[rows] = 0.0
        for s in range(self.n_seq) if seq_id is None else (seq_id,):
            self.checkpoints[s] = []
            self.pending[s] = []
            self.rollback[s], self.rollback_at[s] = {}, set()

    def plan_checkpoints(self, seq: int, n_prompt: int, n_reuse: int, n_batch: int) -> None:
        """Checkpoint lengths for a completion prompt of n_prompt tokens whose first n_reuse are
        cached, evaluated n_batch tokens at a time (llama-server's n_ubatch)."""
        if self.max_checkpoints <= 0:
            return
        want = {n_prompt - CHECKPOINT_TAIL} if n_prompt - CHECKPOINT_TAIL > n_reuse else set()
        if n_reuse > 0 and n_prompt < n_reuse + n_batch:  # the rest is near the prompt's end
            want.add(n_reuse)
        self.pending[seq] = sorted(want)

    def cuts(self, seq_ids: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
        """How a batch splits at the pending checkpoints: phase (T,) per token (how many of its
        sequence's checkpoint lengths are at or below its position), and per phase boundary k
        the (seq, n_tokens) checkpoints to take after the tokens of phases <= k."""
        phase = np.zeros(seq_ids.shape[0], dtype=np.int64)
        after: list[list[tuple[int, int]]] = []
        if not any(self.pending):  # the common step: nothing to copy
            return phase, after
        for s in np.unique(seq_ids):
            mine = seq_ids == s
            lo, hi = int(positions[mine].min()), int(positions[mine].max()) + 1
            ns = [n for n in self.pending[int(s)] if lo <= n <= hi]
            for k, n in enumerate(ns):
                phase[mine & (positions >= n)] = k + 1
                while len(after) <= k:
                    after.append([])
                after[k].append((int(s), n))
        return phase, after

    def advance(self, il: int, seq_ids: np.ndarray, positions: np.ndarray,
                step: Callable[[np.ndarray | slice], None]) -> None:
        """Run a recurrent layer il over a batch: step(rows) advances the states of the rows'
        sequences; the rows go in phases, the tokens before each pending checkpoint first, then
        the states are copied (`snapshot`), then the rest (every row at once when none is due)."""
        phase, after = self.cuts(seq_ids, positions)
        for k in range(len(after) + 1):
            step(np.flatnonzero(phase == k) if after else slice(None))
            for s, n in after[k] if k < len(after) else ():
                self.snapshot(il, s, n)

    def snapshot(self, il: int, seq: int, n_tokens: int) -> None:
        """Copy layer il's states of a sequence into its checkpoint at n_tokens (made when its
        first recurrent layer reaches it; the oldest checkpoint goes when there are too many)."""
        if n_tokens in self.rollback_at[seq]:
            rb = self.rollback[seq].setdefault(n_tokens, Checkpoint(n_tokens))
            rb.conv[il] = self.conv[il][seq].copy()
            rb.ssm[il] = self.ssm[il][seq].copy()
            return
        cps = self.checkpoints[seq]
        cp = next((c for c in cps if c.n_tokens == n_tokens and il not in c.conv), None)
        if cp is None:  # the first layer: a new checkpoint (in place of an older one as long)
            cps[:] = [c for c in cps if c.n_tokens != n_tokens]
            cp = Checkpoint(n_tokens)
            cps.append(cp)
            del cps[: max(0, len(cps) - self.max_checkpoints)]
        cp.conv[il] = self.conv[il][seq].copy()
        cp.ssm[il] = self.ssm[il][seq].copy()

    def commit(self, seq_ids: np.ndarray, positions: np.ndarray) -> None:
        super().commit(seq_ids, positions)
        for s in np.unique(seq_ids):
            done = {c.n_tokens for c in self.checkpoints[int(s)]} | set(self.rollback[int(s)])
            self.pending[int(s)] = [n for n in self.pending[int(s)] if n not in done and n > self.lengths[int(s)]]

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
        self.checkpoints[seq] = []
        self.pending[seq] = []
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
        n_states = int(np.count_nonzero(self.lengths)) + sum(len(c) for c in self.checkpoints)
        return super().nbytes_used + n_states * per_seq
