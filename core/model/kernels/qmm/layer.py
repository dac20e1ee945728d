"""Decoding tokens' transformer layer in one compiled call (the ggml numerics): one sequence's
token, or T tokens of T different sequences (an aggregate decode step).

A decode step ran about 25 Python-level operations per layer (norms, activation quantization,
matmuls, rope, K/V's f16 rounding, the cache write, attention, GELU), each a few microseconds of
interpreter and dispatch around a few microseconds of work: ~150 us a layer, ~2.7 ms of the demo
model's 18-layer step on one thread, a quarter of the step on two (its kernels run on both
threads, the glue on one). `decode_layer` runs the same compiled kernels on the same values in
the same order from one call, so its results are the same bits as the operations one by one
(tests/test_decode_step.py). The caller (core/model/families/decode_step.py) plans each layer's
arguments once: tuples of arrays and the matmuls' work items, the empty array standing for an
absent norm or bias.

Shapes: E = n_embd, H / Hkv query / KV heads, D / Dv their sizes, F = n_ff; x (T, E) is the
residual stream, updated in place, one row per decoding sequence; rows (T, 3) gives each row's
sequence, position and first attended key (ROW_SEQ ..). Every step is row by row (norms,
activation quantization, the matmuls' rows, rope, the cache write) or sequence by sequence
(attention: a row's result depends on its own query and keys only, attention.py), so a row's
bits are those of the same token decoded alone or in `DecoderModel.forward`'s batched operations.
With several rows the sequences' attention runs in a parallel loop (`_attend_rows`).

A matmul group (`MatCall`) is one `mm_decode_many` call: the matrices that read the same
quantized activation the same way (Q/K/V or gate/up, when their types allow), as
core/model/kernels/qmm/matrix.py's `matmul_many` forms them:
  (fns (3,) type function addresses, ws (3 weight matrices, the last repeated), tasks (n, 3),
   act (activation type), nsub and sub16 (the code sums per sub-block it needs: nsub = 0 none;
   else sums of sub16 groups of 16, or of each block for a packed Q4_0 / Q5_0), slots (3,) which
   outputs of the projection, macs)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.core import cgutils, types

from llamacli.core.model.kernels.ops import _rms_rows, _rope_fma
from llamacli.core.model.kernels.qmm.acts import _q8_0, _q8_k
from llamacli.core.model.kernels.qmm.attention import _attend
from llamacli.core.model.kernels.qmm.decode import mm_decode_many
from llamacli.core.model.kernels.qmm.simd import kernel_intrinsic, round_f16
from llamacli.core.model.kernels.qmm.tables import gelu_lookup
from llamacli.core.model.kernels.qmm.threads import start
from llamacli.core.model.kernels.qmm.weight_types import ACT_Q8_1, ACT_Q8_K

start()  # the threading layer's set_num_threads symbol, which `set_num_threads` calls

# Indices into the per-layer norm and bias tuples (RESIDUAL_SCALE: (1,) the factor of each
# block's output as it joins the residual stream, Granite's residual_scale; empty: none).
ATTN_NORM, Q_NORM, K_NORM, POST_ATTN_NORM, FFN_NORM, POST_FFN_NORM, RESIDUAL_SCALE = range(7)
BQ, BK, BV, BO, BGATE, BUP, BDOWN = range(7)
# Indices into the per-layer integer parameters.
N_HEAD, N_HEAD_KV, HEAD_DIM, HEAD_DIM_V, N_FF, ROPE_HALF, ROPE_NEOX, SEQ, POS, K_START, V_FROM_K, V_NORM = range(12)
# Columns of the per-row step parameters (rows (T, 3)).
ROW_SEQ, ROW_POS, ROW_K_START = range(3)


@kernel_intrinsic
def set_num_threads(typingctx: Any, n: Any) -> Any:
    """numba.set_num_threads(n) (the calling thread's count for the parallel loops), called by
    its symbol: numba's own jitted form calls a ctypes pointer, which keeps a function out of
    the disk cache. The symbol is numba's threading layer's, registered when the layer starts
    (threads.start, at this module's import)."""
    sig = types.void(n)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i32]), "set_num_threads")
        builder.call(fn, [builder.trunc(args[0], i32) if args[0].type.width > 32 else args[0]])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def _rms(x, w, eps):  # type: ignore[no-untyped-def]
    """rms_norm over the rows of x (R, n) (ops.rms_norm), times w unless w is empty."""
    y = np.empty_like(x)
    _rms_rows(x, w, w.shape[0] > 0, eps, y)
    return y


