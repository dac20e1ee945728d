"""`gemma4`: Gemma 4's text model, the dense variant (the 31B's layout).

As llama.cpp src/models/gemma4.cpp: Gemma 3's block (gemma3.gemma_args: embeddings times
sqrt(n_embd), NeoX rope, GELU-gated FFN, Q/K norms, post-attention and post-FFN norms) with
- a per-layer sliding window (`attention.sliding_window_pattern`, an array of booleans; window
  `attention.sliding_window`), and layers of two shapes: sliding layers have head size
  `attention.key_length_swa`, rotate `rope.dimension_count_swa` dims with base
  `rope.freq_base_swa` (10000 when absent), scale 1 and no factors; full layers have head size
  `attention.key_length` and rotate with the file's rope and `rope_freqs.weight` (proportional
  rope); KV heads per layer (`attention.head_count_kv` may be an array);
- attention scale 1 (Q/K norms carry the scaling), V RMS-normed without a weight, and V = K's
  projection on a layer without `attn_v` (use_alternative_attention);
- each layer's output times its `layer_output_scale` when the file has one; logits soft-capped
  by `final_logit_softcapping` when the file has it.
Per-layer embeddings (E2B/E4B), KV shared across layers (E2B/E4B) and experts (26B-A4B) are
refused at load with a one-line error naming what the file uses. The base class's attention
(`attn_shape`, `v_norm`, V from K without `attn_v`) and block (`LayerWeights.out_scale`) do the
rest, so the compiled one-token step (decode_step.py) takes these layers too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel, LayerWeights, ModelArgs, md_float, md_int, swa_pattern
from llamacli.core.model.families.gemma3 import gemma_args
from llamacli.core.model.precision import Precision
from llamacli.core.model.state.kv_cache import KVCache, lazy_zeros
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


@dataclass(frozen=True)
class LayerShape:
    """One layer's attention shape: KV heads and head size (K, V and Q alike)."""

    n_head_kv: int
    head_dim: int


def _refuse_variants(g: GGUFFile) -> None:
    """A one-line ModelLoadError for the Gemma 4 variants this family does not run."""
    md, p = g.metadata, g.path
    if md.get("gemma4.embedding_length_per_layer_input") or "per_layer_token_embd.weight" in g.tensors:
        raise ModelLoadError(p, "gemma4 with per-layer embeddings (E2B/E4B: per_layer_token_embd) is not supported")
    if md.get("gemma4.attention.shared_kv_layers"):
        raise ModelLoadError(p, "gemma4 with KV shared across layers (attention.shared_kv_layers) is not supported")
    if md.get("gemma4.expert_count") or any(n.endswith("ffn_gate_inp.weight") for n in g.tensors):
        raise ModelLoadError(p, "gemma4 with experts (26B-A4B: ffn_gate_inp, ffn_*_exps) is not supported")
    if any(n.endswith("attn_qkv.weight") for n in g.tensors):
        raise ModelLoadError(p, "gemma4 with a fused attn_qkv tensor is not supported")


def _kv_heads(md: dict[str, Any], path: str, n_layer: int, n_head: int) -> tuple[int, ...]:
    """`attention.head_count_kv` per layer (a number or an array; n_head when absent), each a
    divisor of n_head."""
    key = "gemma4.attention.head_count_kv"
    v = md.get(key, n_head)
    raw = np.asarray(v).reshape(-1) if isinstance(v, (list, np.ndarray)) else None
    if raw is None:
        heads = (md_int(md, path, key, n_head),) * n_layer
    elif raw.size != n_layer or raw.dtype.kind not in "iu":
        raise ModelLoadError(path, f"metadata key {key!r} must hold {n_layer} integers, got {raw.size} {raw.dtype}")
    else:
        heads = tuple(int(h) for h in raw)
    for h in heads:
        if h < 1 or n_head % h:
            raise ModelLoadError(path, f"{key} gives {h} KV heads: it must divide gemma4.attention.head_count ({n_head})")
    return heads


