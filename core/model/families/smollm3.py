"""`smollm3` (Hugging Face SmolLM3; llama.cpp's LLM_ARCH_SMOLLM3, src/models/smollm3.cpp): the
Llama block (normal rope, SiLU-gated FFN, Q.K times 1/sqrt(head_dim)) where every fourth layer
attends without positions: layer il turns Q and K iff (il + 1) % 4 != 0. The step 4 is
llama.cpp's `hparams.n_no_rope_layer_step`, set by the family's loader (no metadata key gives it).

The layers without rope take the model's second rope (`ModelArgs.rope_swa` on the layers
`swa_layers` marks; no window, `sliding_window` stays None): every angle 0, so Q and K go as
projected. A context shift rotates the cached keys of every layer, the layers without rope
included, as llama.cpp's K-shift does (`llama_hparams::has_rope` is true on each of them).
"""

from __future__ import annotations

from llamacli.core.model.families.base import DecoderModel, ModelArgs
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.weights.gguf_file import GGUFFile

#: llama.cpp's n_no_rope_layer_step for smollm3
NO_ROPE_LAYER_STEP = 4


class SmolLM3Model(DecoderModel):
    arch = "smollm3"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = common_args(g, neox=False)
        a.swa_layers = tuple((il + 1) % NO_ROPE_LAYER_STEP == 0 for il in range(a.n_layer))
        a.rope_swa = K.RopeConfig(a.rope.n_dims, a.rope.base, scale=0.0)  # every angle 0: no positions
        return a

    def shift_rope(self, il: int, ropes: tuple[K.RopeConfig, K.RopeConfig]) -> K.RopeConfig:
        return ropes[0]

