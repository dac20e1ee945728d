"""`granitehybrid` (IBM Granite 4.0-H, Bamba; llama.cpp's LLM_ARCH_GRANITE_HYBRID,
src/models/granite-hybrid.cpp): Mamba-2 layers (families/mamba2.py) mixed with attention layers,
each followed by a SiLU-gated FFN.

- A layer is recurrent where `attention.head_count_kv` (a per-layer array) is 0.
- Granite's multipliers, rope switch and experts as granite's (families/granite.py:
  `granite_args`): the residual scale also applies to a Mamba-2 layer's output; `logit_scale`
  is optional here. Granite 4.0-H files turn rope off (no positional encoding in the attention
  layers; the Mamba layers carry the order); Granite 4.0-H Tiny/Small have experts and a shared
  FFN in every layer.

The recurrent states live in the cache (state/recurrent.HybridCache): a prompt reuses a cached
prefix only whole, a context shift drops attention cells and keeps the recurrent state, slot
files carry the states (docs/models.md).
"""

from __future__ import annotations

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import LayerWeights, ModelArgs
from llamacli.core.model.families.granite import granite_args
from llamacli.core.model.families.hybrid import Mamba2HybridModel, kv_recurrent_args, read_mamba2_args
from llamacli.core.model.families.mamba2 import Mamba2Args, load_mamba2
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


class GraniteHybridModel(Mamba2HybridModel):
    arch = "granitehybrid"
    scale_media_embd = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        p, arch = g.path, g.architecture
        a = granite_args(g, kv_recurrent_args(g), logit_required=False)
        a.extra.update(ssm=read_mamba2_args(g))
        ssm: Mamba2Args = a.extra["ssm"]
        if ssm.d_inner != 2 * a.n_embd:
            raise ModelLoadError(p, f"{arch}.ssm.inner_size ({ssm.d_inner}) must be twice {arch}.embedding_length "
                                    f"({a.n_embd}), as llama.cpp requires")
        return a

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        if not self.recurrent[il]:
            return super()._load_layer(ld, il)
        return self._mixer_layer(ld, il, load_mamba2(ld, f"blk.{il}.", self.args.n_embd, self.ssm))
