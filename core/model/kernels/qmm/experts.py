"""ggml's `mul_mat_id` compiled: the routed experts' matmuls of a layer in one parallel loop
(`mm_ids`), for a batch (`mul_mat_id`) and for a decoding token's whole mixture-of-experts FFN
in two compiled calls with the routing (`moe_up`, `moe_down`; the ggml numerics, one sequence;
core/model/families/decode_step.py's MOE_LAYERS).

Through the operations one by one (core/model/families/moe.py, `Precision.expert_linears`), a
token's layer ran 2 + 2k matmul calls from Python (k routed experts: gate and up of each, then
down of each), each with its activation rounding, work items and thread setting, plus the router
in NumPy. Here `moe_up` runs the layer's attention (layer.py's `attend`), the FFN norm, the router
(the float matmul, ggml's soft max, top k, the weights), one quantization of the normed row, and
gate and up of all k experts as one loop over their rows; `moe_down` rounds the k activations
once, runs every expert's down matrix in one loop and adds the weighted outputs in slot order to
the residual. The gated activation (silu(gate) * up, in NumPy as `Precision.silu`) is computed
between them. Each row is the same kernel call on the same values as the path one by one, so the
step gives the same bits (tests/test_decode_step.py).

An expert tensor is one matrix (n_expert * n_out, row bytes) as stored in the mapped file
(`ExpertLinear.whole`); a work item names the expert's first row in it, so a step reads only the
routed experts' blocks. Shapes: E = n_embd, k = experts per token, F = rows per expert.

For a batch (`Precision.expert_linears`), the (token, slot) pairs are grouped by expert and
their quantized rows gathered in that order, so each expert's rows are one kernel call's rows,
as one matmul per expert gives them: a prompt of P tokens made up to 3 * n_expert matmul calls a
layer from Python (~128 experts with a few rows each), one loop here.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from llamacli.core.model.kernels.qmm import decode, per_type, threads
from llamacli.core.model.kernels.qmm.acts import QActs
from llamacli.core.model.kernels.qmm.block_dots import ROWS_PER_TASK, mm_float
from llamacli.core.model.kernels.qmm.matrix import MANY, MAX_ROWS_PER_TASK, TASKS_PER_CALL, QuantMatrix, _sub_sums
from llamacli.core.model.kernels.qmm.per_type import ROWS16_KINDS
from llamacli.core.model.kernels.qmm.weight_types import QUANT_FORMATS
from llamacli.core.model.kernels.qmm.layer import FFN_NORM, POST_FFN_NORM, RESIDUAL_SCALE, _add_block, _quantize, _rms, attend, set_num_threads
from llamacli.core.model.kernels.qmm.router import softmax_rows, top_k_rows

_call = per_type.caller(decode.LAYOUT)

# Indices into a MoE layer's integer parameters.
# STEP_UP, STEP_DOWN: rows per work item of the gate/up and the down calls (`task_rows`).
N_USED, N_FF_EXP, NORM_WEIGHTS, STEP_UP, STEP_DOWN = range(5)
# ggml_clamp of the weights' sum (moe.py)
_MIN_WEIGHT_SUM = np.float32(6.103515625e-5)


@njit(cache=True, nogil=True, parallel=True)
def mm_ids(fns, ws, xc, xd, xs, xb, outs, tasks):  # type: ignore[no-untyped-def]
    """ggml's mul_mat_id: ws (n_expert * F_i, row bytes) and outs (P, F_i) are tuples as in
    decode.mm_decode_many, the activation rows (xc (P, K) ...) one per output row; tasks (n, 6)
    rows of (matrix i, the expert's first row in ws[i], first and end activation row, first and
    end weight row counted from the expert's first). Returns the number of work items done."""
    done = 0
    for i in prange(tasks.shape[0]):
        mi, base, a, b, r0, r1 = tasks[i, 0], tasks[i, 1], tasks[i, 2], tasks[i, 3], tasks[i, 4], tasks[i, 5]
        done += _call(fns[mi], ws[mi][base : base + r1], xc[a:b], xd[a:b], xs[a:b] if xs.shape[0] > 0 else xs,
                      xb[a:b] if xb.shape[0] > 0 else xb, outs[mi][a:b], r0, r1)
    return done


@njit(cache=True, nogil=True)
def group_tasks(experts, starts, n_mats, n_out, step):  # type: ignore[no-untyped-def]
    """mm_ids's work items: for each group g of activation rows starts[g]..starts[g + 1], all
    routed to expert experts[g], its n_mats matrices in items of `step` rows."""
    per = (n_out + step - 1) // step
    n = experts.shape[0]
    t = np.empty((n * n_mats * per, 6), dtype=np.int64)
    i = 0
    for g in range(n):
        for m in range(n_mats):
            for r in range(0, n_out, step):
                t[i, 0], t[i, 1], t[i, 2], t[i, 3] = m, experts[g] * n_out, starts[g], starts[g + 1]
                t[i, 4], t[i, 5] = r, min(n_out, r + step)
                i += 1
    return t


@njit(cache=True, nogil=True)
def _experts(x, calls, outs, sel, n_out, step, shared_x, serial, want):  # type: ignore[no-untyped-def]
    """outs[slot][j] = x_j @ W_e.T for e = sel[j], for the expert matrices of `calls`
    (layer.py's MatCall, their work items unused: those of the routed experts are made here);
    shared_x: x (1, K) is every slot's row (gate and up), else x (k, K). False when a work item
    failed."""
    k = sel.shape[0]
    same = np.zeros(k, dtype=np.int64)  # x's row 0 for every slot
    for c in calls:
        fns, ws, all_tasks, act, nsub, sub16, slots, macs = c
        if macs == 0:  # a call of no matrices (plan_decode_calls pads to a fixed count)
            continue
        n_mats = all_tasks[all_tasks.shape[0] - 1, 0] + 1
        # threads as for one expert's matmuls (the path one matmul per expert): on a busy
        # machine (serial = threads.SERIAL_MACS_BUSY) the routed experts' small matrices run
        # on the calling thread, not in a parallel loop that waits for a descheduled thread
        set_num_threads(want if n_mats * n_out * x.shape[1] >= serial else 1)
        xc, xd, xs, xb = _quantize(x, act, nsub, sub16)
        if shared_x:  # the row quantized once, its codes copied to each slot
            xc, xd = xc[same], xd[same]
            xs = xs[same] if xs.shape[0] > 0 else xs
            xb = xb[same] if xb.shape[0] > 0 else xb
        tasks = group_tasks(sel, np.arange(k + 1), n_mats, n_out, step)
        if mm_ids(fns, ws, xc, xd, xs, xb, (outs[slots[0]], outs[slots[1]], outs[slots[2]]), tasks) != tasks.shape[0]:
            return False
    return True


@njit(cache=True, nogil=True)
def _sum64(w):  # type: ignore[no-untyped-def]
    """NumPy's float64 sum of w (n,) float32 (its pairwise summation: `route`'s np.sum)."""
    n = w.shape[0]
    if n < 8:
        res = 0.0
        for i in range(n):
            res += np.float64(w[i])
        return res
    if n <= 128:
        r = np.empty(8, dtype=np.float64)
        for j in range(8):
            r[j] = np.float64(w[j])
        for i in range(8, n - n % 8, 8):
            for j in range(8):
                r[j] += np.float64(w[i + j])
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for i in range(n - n % 8, n):
            res += np.float64(w[i])
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _sum64(w[:n2]) + _sum64(w[n2:])


@njit(cache=True, nogil=True)
def route(h, router, router_type, router_b, mints, scale):  # type: ignore[no-untyped-def]
    """The routed experts (k,) int64 and their weights (k,) float32 of h (1, E): the router's
    logits (a float matrix, + its bias unless empty), ggml's soft max, the top k, the weights
    normalised (mints[NORM_WEIGHTS]) and scaled (scale, unless 0 or 1): moe.py's `route`."""
    logits = np.empty((1, router.shape[0]), dtype=np.float32)
    mm_float(router, router_type, h, logits)
    if router_b.shape[0] > 0:
        for j in range(logits.shape[1]):
            logits[0, j] += router_b[j]
    probs = softmax_rows(logits)
    sel = top_k_rows(probs, mints[N_USED])[0]
    w = np.empty(sel.shape[0], dtype=np.float32)
    for j in range(sel.shape[0]):
        w[j] = probs[0, sel[j]]
    if mints[NORM_WEIGHTS]:
        total = max(np.float32(_sum64(w)), _MIN_WEIGHT_SUM)
        for j in range(w.shape[0]):
            w[j] = w[j] / total
    if scale != 0 and scale != 1:
        for j in range(w.shape[0]):
            w[j] = w[j] * scale
    return sel, w


@njit(cache=True, nogil=True)
def moe_up(x, norms, biases, qkv_calls, o_calls, ints, eps, q_scale, attn_scale, cap, cos, sin, kc, vc,  # type: ignore[no-untyped-def]
           router, router_type, router_b, mints, scale, up_calls, serial, want):
    """The layer up to its experts' activation: `attend` (layer.py), then the routed experts
    and weights of ffn_norm(x) and their gate and up (k, F). Returns (ok, sel, weights, gate, up)."""
    f32 = np.float32
    k, n_ff = mints[N_USED], mints[N_FF_EXP]
    g = np.empty((k, n_ff), dtype=f32)
    u = np.empty((k, n_ff), dtype=f32)
    sel = np.zeros(k, dtype=np.int64)
    w = np.zeros(k, dtype=f32)
    if not attend(x, norms, biases, qkv_calls, o_calls, ints, eps, q_scale, attn_scale, cap, cos, sin, kc, vc, serial, want):
        return False, sel, w, g, u
    h = _rms(x, norms[FFN_NORM], eps)
    set_num_threads(want if router.shape[0] * h.shape[1] >= serial else 1)
    sel, w = route(h, router, router_type, router_b, mints, scale)
    ok = _experts(h, up_calls, (g, u), sel, n_ff, mints[STEP_UP], True, serial, want)
    return ok, sel, w, g, u


@njit(cache=True, nogil=True)
def moe_down(x, act, sel, w, down_calls, norms, eps, mints, serial, want):  # type: ignore[no-untyped-def]
    """x += post_ffn_norm(sum_j w_j * down_{sel_j}(act_j)) in place, the slots added in order
    (moe.py's `moe_ffn`); act (k, F). False when a work item failed."""
    k, n_embd = sel.shape[0], x.shape[1]
    y = np.empty((k, n_embd), dtype=np.float32)
    if not _experts(act, down_calls, (y,), sel, n_embd, mints[STEP_DOWN], False, serial, want):
        return False
    out = np.empty((1, n_embd), dtype=np.float32)
    for c in range(n_embd):
        out[0, c] = y[0, c] * w[0]
    for j in range(1, k):  # y * w, then ggml_add over the slots in slot order
        for c in range(n_embd):
            out[0, c] = out[0, c] + y[j, c] * w[j]
    _add_block(x, out, norms[POST_FFN_NORM], norms[RESIDUAL_SCALE], eps)
    return True


def task_rows(n_out: int, n_used: int, n_mats: int) -> int:
    """Rows per work item for n_used experts' n_mats matrices of n_out rows: about
    TASKS_PER_CALL items a call (as matrix._tasks; the results do not depend on it)."""
    step = n_out * n_used * n_mats // TASKS_PER_CALL // ROWS_PER_TASK * ROWS_PER_TASK
    return max(ROWS_PER_TASK, min(MAX_ROWS_PER_TASK, step))


def takes(m: QuantMatrix | None) -> bool:
    """Whether `mul_mat_id` multiplies by this expert tensor (as a whole matrix): the types
    whose 16-row kernel takes any number of activation rows (per_type.ROWS16_KINDS)."""
    return m is not None and m.packed is None and m.qtype in QUANT_FORMATS and QUANT_FORMATS[m.qtype].kind in ROWS16_KINDS


def mul_mat_id(xa: QActs, rows: np.ndarray, experts: np.ndarray, ms: list[QuantMatrix], n_out: int) -> list[np.ndarray]:
    """ggml's mul_mat_id for any number of rows, one parallel loop for all: out_i[p] =
    x_{rows[p]} @ W_{experts[p]}.T for each expert tensor ms[i] (all experts' n_out-row matrices
    stacked, `takes`; of one input and activation type), xa from `prepare`. The pairs p are
    grouped by expert (each expert's blocks read once for all its rows); each group's rows go
    through the same kernel as one matmul of them (the same bits as `matmul` on expert e's rows)."""
    order = np.argsort(experts, kind="stable")
    ids, starts = np.unique(experts[order], return_index=True)
    src = rows[order]
    fmt = QUANT_FORMATS[ms[0].qtype]
    xsub = _sub_sums(xa, fmt)
    xs = xa.s[src] if xa.s.shape[0] else xa.s
    xb = xsub[src] if xsub.shape[0] else xsub
    n_pairs = experts.shape[0]
    outs = [np.empty((n_pairs, n_out), dtype=np.float32) for _ in ms]
    pad = MANY - len(ms)
    kinds = [QUANT_FORMATS[m.qtype].kind for m in ms]
    fns = decode.addresses(tuple(kinds + [kinds[-1]] * pad))
    step = task_rows(n_out, ids.shape[0], len(ms))
    tasks = group_tasks(ids.astype(np.int64), np.append(starts, n_pairs).astype(np.int64), len(ms), n_out, step)
    threads.configure(n_pairs * n_out * len(ms) * ms[0].n_in)
    ws = tuple([m.data for m in ms] + [ms[-1].data] * pad)
    if mm_ids(fns, ws, xa.codes[src], xa.d[src], xs, xb, tuple(outs + [outs[-1]] * pad), tasks) != tasks.shape[0]:
        raise RuntimeError(f"the {fmt.qtype.name} expert kernels failed (their error is printed above)")
    for i, o in enumerate(outs):  # back to pair order
        back = np.empty_like(o)
        back[order] = o
        outs[i] = back
    return outs
