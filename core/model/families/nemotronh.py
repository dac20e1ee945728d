"""`nemotron_h` (NVIDIA Nemotron-H, Nemotron Nano 2; llama.cpp's LLM_ARCH_NEMOTRON_H,
src/models/nemotron-h.cpp): a stack of single-purpose layers, each one block on the residual
stream

    x = x + f(rms_norm(x) * attn_norm)

where f is the layer's one part, chosen per layer by the metadata as llama.cpp does:
- `feed_forward_length[il]` > 0: an FFN of squared ReLU, down(relu(up(h))^2) (no gate;
  ffn_up/ffn_down, biases where the file has them);
- else `attention.head_count_kv[il]` > 0: attention without positions (llama.cpp's rope type
  NONE: Q and K as projected, Q.K times 1/sqrt(key_length); llama.cpp reads no
  attention.scale here), attn_q/k/v/output, biases where the file has them;
- else (both 0): a Mamba-2 mixer (families/mamba2.py; its ssm_conv1d bias optional).
`attention.head_count_kv` absent means head_count on every layer (llama.cpp's default), so then
every layer without an FFN attends. The RMS norms' epsilon is `attention.layer_norm_rms_epsilon`,
else `attention.layer_norm_epsilon` (the converter writes the latter only). No embedding,
residual or logit multipliers; the output matrix is its own (or the token embeddings when absent).

Only the attention layers hold K/V cells and only the Mamba-2 layers a recurrent state
(llama.cpp's hybrid memory filters); the FFN layers hold nothing. The states live in the cache
as granitehybrid's (state/recurrent.HybridCache: whole-prefix or checkpoint reuse, the context
shift keeps them, slot files carry them). With no rope a context shift leaves the keys as they
are (llama.cpp skips its K-shift graph for rope type NONE; here: a rotation by angle 0).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import AttnGroup, LayerWeights, ModelArgs, md_float, md_int
from llamacli.core.model.families.hybrid import Mamba2HybridModel, attention_args, per_layer, read_mamba2_args
from llamacli.core.model.families.mamba2 import load_mamba2
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.precision import Precision
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import Linear, WeightLoader


def relu_sqr_ffn(pr: Precision, h: np.ndarray, up: Linear, down: Linear) -> np.ndarray:
    """llama.cpp's build_ffn with LLM_FFN_RELU_SQR and no gate: down(relu(up(h))^2), h (T, n_embd)
    (ggml_relu then ggml_sqr: exact in float32)."""
    u = np.maximum(pr.linear(h, up), np.float32(0.0))
    return pr.linear(u * u, down)


def _norm_eps(g: GGUFFile) -> float:
    md, p, a = g.metadata, g.path, g.architecture
    key = f"{a}.attention.layer_norm_rms_epsilon"
    if key not in md:
        key = f"{a}.attention.layer_norm_epsilon"
    return md_float(md, p, key, positive=False)


class NemotronHModel(Mamba2HybridModel):
    arch = "nemotron_h"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        n_layer = md_int(md, p, f"{arch}.block_count")
        heads = per_layer(g, f"{arch}.attention.head_count", n_layer)
        kv_key = f"{arch}.attention.head_count_kv"
        kv = per_layer(g, kv_key, n_layer) if kv_key in md else heads
        n_ff = per_layer(g, f"{arch}.feed_forward_length", n_layer)
        recurrent = tuple(k == 0 and f == 0 for k, f in zip(kv, n_ff))
        attention = tuple(k > 0 and f == 0 for k, f in zip(kv, n_ff))
        if any(a and not h for a, h in zip(attention, heads)):
            raise ModelLoadError(p, f"metadata key '{arch}.attention.head_count' is 0 on a layer that attends")
        a = attention_args(g, kv, attention, n_ff=max(n_ff) or 1)
        a.rope = replace(a.rope, scale=0.0, freq_factors=None)  # no positions: every angle 0
        a.norm_eps = _norm_eps(g)
        a.extra.update(ssm=read_mamba2_args(g), recurrent=recurrent, attention=attention, n_ff=n_ff)
        return a

    @property
    def attention_layers(self) -> tuple[bool, ...]:
        a: tuple[bool, ...] = self.args.extra["attention"]
        return a

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        a = self.args
        p = f"blk.{il}."
        norm = ld.vector(p + "attn_norm.weight", a.n_embd)
        n_ff = a.extra["n_ff"][il]
        if self.attention_layers[il]:
            return LayerWeights(attn_norm=norm, wq=ld.linear(p + "attn_q", a.n_embd, a.n_head * a.head_dim),
                                wk=ld.linear(p + "attn_k", a.n_embd, a.n_head_kv * a.head_dim),
                                wv=ld.linear(p + "attn_v", a.n_embd, a.n_head_kv * a.head_dim_v),
                                wo=ld.linear(p + "attn_output", a.n_head * a.head_dim_v, a.n_embd), ffn_norm=norm)
        lw = LayerWeights(attn_norm=norm, wq=None, wk=None, wv=None, wo=None, ffn_norm=norm)  # one norm per layer
        if n_ff:
            lw.w_up = ld.linear(p + "ffn_up", a.n_embd, n_ff)
            lw.w_down = ld.linear(p + "ffn_down", n_ff, a.n_embd)
        else:
            lw.mixer = load_mamba2(ld, p, a.n_embd, self.ssm)
        return lw

    def block(self, il: int, lw: LayerWeights, x: np.ndarray, batch: Batch, cache: KVCache, groups: list[AttnGroup],
              cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """The layer's one part (FFN, attention or Mamba-2) on its normed input, added to x."""
        h = K.rms_norm(x, lw.attn_norm, self.args.norm_eps)
        if lw.w_up is not None and lw.w_down is not None:
            return x + relu_sqr_ffn(self.precision, h, lw.w_up, lw.w_down)
        return x + self.attention(il, lw, h, batch, cache, groups, cos, sin)
