"""The projectors: vision hidden states (P, E) to text-model embeddings (n_tokens, n_text), one
class per `clip.projector_type`, as tools/mtmd/models/siglip.cpp (gemma3, idefics3), llava.cpp (mlp)
and qwen2vl.cpp (qwen2vl_merger, qwen2.5vl_merger)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm.matrix import QuantMatrix
from llamacli.core.model.precision import Precision
from llamacli.core.model.weights.tensors import Linear, WeightLoader
from llamacli.core.multimodal.projector_file import VisionHParams

FLOAT_DTYPES = {"F32": np.float32, "F16": np.float16}


class Projector(ABC):
    """Base: `n_text` is the output width; `n_run` the ViT blocks the family runs."""

    n_text: int

    @abstractmethod
    def __init__(self, ld: WeightLoader, hp: VisionHParams) -> None: ...

    def n_run(self, hp: VisionHParams) -> int:
        return hp.n_layer

    @abstractmethod
    def n_tokens(self, hp: VisionHParams) -> int:
        """Embeddings one image gives."""

    @abstractmethod
    def __call__(self, x: np.ndarray, hp: VisionHParams, pr: Precision) -> np.ndarray:
        """The ViT's output (P, E) -> (n_tokens, n_text)."""


def transposed_linear(ld: WeightLoader, name: str) -> Linear:
    """W (n_in, n_out) in the file, used as ggml_mul_mat(ggml_cont(ggml_transpose(W)), x):
    the transposed copy keeps the file's float type (F32, F16); other types are refused, as
    ggml_cont cannot transpose quantized blocks."""
    g = ld.gguf
    t = g.tensor(name)
    if len(t.shape) != 2 or t.qtype.name not in FLOAT_DTYPES:
        raise ModelLoadError(g.path, f"tensor {name!r} must be a 2-D F32 or F16 matrix, is {t.qtype.name} {t.shape}")
    n_in, n_out = t.shape
    w = np.asarray(g.raw(name)).view(FLOAT_DTYPES[t.qtype.name]).reshape(n_in, n_out)
    data = np.ascontiguousarray(w.T).view(np.uint8).reshape(n_out, -1)
    return Linear(t.qtype, n_in, n_out, q=QuantMatrix(data, t.qtype, n_in), name=name)


def merge_blocks(x: np.ndarray, hp: VisionHParams) -> np.ndarray:
    """The ViT's output (P, E), patches row by row, as (o, m, o, m, E): (out row, row in the
    block, out column, column in the block), m = n_merge, o = patches per side / m."""
    m = hp.n_merge
    o = hp.n_patches_side // m
    return x.reshape(o, m, o, m, hp.n_embd)


