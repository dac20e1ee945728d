"""The decoder of the hybrid families (llama.cpp's llama_memory_hybrid models): recurrent layers
(a mixer with a fixed-size state per sequence: Mamba-2, the gated delta net) mixed with
attention layers, the memory a state/recurrent.HybridCache.

A family gives `ModelArgs.extra["recurrent"]` (per layer: recurrent or not), the shapes of a
layer's two states (`state_shapes`) and its mixer (`recurrent_mixer`); `Mamba2HybridModel`
gives the last two for the Mamba-2 families (`extra["ssm"]`). What is shared here: a
batch must continue each sequence in order, a step that verifies drafts keeps the states of
its rows (speculative rollback), the one-token step runs the operations one by one, and the
context shift keeps the recurrent states as they are.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import AttnGroup, DecoderModel, LayerWeights, ModelArgs, md_int
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.mamba2 import Mamba2Args, Mamba2Weights, mamba2_mixer
from llamacli.core.model.kernels.warmup import RECURRENT
from llamacli.core.model.precision import Precision
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


def per_layer(g: GGUFFile, key: str, n_layer: int, default: int | None = None) -> tuple[int, ...]:
    """An integer key given once or per layer (an array of n_layer values)."""
    md, p = g.metadata, g.path
    v = md.get(key, default)
    if isinstance(v, (list, np.ndarray)):
        arr = np.asarray(v).reshape(-1)
        if arr.shape[0] != n_layer or arr.dtype.kind not in "iu" or (arr < 0).any():
            raise ModelLoadError(p, f"metadata key {key!r} must hold {n_layer} integers of at least 0")
        return tuple(int(x) for x in arr)
    return (md_int(md, p, key, default, lo=0),) * n_layer


def attention_args(g: GGUFFile, kv: tuple[int, ...], attention: tuple[bool, ...], n_ff: int | None = None) -> ModelArgs:
    """common_args for a hybrid whose `attention.head_count_kv` is per layer (kv): the one value
    its attention layers share (a model without attention keeps n_head for its empty cells),
    `attention.head_count` the largest per layer, no NeoX rope; n_ff as common_args."""
    p, arch = g.path, g.architecture
    attn_kv = {n for n, at in zip(kv, attention) if at}
    if len(attn_kv) > 1:
        raise ModelLoadError(p, f"metadata key '{arch}.attention.head_count_kv' has different values on its "
                                "attention layers: not supported")
    n_head = max(per_layer(g, f"{arch}.attention.head_count", len(kv)))
    a = common_args(g, neox=False, n_head_kv=attn_kv.pop() if attn_kv else max(n_head, 1), n_ff=n_ff)
    a.n_head = n_head
    return a


def read_mamba2_args(g: GGUFFile) -> Mamba2Args:
    """The `{arch}.ssm.*` keys of a Mamba-2 hybrid."""
    md, p, a = g.metadata, g.path, g.architecture
    m = Mamba2Args(md_int(md, p, f"{a}.ssm.conv_kernel"), md_int(md, p, f"{a}.ssm.inner_size"),
                   md_int(md, p, f"{a}.ssm.state_size"), md_int(md, p, f"{a}.ssm.time_step_rank"),
                   md_int(md, p, f"{a}.ssm.group_count"))
    m.check(p, a)
    return m


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

    @property
    def attention_layers(self) -> tuple[bool, ...]:
        """The layers with K/V cells (every one not recurrent, unless the family says otherwise)."""
        return tuple(not r for r in self.recurrent)

    def new_cache(self, n_seq: int, n_ctx: int) -> HybridCache:
        a = self.args
        return HybridCache(a.n_layer, n_seq, n_ctx, a.n_head_kv, a.head_dim, a.head_dim_v, self.recurrent,
                           *self.state_shapes(), cells=self.attention_layers)

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


class Mamba2HybridModel(HybridModel):
    """A hybrid whose recurrent layers are Mamba-2 mixers (families/mamba2.py) of the
    `{arch}.ssm.*` sizes in `ModelArgs.extra["ssm"]` (granitehybrid, nemotron_h)."""

    @property
    def ssm(self) -> Mamba2Args:
        m: Mamba2Args = self.args.extra["ssm"]
        return m

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        m = self.ssm
        return (m.conv_dim, m.d_conv - 1), (m.n_head, m.head_dim, m.d_state)

    def recurrent_mixer(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: HybridCache) -> np.ndarray:
        assert isinstance(lw.mixer, Mamba2Weights)
        return mamba2_mixer(self.precision, lw.mixer, self.ssm, h, batch, cache, il, self.args.norm_eps)
