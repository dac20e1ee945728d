"""`qwen2vl` (the text model of Qwen2-VL and Qwen2.5-VL): the qwen2 block (Q/K/V biases, NeoX
pairs) with M-RoPE (llama.cpp src/models/qwen2vl.cpp, ggml_rope_multi with
GGML_ROPE_TYPE_MROPE).

Each token has four positions (t, h, w, e); `qwen2vl.rope.dimension_sections` (s0, s1, s2, s3)
says which rotated pairs turn by which: pair i by component j where i % sum(sections) falls in
the j-th section. Text tokens have all four equal, which is plain NeoX rope; an image's tokens
share t and turn by their row (h) and column (w) (Batch.rope_pos). The whole head is rotated
(llama.cpp asserts rope.dimension_count = head size). llama.cpp cannot shift an M-RoPE cache
(get_can_shift is false, so llama-server turns the context shift off): a full sequence ends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, ModelArgs
from llamacli.core.model.families.llama import common_args


def rope_sections(g: GGUFFile) -> tuple[int, int, int, int]:
    """`qwen2vl.rope.dimension_sections`: four non-negative counts of pairs, not all zero (as
    llama.cpp reads the key: required, an array of up to 4, zero-padded)."""
    key = f"{g.architecture}.rope.dimension_sections"
    md: dict[str, Any] = g.metadata
    if key not in md:
        raise ModelLoadError(g.path, f"missing metadata key {key!r}")
    v = np.asarray(md[key]).reshape(-1)
    if v.size > 4 or v.size == 0 or not np.issubdtype(v.dtype, np.integer) or (v < 0).any() or not v.any():
        raise ModelLoadError(g.path, f"metadata key {key!r} must be 1 to 4 non-negative integers, not all 0")
    s = [int(x) for x in v] + [0] * (4 - v.size)
    return s[0], s[1], s[2], s[3]


class Qwen2VLModel(DecoderModel):
    arch = "qwen2vl"
    can_shift = False
    mrope = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = common_args(g, neox=True)
        if a.rope.n_dims != a.head_dim:
            raise ModelLoadError(g.path, f"qwen2vl.rope.dimension_count ({a.rope.n_dims}) must equal the head size "
                                         f"({a.head_dim}), as llama.cpp asserts")
        a.extra["rope_sections"] = rope_sections(g)
        return a

    def rope_angles(self, batch: Batch, rope: K.RopeConfig) -> tuple[np.ndarray, np.ndarray]:
        if batch.rope_pos is None:  # every component the token's position: NeoX rope
            return K.rope_cos_sin(batch.positions, rope)
        return K.mrope_cos_sin(batch.rope_pos, rope, self.args.extra["rope_sections"])

    def shift_cache(self, cache: KVCache, seq: int, n_keep: int, n_discard: int) -> None:
        raise InvalidRequest("context shift is not supported with M-RoPE (qwen2vl), as in llama.cpp")
