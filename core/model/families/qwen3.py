"""`qwen3`: Llama block with per-head RMS norms on Q and K (before rope), NeoX rope."""

from __future__ import annotations

from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, ModelArgs
from llamacli.core.model.families.llama import common_args


class Qwen3Model(DecoderModel):
    arch = "qwen3"
    has_qk_norm = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        return common_args(g, neox=True)
