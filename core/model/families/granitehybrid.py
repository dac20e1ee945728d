"""`granitehybrid` (IBM Granite 4.0-H, Bamba; llama.cpp's LLM_ARCH_GRANITE_HYBRID,
src/models/granite-hybrid.cpp): Mamba-2 layers (families/mamba2.py) mixed with attention layers,
each followed by a SiLU-gated FFN.

- A layer is recurrent where `attention.head_count_kv` (a per-layer array) is 0.
- Granite's multipliers, rope switch and experts as granite's (families/granite.py:
  `granite_args`): the residual scale also applies to a Mamba-2 layer's output;
  `logit_scale` is optional here. Granite 4.0-H files turn rope off (no positional encoding in
  the attention layers; the Mamba layers carry the order); Granite 4.0-H Tiny/Small have experts
  and a shared FFN in every layer.

The recurrent states live in the cache (state/recurrent.HybridCache): a prompt reuses a cached
prefix only whole, a context shift drops attention cells and keeps the recurrent state, slot
files carry the states (docs/models.md).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import LayerWeights, ModelArgs, md_int
from llamacli.core.model.families.granite import granite_args
from llamacli.core.model.families.hybrid import HybridModel
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.mamba2 import Mamba2Args, Mamba2Weights, load_mamba2, mamba2_mixer
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


def _per_layer(g: GGUFFile, key: str, n_layer: int, default: int | None = None) -> tuple[int, ...]:
    """An integer key given once or per layer (an array of n_layer values)."""
    md, p = g.metadata, g.path
    v = md.get(key, default)
    if isinstance(v, (list, np.ndarray)):
        arr = np.asarray(v).reshape(-1)
        if arr.shape[0] != n_layer or arr.dtype.kind not in "iu" or (arr < 0).any():
            raise ModelLoadError(p, f"metadata key {key!r} must hold {n_layer} integers of at least 0")
        return tuple(int(x) for x in arr)
    return (md_int(md, p, key, default, lo=0),) * n_layer


def read_mamba2_args(g: GGUFFile) -> Mamba2Args:
    md, p, a = g.metadata, g.path, g.architecture
    m = Mamba2Args(md_int(md, p, f"{a}.ssm.conv_kernel"), md_int(md, p, f"{a}.ssm.inner_size"),
                   md_int(md, p, f"{a}.ssm.state_size"), md_int(md, p, f"{a}.ssm.time_step_rank"),
                   md_int(md, p, f"{a}.ssm.group_count"))
    m.check(p, a)
    return m


class GraniteHybridModel(HybridModel):
    arch = "granitehybrid"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        n_layer = md_int(md, p, f"{arch}.block_count")
        kv = _per_layer(g, f"{arch}.attention.head_count_kv", n_layer)
        recurrent = tuple(n == 0 for n in kv)
        attn_kv = {n for n in kv if n}
        if len(attn_kv) > 1:
            raise ModelLoadError(p, f"metadata key '{arch}.attention.head_count_kv' has different values on its "
                                    "attention layers: not supported")
        n_head = max(_per_layer(g, f"{arch}.attention.head_count", n_layer))
        # a model of only recurrent layers keeps the attention sizes for its (empty) KV cells
        a = common_args(g, neox=False, n_head_kv=attn_kv.pop() if attn_kv else max(n_head, 1))
        a = granite_args(g, replace(a, n_head=n_head), logit_required=False)
        a.extra.update(ssm=read_mamba2_args(g), recurrent=recurrent)
        ssm: Mamba2Args = a.extra["ssm"]
        if ssm.d_inner != 2 * a.n_embd:
            raise ModelLoadError(p, f"{arch}.ssm.inner_size ({ssm.d_inner}) must be twice {arch}.embedding_length "
                                    f"({a.n_embd}), as llama.cpp requires")
        return a

    @property
    def ssm(self) -> Mamba2Args:
        m: Mamba2Args = self.args.extra["ssm"]
        return m

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        if not self.recurrent[il]:
            return super()._load_layer(ld, il)
        a = self.args
        p = f"blk.{il}."
        lw = LayerWeights(attn_norm=ld.vector(p + "attn_norm.weight", a.n_embd), wq=None, wk=None, wv=None, wo=None,
                          ffn_norm=ld.vector(p + "ffn_norm.weight", a.n_embd),
                          mixer=load_mamba2(ld, p, a.n_embd, self.ssm))
        self._load_ffn(ld, il, lw)
        return lw

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        m = self.ssm
        return (m.conv_dim, m.d_conv - 1), (m.n_head, m.head_dim, m.d_state)

    def recurrent_mixer(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: HybridCache) -> np.ndarray:
        assert isinstance(lw.mixer, Mamba2Weights)
        return mamba2_mixer(self.precision, lw.mixer, self.ssm, h, batch, cache, il, self.args.norm_eps)
