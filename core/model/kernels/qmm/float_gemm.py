"""The F16 and BF16 weight matmul (any number of activation rows): a register-tiled GEMM with
the float kernel's own summation order (core/model/kernels/qmm/block_dots.py, `mm_float`), so
that a row's result is the same bits whichever of the two computes it.

    out[t, n] = reduce(lanes),  lanes[l] = sum over i of x[t, 16 i + l] * w[n, 16 i + l]

each of the 16 lanes summed for i = 0, 1, ... in order (float32, one rounding per addition),
then the lanes added pairwise (l + 8, + 4, + 2, + 1), as `mm_float` does. x holds values of the
weight's type (the activation rounded to f16 or bf16 by `prepare`), so every product is exact
in float32 (11 x 11 or 8 x 8 significant bits) and the fused multiply-add gives the same bits
as a multiply then an add.

The tile (`lane_tile`): R activation rows times V weight rows, R * V accumulators of 16
float32 lanes kept in vector registers; each step over 16 values of K loads R activation
vectors and V weight vectors (16 f16 or bf16 values each, widened to float32 once per step and
used by R rows: vcvtph2ps with F16C), then R * V fused multiply-adds. The weights are read in
place (the file's bytes). Work items are blocks of NB weight rows (threaded with numba's pool,
core/model/kernels/qmm/threads.py); each runs over every activation row in groups of R, the
block's weights (NB rows) staying in the L2 cache while R rows of activations stream past.

The tile shape follows the vector registers of the machine the code is generated for (4 x 4
with AVX-512's 32 registers, 2 x 2 with AVX2's 16) and does not change any result.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.core import types

from llamacli.core.model.kernels.qmm.fsimd import fma_loop, pairwise_sum
from llamacli.core.model.kernels.qmm.isa import features
from llamacli.core.model.kernels.qmm.simd import kernel_intrinsic, round_f16

LANES = 16
# Weight rows per work item: for many activation rows, 64 (64 x K f16 stays in L2, each row of
# activations read from memory is used 64 times); for few, 16 (more items for the threads).
NB_MANY, NB_FEW, FEW_ROWS = 64, 16, 64
WTYPE_F16, WTYPE_BF16 = 1, 2  # as block_dots.mm_float's ftype


def _tile_shape(context: Any) -> tuple[int, int]:
    """(R, V) for the machine `context` generates code for: 4 x 4 (16 accumulators) with
    AVX-512's 32 vector registers, 2 x 2 with 16 (a 16-lane vector is two of AVX2's)."""
    return (4, 4) if "+avx512f" in features(context) else (2, 2)


@kernel_intrinsic
def tile_shape(typingctx: Any) -> Any:
    """(R, V): the largest tile `lane_tile` takes on this machine (see `_tile_shape`)."""
    sig = types.UniTuple(types.int64, 2)()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        r, v = _tile_shape(context)
        i64 = ir.IntType(64)
        return context.make_tuple(builder, signature.return_type, [ir.Constant(i64, r), ir.Constant(i64, v)])

    return sig, codegen


@kernel_intrinsic
def lane_tile(
    typingctx: Any, x: Any, xo: Any, xrs: Any, w: Any, wo: Any, wrs: Any, nk: Any, out: Any, oo: Any, ors: Any,
    rows: Any, nvec: Any, wtype: Any,
) -> Any:
    """out[oo + r * ors + v] = the module's sum for activation row r (float32 x from element
    xo + r * xrs) and weight row v (16-bit values of type wtype in the uint8 array w from byte
    wo + v * wrs), over nk values (a multiple of 16); r < rows, v < nvec, with 1 <= rows <= R and
    1 <= nvec <= V of `tile_shape` (each shape is its own register-tiled loop)."""
    sig = types.void(x, xo, xrs, w, wo, wrs, nk, out, oo, ors, rows, nvec, wtype)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        sa = signature.args
        ptrs = [context.make_array(sa[i])(context, builder, args[i]).data for i in (0, 3, 7)]
        ints = [context.cast(builder, args[i], sa[i], types.int64) for i in (1, 2, 4, 5, 6, 8, 9, 10, 11, 12)]
        big_r, big_v = _tile_shape(context)
        rows_, nvec_, wtype_ = ints[7:]
        key = builder.add(builder.mul(builder.add(builder.mul(wtype_, ir.Constant(i64, 8)), rows_), ir.Constant(i64, 8)), nvec_)
        fn = builder.function
        end = fn.append_basic_block("lane_tile_end")
        sw = builder.switch(key, end)
        for wt in (WTYPE_F16, WTYPE_BF16):
            for r in range(1, big_r + 1):
                for v in range(1, big_v + 1):
                    blk = fn.append_basic_block(f"lane_tile_{wt}_{r}x{v}")
                    sw.add_case(ir.Constant(i64, (wt * 8 + r) * 8 + v), blk)
                    builder.position_at_end(blk)
                    _emit_tile(context, builder, ptrs, ints[:7], r, v, wt)
                    builder.branch(end)
        builder.position_at_end(end)
        return context.get_dummy_value()

    return sig, codegen


def _emit_tile(context: Any, builder: Any, ptrs: list[Any], ints: list[Any], rows: int, nvec: int, wtype: int) -> None:
    """The loop of one tile shape (see `lane_tile`), at the builder's position."""
    f32, i64, i32 = ir.FloatType(), ir.IntType(64), ir.IntType(32)
    vt = ir.VectorType(f32, LANES)
    px, pw, po = ptrs
    xo_, xrs_, wo_, wrs_, nk_, oo_, ors_ = ints
    xrow = [builder.gep(px, [builder.add(xo_, builder.mul(ir.Constant(i64, r), xrs_))]) for r in range(rows)]
    wrow = [builder.gep(pw, [builder.add(wo_, builder.mul(ir.Constant(i64, v), wrs_))]) for v in range(nvec)]

    def widen(p: Any) -> Any:  # 16 f16 or bf16 values at byte pointer p -> <16 x float>
        if wtype == WTYPE_F16:
            h = builder.load(builder.bitcast(p, ir.VectorType(ir.HalfType(), LANES).as_pointer()), align=1)
            return builder.fpext(h, vt)
        u = builder.load(builder.bitcast(p, ir.VectorType(ir.IntType(16), LANES).as_pointer()), align=1)
        b = builder.shl(builder.zext(u, ir.VectorType(i32, LANES)), ir.Constant(ir.VectorType(i32, LANES), [16] * LANES))
        return builder.bitcast(b, vt)

    def operands(k: Any) -> tuple[list[Any], list[Any]]:  # x's rows at k, the weight rows' 16 values at k
        xv = [builder.load(builder.bitcast(builder.gep(xrow[r], [k]), vt.as_pointer()), align=4) for r in range(rows)]
        return xv, [widen(builder.gep(wrow[v], [builder.add(k, k)])) for v in range(nvec)]

    res = fma_loop(builder, nk_, LANES, rows, nvec, operands, "lane_tile")
    for r in range(rows):
        orow = builder.gep(po, [builder.add(oo_, builder.mul(ir.Constant(i64, r), ors_))])
        for v in range(nvec):
            builder.store(pairwise_sum(builder, res[r][v]), builder.gep(orow, [ir.Constant(i64, v)]), align=4)


