"""`phi3` (Phi-3-mini/medium, Phi-3.5-mini, Phi-4-mini): the Llama block with fused weights and
LongRoPE (llama.cpp src/models/phi3.cpp).

- `blk.N.attn_qkv` (n_embd + 2 n_embd_gqa, n_embd): Q, K, V rows in that order (separate
  attn_q/k/v are read where a file has them instead); Q is scaled by 1/sqrt(head_dim) before
  attention (ggml_scale on Q), then attention with scale 1.
- `blk.N.ffn_up` (2 n_ff, n_embd): gate rows then up rows (ggml_swiglu: silu(first half) *
  second half); there is no ffn_gate.
- NeoX rope over `rope.dimension_count` dims (Phi-4-mini rotates 3/4 of each head).
- LongRoPE: `rope_factors_long` / `rope_factors_short` (n_rot/2 frequency divisors, one pair
  for all layers), the long ones when the context per sequence, padded to 256 cells as
  llama.cpp pads it, exceeds `rope.scaling.original_context_length`; cos and sin are
  multiplied by `rope.scaling.attn_factor`. Sliding windows are off, as llama.cpp has them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, LayerWeights, ModelArgs, md_float, md_int
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.precision import Precision
from llamacli.core.model.weights.tensors import WeightLoader

_CTX_PAD = 256  # llama_context pads n_ctx (and n_ctx_seq) to a multiple of 256


def _factors(g: GGUFFile, name: str, n_rot: int) -> np.ndarray | None:
    if name not in g.tensors:
        return None
    if g.tensors[name].shape != (n_rot // 2,):
        raise ModelLoadError(g.path, f"{name} has shape {g.tensors[name].shape}, expected ({n_rot // 2},)")
    return np.frombuffer(g.raw(name), dtype=np.float32).copy()


class Phi3Model(DecoderModel):
    arch = "phi3"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = common_args(g, neox=True)
        md, p = g.metadata, g.path
        a.scale_q = True
        n_rot = a.rope.n_dims
        attn_factor = md_float(md, p, "phi3.rope.scaling.attn_factor", 1.0)
        a.rope = replace(a.rope, attn_factor=attn_factor)
        short, long = _factors(g, "rope_factors_short.weight", n_rot), _factors(g, "rope_factors_long.weight", n_rot)
        if a.rope.freq_factors is None and (short is not None or long is not None):  # rope_freqs wins, as llama.cpp
            a.extra["rope_long"] = replace(a.rope, freq_factors=long)
            a.rope = replace(a.rope, freq_factors=short)
            a.extra["n_ctx_orig"] = md_int(md, p, "phi3.rope.scaling.original_context_length", a.n_ctx_train)
        return a

    def __init__(self, args: ModelArgs, gguf: GGUFFile, precision: Precision, loader: WeightLoader) -> None:
        super().__init__(args, gguf, precision, loader)
        self._rope_long: K.RopeConfig | None = args.extra.get("rope_long")

    def ropes(self, n_ctx: int) -> tuple[K.RopeConfig, K.RopeConfig]:
        if self._rope_long is not None and -(-n_ctx // _CTX_PAD) * _CTX_PAD > self.args.extra["n_ctx_orig"]:
            return self._rope_long, self._rope_long
        return self._rope, self._rope

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        p = f"blk.{il}."
        a = self.args
        n_q, n_k, n_v = a.n_head * a.head_dim, a.n_head_kv * a.head_dim, a.n_head_kv * a.head_dim_v
        if ld.has(p + "attn_qkv.weight"):
            wq, wk, wv = ld.linear_parts(p + "attn_qkv", a.n_embd, [n_q, n_k, n_v])
        else:
            wq, wk, wv = (ld.linear(p + nm, a.n_embd, n) for nm, n in (("attn_q", n_q), ("attn_k", n_k), ("attn_v", n_v)))
        w_gate, w_up = ld.linear_parts(p + "ffn_up", a.n_embd, [a.n_ff, a.n_ff])
        return LayerWeights(
            attn_norm=ld.vector(p + "attn_norm.weight"),
            wq=wq, wk=wk, wv=wv,
            wo=ld.linear(p + "attn_output", n_q, a.n_embd),
            ffn_norm=ld.vector(p + "ffn_norm.weight"),
            w_gate=w_gate, w_up=w_up,
            w_down=ld.linear(p + "ffn_down", a.n_ff, a.n_embd),
        )
