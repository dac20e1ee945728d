"""The decoder of the hybrid families (llama.cpp's llama_memory_hybrid models): recurrent layers
(a mixer with a fixed-size state per sequence: Mamba-2, the gated delta net) mixed with
attention layers, the memory a state/recurrent.HybridCache.

A family gives `ModelArgs.extra["recurrent"]` (per layer: recurrent or not), the shapes of a
layer's two states (`state_shapes`) and its mixer (`recurrent_mixer`). What is shared here: a
batch must continue each sequence in order, a step that verifies drafts keeps the states of
its rows (speculative rollback), the one-token step runs the operations one by one, and the
context shift keeps the recurrent states as they are.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.model.families.base import AttnGroup, DecoderModel, LayerWeights, ModelArgs
from llamacli.core.model.kernels.warmup import RECURRENT
from llamacli.core.model.precision import Precision
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


class HybridModel(DecoderModel):
    def __init__(self, args: ModelArgs, gguf: GGUFFile, precision: Precision, loader: WeightLoader) -> None:
        super().__init__(args, gguf, precision, loader)
        self.fused_decode = False  # the compiled one-token step knows attention layers only

    @property
    def recurrent(self) -> tuple[bool, ...]:
        r: tuple[bool, ...] = self.args.extra["recurrent"]
        return r

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The shapes of a recurrent layer's two states per sequence: (conv, the mixer's own)."""
        raise TypeError(f"{type(self).__name__} gives no recurrent state shapes")

    def recurrent_mixer(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: HybridCache) -> np.ndarray:
        """Layer il's recurrent mixer over h (T, n_embd)."""
        raise TypeError(f"{type(self).__name__} gives no recurrent mixer")

    def new_cache(self, n_seq: int, n_ctx: int) -> HybridCache:
        a = self.args
        return HybridCache(a.n_layer, n_seq, n_ctx, a.n_head_kv, a.head_dim, a.head_dim_v, self.recurrent,
                           *self.state_shapes())

    def kernel_kinds(self) -> list[str]:
        return [*super().kernel_kinds(), RECURRENT]

    def forward_hidden(self, batch: Batch, cache: KVCache) -> np.ndarray:
        cache.check_batch(batch.seq_ids, batch.positions)
        if isinstance(cache, HybridCache):  # a step verifying drafts: its rows' states kept
            cache.plan_rollback(batch.seq_ids, batch.positions, batch.decode)
        return super().forward_hidden(batch, cache)

    def attention(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: KVCache,
                  groups: list[AttnGroup], cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """The layer's mixer: the recurrent one on a recurrent layer, attention on the others."""
        if lw.mixer is None:
            return super().attention(il, lw, h, batch, cache, groups, cos, sin)
        assert isinstance(cache, HybridCache)
        return self.recurrent_mixer(il, lw, h, batch, cache)

    def shift_cache(self, cache: KVCache, seq: int, n_keep: int, n_discard: int) -> None:
        """As llama-server's context shift on a hybrid memory: the attention layers drop cells
        [n_keep, n_keep + n_discard) and move the rest down (the base K-shift); the recurrent
        states, which have no cells, stay as they are and still carry the dropped tokens
        (llama_memory_recurrent's seq_rm of a range short of the last position removes
        nothing, its seq_add only moves the position)."""
        n = int(cache.lengths[seq])
        if n - n_keep - n_discard > 0:
            super().shift_cache(cache, seq, n_keep, n_discard)
        else:
            cache.lengths[seq] = n_keep  # nothing after the dropped cells to move