class Gemma4Model(DecoderModel):
    arch = "gemma4"
    has_qk_norm = True
    has_post_norms = True
    v_norm = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p = g.metadata, g.path
        _refuse_variants(g)
        n_head = md_int(md, p, "gemma4.attention.head_count")
        n_layer = md_int(md, p, "gemma4.block_count")
        heads = _kv_heads(md, p, n_layer, n_head)
        a = gemma_args(g, None, n_head_kv=max(heads))
        a.attn_scale = 1.0  # f_attention_scale: Q and K come out of their RMS norms unscaled
        a.scale_q = False
        softcap = md.get("gemma4.final_logit_softcapping")
        a.final_softcap = md_float(md, p, "gemma4.final_logit_softcapping") if softcap else None
        a.sliding_window = md_int(md, p, "gemma4.attention.sliding_window")
        if "gemma4.attention.sliding_window_pattern" not in md:
            raise ModelLoadError(p, "missing metadata key 'gemma4.attention.sliding_window_pattern'")
        a.swa_layers = swa_pattern(md, p, "gemma4.attention.sliding_window_pattern", n_layer, 0)
        head_swa = md_int(md, p, "gemma4.attention.key_length_swa")
        if md_int(md, p, "gemma4.attention.value_length_swa", head_swa) != head_swa or a.head_dim_v != a.head_dim:
            raise ModelLoadError(p, "gemma4 requires attention.key_length == value_length, and the same for _swa")
        n_rot_swa = md_int(md, p, "gemma4.rope.dimension_count_swa", a.rope.n_dims)
        if not 0 < n_rot_swa <= head_swa or n_rot_swa % 2:
            raise ModelLoadError(p, f"gemma4.rope.dimension_count_swa is {n_rot_swa}: it must be even and between 2 "
                                    f"and the sliding layers' head size ({head_swa})")
        base_swa = md_float(md, p, "gemma4.rope.freq_base_swa", 10000.0)
        a.rope_swa = replace(a.rope, n_dims=n_rot_swa, base=base_swa, scale=1.0, freq_factors=None)
        a.extra["shapes"] = tuple(LayerShape(h, head_swa if swa else a.head_dim) for h, swa in zip(heads, a.swa_layers))
        return a

    def __init__(self, args: ModelArgs, gguf: GGUFFile, precision: Precision, loader: WeightLoader) -> None:
        self.shapes: tuple[LayerShape, ...] = args.extra["shapes"]
        super().__init__(args, gguf, precision, loader)

    def attn_shape(self, il: int) -> tuple[int, int, int]:
        s = self.shapes[il]
        return s.n_head_kv, s.head_dim, s.head_dim

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        """Layer il at its own shape: V from K's projection where the file has no attn_v,
        and the optional `layer_output_scale`."""
        p = f"blk.{il}."
        a = self.args
        s = self.shapes[il]
        q_dim, kv_dim = a.n_head * s.head_dim, s.n_head_kv * s.head_dim
        lw = LayerWeights(
            attn_norm=ld.vector(p + "attn_norm.weight", a.n_embd),
            wq=ld.linear(p + "attn_q", a.n_embd, q_dim),
            wk=ld.linear(p + "attn_k", a.n_embd, kv_dim),
            wv=ld.linear(p + "attn_v", a.n_embd, kv_dim) if ld.has(p + "attn_v.weight") else None,
            wo=ld.linear(p + "attn_output", q_dim, a.n_embd),
            ffn_norm=ld.vector(p + "ffn_norm.weight", a.n_embd),
            q_norm=ld.vector(p + "attn_q_norm.weight", s.head_dim),
            k_norm=ld.vector(p + "attn_k_norm.weight", s.head_dim),
            post_attn_norm=ld.vector(p + "post_attention_norm.weight", a.n_embd),
            post_ffn_norm=ld.vector(p + "post_ffw_norm.weight", a.n_embd),
        )
        self._load_ffn(ld, il, lw)
        name = p + "layer_output_scale.weight"
        lw.out_scale = np.float32(ld.vector(name, 1)[0]) if ld.has(name) else None
        return lw

    def new_cache(self, n_seq: int, n_ctx: int) -> KVCache:
        """K and V of each layer at that layer's shape."""
        cache = KVCache(0, n_seq, n_ctx, 0, 0, 0)
        cache.n_layer = self.args.n_layer
        cache.k = [lazy_zeros((n_seq, s.n_head_kv, n_ctx, s.head_dim)) for s in self.shapes]
        cache.v = [lazy_zeros((n_seq, s.n_head_kv, n_ctx, s.head_dim)) for s in self.shapes]
        return cache
