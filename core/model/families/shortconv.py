"""The short-convolution mixer of LFM2 (llama.cpp's `build_shortconv_block`, src/models/lfm2.cpp),
the block the `lfm2` family runs in place of attention on its recurrent layers.

    b, c, x = h @ W_in.T                         (T, 3 E): three parts of E = n_embd each
    y       = conv1d(b * x)                      causal, depthwise, kernel L, no bias (kernels/ssm.ssm_conv)
    out     = (c * y) @ W_out.T                  (T, n_embd)

L = `shortconv.l_cache`. The state is the conv's last L - 1 inputs (b * x) per sequence, (E, L - 1),
in the cache (state/recurrent.HybridCache's conv; the mixer has no second state, its `ssm` entry
is empty).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from llamacli.core.model.families.mamba2 import _values
from llamacli.core.model.kernels.ssm import ssm_conv
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.model.weights.tensors import Linear, WeightLoader

if TYPE_CHECKING:
    from llamacli.core.model.precision import Precision


@dataclass
class ShortConvWeights:
    in_proj: Linear  # (3 n_embd, n_embd): the rows of b, then c, then x
    conv_w: np.ndarray  # (n_embd, L) float32
    out_proj: Linear  # (n_embd, n_embd)


def load_shortconv(ld: WeightLoader, prefix: str, n_embd: int, l_cache: int) -> ShortConvWeights:
    """A layer's `shortconv.*` tensors (llama.cpp's LLM_TENSOR_SHORTCONV_*)."""
    return ShortConvWeights(
        in_proj=ld.linear(prefix + "shortconv.in_proj", n_embd, 3 * n_embd),
        conv_w=_values(ld, prefix + "shortconv.conv.weight", n_embd * l_cache).reshape(n_embd, l_cache),
        out_proj=ld.linear(prefix + "shortconv.out_proj", n_embd, n_embd),
    )


def shortconv_mixer(pr: Precision, sw: ShortConvWeights, h: np.ndarray, batch: Batch, cache: HybridCache,
                    il: int) -> np.ndarray:
    """The mixer over the batch's rows h (T, n_embd), advancing each sequence's conv state of
    layer il (and copying it into the checkpoints the cache plans within this batch)."""
    E = h.shape[1]
    bcx = pr.linear(h, sw.in_proj)  # (T, 3E)
    bx = bcx[:, :E] * bcx[:, 2 * E:]
    y = np.empty_like(bx)

    def step(rows: np.ndarray | slice) -> None:
        y[rows] = ssm_conv(bx[rows], batch.seq_ids[rows], sw.conv_w, cache.conv[il])

    cache.advance(il, batch.seq_ids, batch.positions, step)
    return pr.linear(np.ascontiguousarray(bcx[:, E:2 * E] * y), sw.out_proj)
