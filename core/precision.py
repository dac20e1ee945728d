"""Numerics modes of the forward pass.

`f32`: plain float32 maths on dequantized weights.
`ggml`: the same maths, with the roundings llama.cpp's CPU backend applies inserted where it
applies them (docs/numerics.md), so that our logits track llama.cpp's closely enough for
token-identical greedy output: activations quantized to each weight type's `vec_dot_type`
before a matmul, K/V cached as f16, attention operands in f16, GELU through the f16 table.
"""

from __future__ import annotations

import numpy as np

from llamacli.core import kernels as K
from llamacli.core import numerics as N
from llamacli.core.weights import Linear, OutputWeight

NUMERICS_MODES = ("ggml", "f32")

# Row-block size of the vocabulary projection when several rows are wanted: blocks of
# the (n_vocab, n_embd) matrix stay in cache while every row of x uses them.
_OUTPUT_BLOCK = 2048


class Precision:
    """float32 maths; the base of the ggml mode, which overrides the rounding hooks."""

    name = "f32"

    def act(self, x: np.ndarray, weight_qtype: object) -> np.ndarray:
        """The activation as the matmul with a weight of this type sees it."""
        return x

    def kv(self, x: np.ndarray) -> np.ndarray:
        """K or V as stored in the cache."""
        return x

    def linear(self, x: np.ndarray, lin: Linear) -> np.ndarray:
        y = self.act(x, lin.qtype) @ lin.w
        if lin.b is not None:
            y += lin.b
        return y

    def output(self, x: np.ndarray, ow: OutputWeight) -> np.ndarray:
        """Logits (n, n_vocab) = x (n, n_embd) @ ow.w.T."""
        xr = self.act(x, ow.qtype)
        if x.shape[0] < 4:
            return xr @ ow.w.T
        n_vocab = ow.w.shape[0]
        out = np.empty((x.shape[0], n_vocab), dtype=np.float32)
        for i in range(0, n_vocab, _OUTPUT_BLOCK):
            np.matmul(xr, ow.w[i : i + _OUTPUT_BLOCK].T, out=out[:, i : i + _OUTPUT_BLOCK])
        return out

    def gelu(self, x: np.ndarray) -> np.ndarray:
        return K.gelu(x)

    def silu(self, x: np.ndarray) -> np.ndarray:
        return K.silu(x)

    def attention(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float, softcap: float | None
    ) -> np.ndarray:
        return K.gqa_attention(q, k, v, mask, scale, softcap)


class GGMLPrecision(Precision):
    """Emulates ggml-cpu's roundings (see docs/numerics.md for each, with its source)."""

    name = "ggml"

    def act(self, x: np.ndarray, weight_qtype: object) -> np.ndarray:
        return N.round_activations(x, weight_qtype)

    def kv(self, x: np.ndarray) -> np.ndarray:
        return N.round_f16(x)


def make_precision(mode: str) -> Precision:
    if mode == "ggml":
        return GGMLPrecision()
    if mode == "f32":
        return Precision()
    raise ValueError(f"unknown numerics mode {mode!r} (choose from {', '.join(NUMERICS_MODES)})")
