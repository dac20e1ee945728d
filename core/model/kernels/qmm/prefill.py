"""The token-tiled kernel: many activation rows against a matrix of a type without a 16-row
kernel (Q2_K, Q3_K, IQ4_NL, IQ4_XS), compiled once per weight type
(core/model/kernels/qmm/per_type.py).

The weight row is unpacked once to int16 codes (scales folded in) and multiplied with the
activation codes of 16 or 64 tokens at a time in 32-bit integer lanes (`simd.tile_dot`:
vpmaddwd / vpdpwssd), so `isum` is the same exact integer as the decode kernel's; the
per-block float terms are computed for a whole tile at once (vectorised over tokens), with the
same operations as block_dots.term.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from numba import njit, prange
from numba.core import types
from numba.np.numpy_support import carray

from llamacli.core.model.kernels.qmm import per_type
from llamacli.core.model.kernels.qmm.per_type import CLayout
from llamacli.core.model.kernels.qmm.simd import TILE, tile_dot16, tile_dot64

ROWS_PER_TASK = 16  # weight rows per parallel work item

# Bound per type when `prefill_rows` is compiled (per_type.TypeCode.globals); these
# module-level values are never compiled.
QK = NSUB = MIN_TERM = 0
XPER = 1  # kernel blocks per activation scale (weight_types.QFormat.xper)
OUTER = 0  # Q1_0, Q2_0: kernel blocks per weight scale applied after their sum (QFormat.outer)
unpack_row: Any = None

# w (N, row bytes), x16 (K * tp,), xd (nb, tp), xs (nb, tp) or empty, xb (nb, nsub, tp) or
# empty, out (T, N); then tp, tile and the first and end row.
LAYOUT = CLayout(((types.uint8, 2), (types.int16, 1), (types.float32, 2), (types.float32, 2), (types.int32, 3), (types.float32, 2)), 4)


def prefill_rows(w_p, w_n, w_k, x16_p, x16_n, xd_p, xd_nb, xd_tp, xs_p, xs_nb, xs_tp, xb_p, xb_nb, xb_ns, xb_tp,  # type: ignore[no-untyped-def]
                 out_p, out_t, out_n, tp, tile, r0, r1):
    """Rows r0..r1 of out (T, N) = x @ W.T for W (N, row bytes) of one type, with the
    activations laid out token-fastest: x16 int16 codes (K / 2, tp, 2) (see simd.tile_dot64),
    xd (nb, tp) scales, xs (nb, tp) Q8_1 sums, xb (nb, nsub, tp) code sums per sub-block; tp a
    multiple of `tile` (16 or 64; padding tokens are zero)."""
    w = carray(w_p, (w_n, w_k))
    x16 = carray(x16_p, (x16_n,))
    xd = carray(xd_p, (xd_nb, xd_tp))
    xs = carray(xs_p, (xs_nb, xs_tp))
    xb = carray(xb_p, (xb_nb, xb_ns, xb_tp))
    out = carray(out_p, (out_t, out_n))
    k = x16_n // tp
    t_rows = out_t
    nb = k // QK
    wsc = np.empty(k, dtype=np.int16)
    sc = np.ones((nb, NSUB), dtype=np.int32)
    mn = np.zeros((nb, NSUB), dtype=np.int32)
    ds = np.empty(nb, dtype=np.float32)
    dms = np.empty(nb, dtype=np.float32)
    isum = np.empty(TILE, dtype=np.int32)
    msum = np.empty(TILE, dtype=np.int32)
    acc = np.empty(TILE, dtype=np.float32)
    inner = np.zeros(TILE, dtype=np.float32)
    for r in range(r0, r1):
        unpack_row(w[r], nb, wsc, sc, mn, ds, dms)
        for t0 in range(0, tp, tile):
            acc[:] = 0.0
            for b in range(nb):
                if tile == 16:
                    tile_dot16(wsc, b * QK, QK // 2, x16, (b * (QK // 2) * tp + t0) * 2, tp, isum)
                else:
                    tile_dot64(wsc, b * QK, QK // 2, x16, (b * (QK // 2) * tp + t0) * 2, tp, isum)
                d = ds[b]
                dmin = dms[b]
                xdb = xd[b // XPER, t0 : t0 + tile]
                if MIN_TERM == 2:
                    msum[:] = 0
                    for j in range(NSUB):
                        mj = mn[b, j]
                        xbj = xb[b, j, t0 : t0 + tile]
                        for tt in range(tile):
                            msum[tt] += mj * xbj[tt]
                    for tt in range(tile):
                        acc[tt] += (xdb[tt] * d) * np.float32(isum[tt]) - (xdb[tt] * dmin) * np.float32(msum[tt])
                elif MIN_TERM == 1:
                    xsb = xs[b, t0 : t0 + tile]
                    for tt in range(tile):
                        acc[tt] += (xdb[tt] * d) * np.float32(isum[tt]) + dmin * xsb[tt]
                elif OUTER:  # ggml's order: d_w * sum over the ggml block of d_x * isum
                    for tt in range(tile):
                        inner[tt] += xdb[tt] * np.float32(isum[tt])
                    if b % OUTER == OUTER - 1:
                        for tt in range(tile):
                            acc[tt] += d * inner[tt]
                            inner[tt] = 0.0
                else:
                    for tt in range(tile):
                        acc[tt] += (xdb[tt] * d) * np.float32(isum[tt])
            for tt in range(min(tile, t_rows - t0)):
                out[t0 + tt, r] = acc[tt]
    return 1


def type_function(kind: int) -> Any:
    """The token-tiled function of weight type `kind` (compiled or loaded now, once per process)."""
    return per_type.type_function(prefill_rows, LAYOUT, kind)


def cached(kind: int) -> bool:
    return per_type.cached(prefill_rows, kind)


@lru_cache(maxsize=64)
def address(kind: int) -> int:
    return int(type_function(kind).address)


_call = per_type.caller(LAYOUT)


@njit(cache=True, nogil=True, parallel=True)
def mm_prefill(fn, w, x16, tp, tile, xd, xs, xb, out):  # type: ignore[no-untyped-def]
    """out (T, N) = x @ W.T by the type function at address fn (`prefill_rows`), ROWS_PER_TASK
    weight rows per parallel work item. Returns the number of work items done."""
    n = w.shape[0]
    done = 0
    for task in prange((n + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        done += _call(fn, w, x16, xd, xs, xb, out, tp, tile, task * ROWS_PER_TASK, min(n, (task + 1) * ROWS_PER_TASK))
    return done