class MergingProjector(Projector):
    """A projector with one token per n_merge x n_merge block of patches."""

    def n_tokens(self, hp: VisionHParams) -> int:
        return (hp.n_patches_side // hp.n_merge) ** 2


class Gemma3Projector(MergingProjector):
    """Average pooling of n_merge x n_merge patches, RMS norm times soft_emb_norm, then the
    input projection (siglip.cpp, PROJECTOR_TYPE_GEMMA3)."""

    def __init__(self, ld: WeightLoader, hp: VisionHParams) -> None:
        self.norm = ld.vector("mm.soft_emb_norm.weight", hp.n_embd)
        self.proj = transposed_linear(ld, "mm.input_projection.weight")
        if self.proj.n_in != hp.n_embd:
            raise ModelLoadError(ld.gguf.path, f"mm.input_projection.weight reads {self.proj.n_in} values, the ViT gives {hp.n_embd}")
        self.n_text = self.proj.n_out

    def __call__(self, x: np.ndarray, hp: VisionHParams, pr: Precision) -> np.ndarray:
        grid = merge_blocks(x, hp)  # (out row, ky, out col, kx, E)
        o, m, e = grid.shape[0], hp.n_merge, hp.n_embd
        acc = np.zeros((o, o, e), dtype=np.float32)
        for ky in range(m):  # ggml_pool_2d: a float32 sum in (ky, kx) order, then / (m * m)
            for kx in range(m):
                acc += grid[:, ky, :, kx, :]
        pooled = (acc / np.float32(m * m)).reshape(o * o, e)
        return pr.linear(K.rms_norm(pooled, self.norm, hp.eps), self.proj)


class Idefics3Projector(MergingProjector):
    """SmolVLM: pixel shuffle (each n_merge x n_merge block of patches as one row of
    n_merge^2 E values) then `mm.model.fc` (siglip.cpp, PROJECTOR_TYPE_IDEFICS3, through
    clip.cpp's build_patch_merge_permute)."""

    def __init__(self, ld: WeightLoader, hp: VisionHParams) -> None:
        n_in = hp.n_embd * hp.n_merge**2
        self.fc = ld.linear("mm.model.fc", n_in, ld.gguf.tensor("mm.model.fc.weight").shape[0])
        self.n_text = self.fc.n_out

    def __call__(self, x: np.ndarray, hp: VisionHParams, pr: Precision) -> np.ndarray:
        # patch (y, x) = (Y m + i, X m + j) -> token Y o + X, values (i m + j) E + e
        grid = merge_blocks(x, hp).transpose(0, 2, 1, 3, 4)  # (Y, X, i, j, E)
        return pr.linear(np.ascontiguousarray(grid.reshape(self.n_tokens(hp), -1)), self.fc)


class MlpProjector(Projector):
    """LLaVA 1.5: the hidden states of the next-to-last block, mm.0 -> GELU -> mm.2
    (llava.cpp, PROJECTOR_TYPE_MLP)."""

    def __init__(self, ld: WeightLoader, hp: VisionHParams) -> None:
        self.has_class = ld.has("v.class_embd")
        self.mm0 = ld.linear("mm.0", hp.n_embd, ld.gguf.tensor("mm.0.weight").shape[0])
        n_mid = self.mm0.n_out
        self.mm2 = ld.linear("mm.2", n_mid, ld.gguf.tensor("mm.2.weight").shape[0]) if ld.has("mm.2.weight") else None
        self.n_text = n_mid if self.mm2 is None else self.mm2.n_out

    def n_run(self, hp: VisionHParams) -> int:
        return hp.n_layer - 1

    def n_tokens(self, hp: VisionHParams) -> int:
        return hp.n_patches_side**2

    def __call__(self, x: np.ndarray, hp: VisionHParams, pr: Precision) -> np.ndarray:
        off = 1 if self.has_class else 0  # clip.cpp skips row 0 when there is a class embedding
        y = pr.gelu(pr.linear(x[off : off + self.n_tokens(hp)], self.mm0))
        return y if self.mm2 is None else pr.linear(y, self.mm2)


class Qwen25VLMerger(Projector):
    """Qwen2-VL's and Qwen2.5-VL's patch merger: each 2 x 2 unit's four rows side by side (4 E), mm.0 -> GELU
    -> mm.2, with biases (qwen2vl.cpp's build_ffn FFN_GELU). The tower (qwen25vl.py) gives its
    rows unit by unit in raster order and has normed them (`v.post_ln`, the merger's ln_q)."""

    def __init__(self, ld: WeightLoader, hp: VisionHParams) -> None:
        n_in = 4 * hp.n_embd
        self.mm0 = ld.linear("mm.0", n_in, ld.gguf.tensor("mm.0.weight").shape[0])
        self.mm2 = ld.linear("mm.2", self.mm0.n_out, ld.gguf.tensor("mm.2.weight").shape[0])
        self.n_text = self.mm2.n_out

    def n_tokens(self, hp: VisionHParams) -> int:
        """Embeddings of an image already the size of the file's image_size square."""
        return (hp.n_patches_side // 2) ** 2

    def __call__(self, x: np.ndarray, hp: VisionHParams, pr: Precision) -> np.ndarray:
        return pr.linear(pr.gelu(pr.linear(x.reshape(-1, 4 * hp.n_embd), self.mm0)), self.mm2)


PROJECTORS: dict[str, type[Projector]] = {"gemma3": Gemma3Projector, "idefics3": Idefics3Projector, "mlp": MlpProjector,
                                          "qwen2vl_merger": Qwen25VLMerger, "qwen2.5vl_merger": Qwen25VLMerger}
