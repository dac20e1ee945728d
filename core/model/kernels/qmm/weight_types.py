"""How each ggml weight type is multiplied: block size, sub-blocks, activation type, min term.

`act` is ggml-cpu's vec_dot_type for the weight (type_traits_cpu): the activation row is
quantized to it once per matmul (core/model/kernels/qmm/acts.py). `min_term`:
  none - y = sum_b d_x * d_w * isum_b
  q8_1 - Q4_1/Q5_1: + m_w * s_x per block (s_x: the Q8_1 block's fp16 d * sum of codes)
  k    - K-quants with mins: - d_x * dmin_w * sum_j m_j * (sum of the activation codes of j)

`qk` is the kernel's block: ggml's block, or for NVFP4, Q1_0 and Q2_0 (whose ggml block holds
several float scales, core/model/kernels/qmm/unpack_split.py) a `split`-th of it; `type_size`
is ggml's block's bytes. `xper` kernel blocks share one activation scale (NVFP4: 16-value
blocks, Q8_0 activation blocks of 32). `outer`: ggml's order for Q1_0 and Q2_0, whose one
weight scale multiplies the block's sum of d_x * isum over its kernel blocks (vec_dot_q1_0_q8_0:
`sumi += d1 * sumi_block`, then `sumf += d0 * sumi`), not each kernel block's term.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from llamacli.core.model.kernels.ggml_types import Q2_0
from llamacli.core.model.kernels.qmm import unpack as U

QT = GGMLQuantizationType

ACT_Q8_0, ACT_Q8_1, ACT_Q8_K = 0, 1, 2
MIN_NONE, MIN_Q8_1, MIN_K = 0, 1, 2


@dataclass(frozen=True)
class QFormat:
    qtype: GGMLQuantizationType
    kind: int  # unpack id (core/model/kernels/qmm/unpack.py)
    qk: int  # values per block
    type_size: int  # bytes per ggml block
    nsub: int  # sub-blocks with their own integer scale
    act: int
    min_term: int
    split: int = 1  # kernel blocks per ggml block
    xper: int = 1  # kernel blocks per activation scale
    outer: bool = False  # the weight scale applied per ggml block, after its kernel blocks' sum

    @property
    def sub(self) -> int:
        return self.qk // self.nsub


def _f(qt: GGMLQuantizationType, kind: int, nsub: int, act: int, min_term: int, split: int = 1, xper: int = 1,
       outer: bool = False) -> QFormat:
    qk, ts = GGML_QUANT_SIZES[qt]
    return QFormat(qt, kind, qk // split, ts, nsub, act, min_term, split, xper, outer)


QUANT_FORMATS: dict[GGMLQuantizationType, QFormat] = {
    QT.Q4_0: _f(QT.Q4_0, U.Q4_0, 1, ACT_Q8_0, MIN_NONE),
    QT.Q4_1: _f(QT.Q4_1, U.Q4_1, 1, ACT_Q8_1, MIN_Q8_1),
    QT.Q5_0: _f(QT.Q5_0, U.Q5_0, 1, ACT_Q8_0, MIN_NONE),
    QT.Q5_1: _f(QT.Q5_1, U.Q5_1, 1, ACT_Q8_1, MIN_Q8_1),
    QT.Q8_0: _f(QT.Q8_0, U.Q8_0, 1, ACT_Q8_0, MIN_NONE),
    QT.IQ4_NL: _f(QT.IQ4_NL, U.IQ4_NL, 1, ACT_Q8_0, MIN_NONE),
    QT.Q2_K: _f(QT.Q2_K, U.Q2_K, 16, ACT_Q8_K, MIN_K),
    QT.Q3_K: _f(QT.Q3_K, U.Q3_K, 16, ACT_Q8_K, MIN_NONE),
    QT.Q4_K: _f(QT.Q4_K, U.Q4_K, 8, ACT_Q8_K, MIN_K),
    QT.Q5_K: _f(QT.Q5_K, U.Q5_K, 8, ACT_Q8_K, MIN_K),
    QT.Q6_K: _f(QT.Q6_K, U.Q6_K, 16, ACT_Q8_K, MIN_NONE),
    QT.IQ4_XS: _f(QT.IQ4_XS, U.IQ4_XS, 8, ACT_Q8_K, MIN_NONE),
    # the low-bit types (core/model/kernels/qmm/unpack_lowbit.py): nsub is the scale's granularity
    QT.MXFP4: _f(QT.MXFP4, U.MXFP4, 1, ACT_Q8_0, MIN_NONE),
    QT.TQ1_0: _f(QT.TQ1_0, U.TQ1_0, 1, ACT_Q8_K, MIN_NONE),
    QT.TQ2_0: _f(QT.TQ2_0, U.TQ2_0, 1, ACT_Q8_K, MIN_NONE),
    QT.IQ2_XXS: _f(QT.IQ2_XXS, U.IQ2_XXS, 8, ACT_Q8_K, MIN_NONE),
    QT.IQ2_XS: _f(QT.IQ2_XS, U.IQ2_XS, 16, ACT_Q8_K, MIN_NONE),
    QT.IQ2_S: _f(QT.IQ2_S, U.IQ2_S, 16, ACT_Q8_K, MIN_NONE),
    QT.IQ3_XXS: _f(QT.IQ3_XXS, U.IQ3_XXS, 8, ACT_Q8_K, MIN_NONE),
    QT.IQ3_S: _f(QT.IQ3_S, U.IQ3_S, 8, ACT_Q8_K, MIN_NONE),
    QT.IQ1_S: _f(QT.IQ1_S, U.IQ1_S, 8, ACT_Q8_K, MIN_NONE),
    QT.IQ1_M: _f(QT.IQ1_M, U.IQ1_M, 16, ACT_Q8_K, MIN_NONE),
    # split blocks (core/model/kernels/qmm/unpack_split.py)
    QT.NVFP4: _f(QT.NVFP4, U.NVFP4, 1, ACT_Q8_0, MIN_NONE, split=4, xper=2),
    QT.Q1_0: _f(QT.Q1_0, U.Q1_0, 1, ACT_Q8_0, MIN_NONE, split=4, outer=True),
    Q2_0: _f(Q2_0, U.Q2_0, 1, ACT_Q8_0, MIN_NONE, split=2, outer=True),
}

# Float weights: the activation is rounded to the weight's type (F16/BF16) or used as is (F32).
FLOAT_F32, FLOAT_F16, FLOAT_BF16 = 0, 1, 2
FLOAT_FORMATS: dict[GGMLQuantizationType, int] = {QT.F32: FLOAT_F32, QT.F16: FLOAT_F16, QT.BF16: FLOAT_BF16}