@njit(cache=True, nogil=True, parallel=True)
def _mm_lanes(w, wtype, x, out, nb):  # type: ignore[no-untyped-def]
    """out (T, N) = x (T, K) @ W.T; w (N, 2 K) uint8 (the weight rows' bytes), x (T, K) float32
    with K a multiple of 16, both C-contiguous; nb weight rows per work item."""
    n = w.shape[0]
    t_rows, k = x.shape
    wrs = w.shape[1]
    big_r, big_v = tile_shape()
    wf, xf, of = w.reshape(-1), x.reshape(-1), out.reshape(-1)
    for task in prange((n + nb - 1) // nb):
        a, b = task * nb, min(n, (task + 1) * nb)
        for t in range(0, t_rows, big_r):
            r = min(big_r, t_rows - t)
            for c in range(a, b, big_v):
                lane_tile(xf, t * k, k, wf, c * wrs, wrs, k, of, t * n + c, n, r, min(big_v, b - c), wtype)


@njit(cache=True, nogil=True)
def _round_f16(x, out):  # type: ignore[no-untyped-def]
    for i in range(x.shape[0]):
        out[i] = round_f16(x[i])


def round_to_f16(x: np.ndarray) -> np.ndarray:
    """x (float32) rounded to fp16 and back, compiled (F16C's conversions, sixteen at a time):
    the values of numerics.round_f16."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    _round_f16(x.reshape(-1), out.reshape(-1))
    return out


def supports(ftype: int, k: int) -> bool:
    """Whether `mm_lanes` takes weights of block_dots' float type `ftype` with rows of k values."""
    return ftype in (WTYPE_F16, WTYPE_BF16) and k % LANES == 0 and k > 0


def mm_lanes(w: np.ndarray, ftype: int, x: np.ndarray, out: np.ndarray) -> None:
    """out (T, N) = x (T, K) @ W.T for F16/BF16 weights w (N, 2 K) uint8 and x (T, K) float32
    holding values of the weight's type (`supports(ftype, K)`): the bits of block_dots.mm_float.
    out: C-contiguous float32 (T, N)."""
    nb = NB_MANY if x.shape[0] >= FEW_ROWS else NB_FEW
    _mm_lanes(np.ascontiguousarray(w), ftype, np.ascontiguousarray(x), out, nb)
