"""`mistral3` (Ministral 3, Mistral Small 3.x text models as the newer converter writes them;
llama.cpp's LLM_ARCH_MISTRAL3, src/models/mistral3.cpp): the Llama block (normal GPT-J rope,
SiLU-gated FFN, optional `rope_freqs.weight`, optional `attn_output.bias`) with, per llama.cpp:

- YaRN (`rope.scaling.type` "yarn") whose betas come from `rope.scaling.yarn_beta_fast` /
  `yarn_beta_slow` and whose magnitude factor takes `rope.scaling.yarn_log_multiplier`
  (mscale_all_dim: families/llama.py `yarn_rope`);
- the Llama-4 attention temperature when `attention.temperature_scale` is set: Q times
  log(floor(pos / n_orig) + 1) * scale + 1 after rope, n_orig the YaRN original context
  (`rope.scaling.original_context_length`, else `context_length`): kernels/ops.py
  `attn_temperature`.

Mistral Small 3.x files converted as `llama` run as llama.
"""

from __future__ import annotations

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel, ModelArgs, md_float, md_int
from llamacli.core.model.families.llama import common_args, yarn_rope
from llamacli.core.model.weights.gguf_file import GGUFFile


class Mistral3Model(DecoderModel):
    arch = "mistral3"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        a = common_args(g, neox=False)
        if f"{arch}.expert_count" in md:
            raise ModelLoadError(p, f"{arch} with experts ({arch}.expert_count) is not supported")
        if a.head_dim != a.head_dim_v or a.rope.n_dims != a.head_dim:
            raise ModelLoadError(p, f"{arch} rotates whole heads: {arch}.rope.dimension_count ({a.rope.n_dims}), "
                                    f"key_length ({a.head_dim}) and value_length ({a.head_dim_v}) must be equal")
        n_orig = md_int(md, p, f"{arch}.rope.scaling.original_context_length", a.n_ctx_train)
        if md.get(f"{arch}.rope.scaling.type") == "yarn":
            a.rope = yarn_rope(a.rope, n_orig, md_float(md, p, f"{arch}.rope.scaling.attn_factor", 1.0),
                               md_float(md, p, f"{arch}.rope.scaling.yarn_beta_fast", 32.0),
                               md_float(md, p, f"{arch}.rope.scaling.yarn_beta_slow", 1.0),
                               md_float(md, p, f"{arch}.rope.scaling.yarn_log_multiplier", 0.0, positive=False))
        temp = md_float(md, p, f"{arch}.attention.temperature_scale", 0.0, positive=False)
        if temp:
            a.attn_temp = (temp, n_orig)
        return a
