"""ggml's float order for Q8_0 weights: eight lane accumulators per row, summed at the end.

llama.cpp multiplies Q8_0 weights by Q8_0 activations with `ggml_vec_dot_q8_0_q8_0` (one
activation row; ggml-cpu/arch/x86/quants.c, the AVX2 code that the AVX-512 build runs too) or
llamafile's `tinyBLAS_Q0_AVX` (several; llamafile/sgemm.cpp). Both give these bits:

    acc[j] = +0 for the 8 lanes j
    for each block b, in order:
        lane[j] = sum_{i < 4} q_w[4j + i] * q_x[4j + i]         (exact int32)
        acc[j]  = fma(d_w * d_x, float(lane[j]), acc[j])        (one rounding; d_w * d_x exact)
    y = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))

(the last line is `hsum_float_8`). Our kernels follow it for Q8_0 (core/model/kernels/qmm/rows.py,
packed.py, decode.py's rows left over), so a Q8_0 matmul gives llama.cpp's bits; the other
types keep block_dots.py's order. `fma` is the LLVM intrinsic: vfmadd where the target has FMA,
libm's fmaf otherwise (the generic path): the same bits on every CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit

from llamacli.core.model.kernels.qmm.expf import fmaf
from llamacli.core.model.kernels.qmm.isa import const_vec, vec
from llamacli.core.model.kernels.qmm.unpack import f16_at

LANES = 8  # accumulators per row (ggml's __m256)

_I32 = ir.IntType(32)


def fma(builder: Any, a: Any, b: Any, c: Any) -> Any:
    """a * b + c per lane, rounded once (<n x float> operands)."""
    t = a.type
    name = f"llvm.fma.v{t.count}f32"
    fn = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(t, [t, t, t]), name)
    return builder.call(fn, [a, b, c])


def sum_columns(builder: Any, accs: list[Any]) -> Any:
    """accs[j] (j < 8): vectors whose lane r holds row r's accumulator j -> each row's sum in
    hsum_float_8's order (module docstring)."""
    a = accs
    return builder.fadd(builder.fadd(builder.fadd(a[0], a[4]), builder.fadd(a[2], a[6])),
                        builder.fadd(builder.fadd(a[1], a[5]), builder.fadd(a[3], a[7])))


def _pick(builder: Any, v: Any, idx: list[int]) -> Any:
    return builder.shuffle_vector(v, v, const_vec(_I32, idx))


def sum_row_pairs(builder: Any, accs: list[Any]) -> Any:
    """accs[k] (k < 8): <16 x float>, lanes 0-7 row 2k's accumulators 0..7, lanes 8-15 row
    2k + 1's -> <16 x float>, row i's sum in lane i, in hsum_float_8's order."""
    sums = []
    for v in accs:
        m = builder.fadd(_pick(builder, v, [0, 1, 2, 3, 8, 9, 10, 11]), _pick(builder, v, [4, 5, 6, 7, 12, 13, 14, 15]))  # acc[j] + acc[j + 4]
        h = builder.fadd(_pick(builder, m, [0, 1, 4, 5]), _pick(builder, m, [2, 3, 6, 7]))  # (j = 0) + (j = 2), (1) + (3)
        sums.append(builder.fadd(_pick(builder, h, [0, 2]), _pick(builder, h, [1, 3])))  # rows 2k, 2k + 1
    while len(sums) > 1:
        n = sums[0].type.count
        sums = [builder.shuffle_vector(sums[i], sums[i + 1], const_vec(_I32, list(range(2 * n)))) for i in range(0, len(sums), 2)]
    return sums[0]


def pair_scales(builder: Any, dd: Any, k: int) -> Any:
    """<16 x float> rows' d_w * d_x -> rows 2k and 2k + 1's, each over 8 lanes."""
    return _pick(builder, dd, [2 * k] * LANES + [2 * k + 1] * LANES)


def as_float(builder: Any, v: Any) -> Any:
    return builder.sitofp(v, vec(ir.FloatType(), v.type.count))


@njit(cache=True, nogil=True)
def dot_row(wr, xt, xd_t, nb):  # type: ignore[no-untyped-def]
    """One Q8_0 row (bytes: fp16 d, 32 int8 codes per block) . one activation row (xt int8
    codes, xd_t its block scales), in ggml's order (module docstring)."""
    acc = np.zeros(LANES, dtype=np.float32)
    wq = wr.view(np.int8)
    for b in range(nb):
        o = b * 34 + 2
        d = xd_t[b] * f16_at(wr, b * 34)
        for j in range(LANES):
            s = 0
            for i in range(4):
                s += np.int32(wq[o + 4 * j + i]) * np.int32(xt[32 * b + 4 * j + i])
            acc[j] = fmaf(d, np.float32(s), acc[j])
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