@njit(cache=True, nogil=True)
def _quantize(h, act, nsub, sub16):  # type: ignore[no-untyped-def]
    """quantize_acts(h, act) for h (T, K), and matrix._sub_sums: codes, d, Q8_1 sums (or (0, 0)),
    code sums per sub-block (T, nb, nsub) (Q8_K: sums of sub16 groups of 16; the others: nsub
    1, each block's sum) or (0, 0, 0) for nsub 0."""
    t, k = h.shape
    codes = np.empty((t, k), dtype=np.int8)
    xb = np.zeros((0, 0, 0), dtype=np.int32)
    if act == ACT_Q8_K:
        d = np.empty((t, k // 256), dtype=np.float32)
        bsums = np.empty((t, k // 16), dtype=np.int32)
        _q8_k(h, codes, d, bsums)
        if nsub > 0:
            nb = k // 256
            xb = np.zeros((t, nb, nsub), dtype=np.int32)
            for r in range(t):
                for b in range(nb):
                    for j in range(nsub):
                        acc = np.int32(0)
                        for g in range(sub16):
                            acc += bsums[r, (b * nsub + j) * sub16 + g]
                        xb[r, b, j] = acc
        return codes, d, np.zeros((0, 0), dtype=np.float32), xb
    d = np.empty((t, k // 32), dtype=np.float32)
    s = np.empty((t, k // 32), dtype=np.float32) if act == ACT_Q8_1 else np.zeros((0, 0), dtype=np.float32)
    _q8_0(h, codes, d, s, act == ACT_Q8_1)
    if nsub > 0:  # packed Q4_0 / Q5_0: the codes' sum per block (matrix._sub_sums)
        xb = np.zeros((t, k // 32, 1), dtype=np.int32)
        for r in range(t):
            for b in range(k // 32):
                acc = np.int32(0)
                for i in range(32):
                    acc += np.int32(codes[r, 32 * b + i])
                xb[r, b, 0] = acc
    return codes, d, s, xb


@njit(cache=True, nogil=True)
def _project(h, calls, outs, biases, serial, want):  # type: ignore[no-untyped-def]
    """outs[i] = h @ W_i.T (+ biases[i]) for the matrices of `calls` (module docstring), h (T, K);
    each call on `want` threads when it has at least `serial` multiply-adds (its plan's per row,
    times T), else on this one (threads.configure). False when a work item failed."""
    for c in calls:
        fns, ws, tasks, act, nsub, sub16, slots, macs = c
        set_num_threads(want if macs * h.shape[0] >= serial else 1)
        xc, xd, xs, xb = _quantize(h, act, nsub, sub16)
        ys = (outs[slots[0]], outs[slots[1]], outs[slots[2]])
        if mm_decode_many(fns, ws, xc, xd, xs, xb, ys, tasks) != tasks.shape[0]:
            return False
    for i in range(len(outs)):
        b = biases[i]
        if b.shape[0] > 0:
            y = outs[i]
            for t in range(y.shape[0]):
                for j in range(y.shape[1]):
                    y[t, j] += b[j]
    return True


@njit(cache=True, nogil=True)
def _add_block(x, y, post_norm, scale, eps):  # type: ignore[no-untyped-def]
    """x += post_norm(y) (or y), times scale[0] where scale (1,) is given (ggml_scale, then
    ggml_add: two float32 roundings): the residual after a block."""
    if post_norm.shape[0] > 0:
        y = _rms(y, post_norm, eps)
    if scale.shape[0] > 0:
        y = y * scale[0]
    for t in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[t, j] = x[t, j] + y[t, j]


@njit(cache=True, nogil=True, inline="always")
def _attend_row(q3, kc, vc, rows, t, attn_scale, cap, out):  # type: ignore[no-untyped-def]
    """Row t's attention: its query q3[t] (H, D) over its sequence's keys ROW_K_START..ROW_POS
    of the cache kc, vc (n_seq, Hkv, n_ctx, D), into out[t] (H, Dv)."""
    f32 = np.float32
    H, D, Dv = q3.shape[1], q3.shape[2], out.shape[2]
    seq, pos, k_start = rows[t, ROW_SEQ], rows[t, ROW_POS], rows[t, ROW_K_START]
    _attend(q3[t].reshape((1, H, 1, D)), kc[seq : seq + 1, :, k_start : pos + 1], vc[seq : seq + 1, :, k_start : pos + 1],
            np.zeros((1, 1, pos + 1 - k_start), dtype=f32), attn_scale, cap, np.zeros(0, dtype=f32), out[t].reshape((1, H, 1, Dv)))


@njit(cache=True, nogil=True, parallel=True)
def _attend_rows(q3, kc, vc, rows, attn_scale, cap, out):  # type: ignore[no-untyped-def]
    """`_attend_row` for every row, the rows (sequences) side by side on the kernels' threads."""
    for t in prange(rows.shape[0]):
        _attend_row(q3, kc, vc, rows, t, attn_scale, cap, out)


@njit(cache=True, nogil=True, inline="always")  # inlined into its callers: compiled once there
def attend_rows(x, norms, biases, qkv_calls, o_calls, ints, rows, eps, q_scale, attn_scale, cap, cos, sin, kc, vc,  # type: ignore[no-untyped-def]
                serial, want):
    """The layer's attention: x += post_norm(wo(attention(attn_norm(x)))) (times the residual
    scale where given) in place, x (T, E).
    kc, vc: the layer's cache (n_seq, Hkv, n_ctx, D) where row t's K, V are written at its
    (ROW_SEQ, ROW_POS); its keys ROW_K_START..ROW_POS are attended; cos, sin (T, half) its
    rope; q_scale > 0: Q is multiplied by it before attention (and attn_scale is then 1).
    False when a work item failed."""
    H, Hkv, D, Dv = ints[N_HEAD], ints[N_HEAD_KV], ints[HEAD_DIM], ints[HEAD_DIM_V]
    T = x.shape[0]
    f32 = np.float32
    h = _rms(x, norms[ATTN_NORM], eps)
    q = np.empty((T, H * D), dtype=f32)
    k = np.empty((T, Hkv * D), dtype=f32)
    v = np.empty((T, Hkv * Dv), dtype=f32)
    if not _project(h, qkv_calls, (q, k, v), (biases[BQ], biases[BK], biases[BV]), serial, want):
        return False
    if ints[V_FROM_K] != 0:  # no V matrix (gemma4): V is K's projection, before K's norm and rope
        v[:, :] = k
    if ints[V_NORM] != 0:  # V RMS-normed per head without a weight (gemma4)
        v = _rms(v.reshape((T * Hkv, Dv)), np.zeros(0, dtype=f32), eps).reshape((T, Hkv * Dv))
    q3 = q.reshape((T, H, D))
    k3 = k.reshape((T, Hkv, D))
    nq, nk = norms[Q_NORM].shape[0], norms[K_NORM].shape[0]
    if nq > 0:  # per head (a norm of D), or over each row's whole q / k (olmoe: H * D, Hkv * D)
        q3 = _rms(q.reshape((T * H * D // nq, nq)), norms[Q_NORM], eps).reshape((T, H, D))
        k3 = _rms(k.reshape((T * Hkv * D // nk, nk)), norms[K_NORM], eps).reshape((T, Hkv, D))
    _rope_fma(q3, cos, sin, ints[ROPE_HALF], ints[ROPE_NEOX] != 0)
    _rope_fma(k3, cos, sin, ints[ROPE_HALF], ints[ROPE_NEOX] != 0)
    if q_scale > 0:
        for t in range(T):
            for i in range(H):
                for j in range(D):
                    q3[t, i, j] = q3[t, i, j] * q_scale
    keys = 0
    for t in range(T):  # the cache holds K and V rounded to f16
        seq, pos = rows[t, ROW_SEQ], rows[t, ROW_POS]
        keys += pos + 1 - rows[t, ROW_K_START]
        for i in range(Hkv):
            for j in range(D):
                kc[seq, i, pos, j] = round_f16(k3[t, i, j])
            for j in range(Dv):
                vc[seq, i, pos, j] = round_f16(v[t, i * Dv + j])
    out = np.empty((T, H, Dv), dtype=f32)
    if T == 1:
        _attend_row(q3, kc, vc, rows, 0, attn_scale, cap, out)
    else:
        set_num_threads(want if keys * H * (D + Dv) >= serial else 1)
        _attend_rows(q3, kc, vc, rows, attn_scale, cap, out)
    o = np.empty((T, x.shape[1]), dtype=f32)
    if not _project(out.reshape((T, H * Dv)), o_calls, (o,), (biases[BO],), serial, want):
        return False
    _add_block(x, o, norms[POST_ATTN_NORM], norms[RESIDUAL_SCALE], eps)
    return True


@njit(cache=True, nogil=True, inline="always")
def one_row(ints):  # type: ignore[no-untyped-def]
    """The rows (1, 3) of one token from a layer's ints (SEQ, POS, K_START)."""
    rows = np.empty((1, 3), dtype=np.int64)
    rows[0, ROW_SEQ], rows[0, ROW_POS], rows[0, ROW_K_START] = ints[SEQ], ints[POS], ints[K_START]
    return rows


@njit(cache=True, nogil=True, inline="always")  # inlined into its callers: compiled once there
def attend(x, norms, biases, qkv_calls, o_calls, ints, eps, q_scale, attn_scale, cap, cos, sin, kc, vc,  # type: ignore[no-untyped-def]
           serial, want):
    """`attend_rows` for one token, x (1, E), at the ints' (SEQ, POS), its keys K_START..POS."""
    return attend_rows(x, norms, biases, qkv_calls, o_calls, ints, one_row(ints), eps, q_scale, attn_scale, cap, cos, sin,
                       kc, vc, serial, want)


@njit(cache=True, nogil=True, inline="always")  # inlined into decode_layer: compiled once there
def attention_block(x, norms, biases, qkv_calls, o_calls, up_calls, ints, rows, eps, q_scale, attn_scale, cap,  # type: ignore[no-untyped-def]
                    cos, sin, kc, vc, serial, want):
    """The layer up to its FFN's activation: `attend_rows`, then (gate, up) (T, F) of
    ffn_norm(x). Returns (ok, gate, up)."""
    f32 = np.float32
    g = np.empty((x.shape[0], ints[N_FF]), dtype=f32)
    u = np.empty((x.shape[0], ints[N_FF]), dtype=f32)
    if not attend_rows(x, norms, biases, qkv_calls, o_calls, ints, rows, eps, q_scale, attn_scale, cap, cos, sin, kc, vc,
                       serial, want):
        return False, g, u
    h = _rms(x, norms[FFN_NORM], eps)
    if not _project(h, up_calls, (g, u), (biases[BGATE], biases[BUP]), serial, want):
        return False, g, u
    return True, g, u


@njit(cache=True, nogil=True, inline="always")
def ffn_out(x, act, norms, biases, down_calls, eps, serial, want):  # type: ignore[no-untyped-def]
    """x += post_ffn_norm(down(act)) in place, act (T, F) the gated activation. False when a
    work item failed."""
    y = np.empty(x.shape, dtype=np.float32)
    if not _project(act, down_calls, (y,), (biases[BDOWN],), serial, want):
        return False
    _add_block(x, y, norms[POST_FFN_NORM], norms[RESIDUAL_SCALE], eps)
    return True


@njit(cache=True, nogil=True)
def decode_layer(x, norms, biases, qkv_calls, o_calls, up_calls, down_calls, ints, rows, eps, q_scale,  # type: ignore[no-untyped-def]
                 attn_scale, cap, cos, sin, kc, vc, gelu_table, serial, want):
    """The whole layer for a GELU-gated FFN (ggml's f16 table): `attention_block`, then
    gelu(gate) * up (float32), then `ffn_out`. False when a work item failed."""
    ok, g, u = attention_block(x, norms, biases, qkv_calls, o_calls, up_calls, ints, rows, eps, q_scale, attn_scale, cap,
                               cos, sin, kc, vc, serial, want)
    if not ok:
        return False
    a = np.empty_like(g)
    gelu_lookup(g.reshape(-1), gelu_table, a.reshape(-1))
    for t in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[t, j] = a[t, j] * u[t, j]
    return ffn_out(x, a, norms, biases, down_calls, eps, serial, want)
