"""`qwen2`: Llama block with biases on Q/K/V and NeoX rope."""

from __future__ import annotations

from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, ModelArgs
from llamacli.core.model.families.llama import common_args


class Qwen2Model(DecoderModel):
    arch = "qwen2"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        # The Q/K/V biases are picked up by the weight loader from `attn_*.bias`.
        return common_args(g, neox=True)
