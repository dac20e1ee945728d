"""A weight matrix kept in its GGUF bytes, and the matmul on it.

`QuantMatrix.data` is a read-only view of the memory-mapped file: (n_out, row bytes) uint8.
Nothing is dequantized at load; `matmul` quantizes the activations once to the weight's
vec_dot type and runs the compiled block kernels (core/model/kernels/qmm/decode.py for few
activation rows, prefill.py for many, block_dots.py and float_gemm.py for float weights) on the kernels' own threads
(core/model/kernels/qmm/threads.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from gguf import GGMLQuantizationType

from llamacli.core.model.kernels import numerics as N
from llamacli.core.errors import UnsupportedTensorType
from llamacli.core.model.kernels.qmm import block_dots as Kn
from llamacli.core.model.kernels.qmm import float_gemm
from llamacli.core.model.kernels.qmm import decode, packed, prefill
from llamacli.core.model.kernels.qmm.per_type import ROWS16_KINDS
from llamacli.core.model.kernels.qmm import threads
from llamacli.core.model.kernels.qmm.acts import QActs, block_sums, quantize_acts
from llamacli.core.model.kernels.qmm.simd import TILE
from llamacli.core.model.kernels.qmm.weight_types import FLOAT_BF16, FLOAT_F16, FLOAT_FORMATS, MIN_K, QUANT_FORMATS, QFormat

_EMPTY3 = np.zeros((0, 0, 0), dtype=np.int32)

QT = GGMLQuantizationType

# Types without a 16-row kernel (per_type.ROWS16_KINDS): from this many activation rows on, the
# token-vectorised kernel is faster (measured on the demo model's shapes; the choice does not
# change results). The 16-row kernels are faster than it for every row count.
PREFILL_MIN_ROWS = 12


def _rows16(fmt: QFormat, t: int) -> bool:
    """Whether t activation rows take the 16-row decode kernel (else the token-tiled one)."""
    return t < PREFILL_MIN_ROWS or fmt.kind in ROWS16_KINDS


@dataclass
class QuantMatrix:
    """W (n_out, n_in) of ggml type qtype, as its GGUF bytes (n_out, row bytes); `packed`: its
    rows interleaved by eights (core/model/kernels/qmm/packed.py, `pack_matrix`), which the
    matmuls then read instead (the same results)."""

    data: np.ndarray
    qtype: GGMLQuantizationType
    n_in: int
    packed: np.ndarray | None = None

    @property
    def n_out(self) -> int:
        return int(self.data.shape[0])


def packable(m: QuantMatrix) -> bool:
    """Whether m's type has a packed form (the 32-value legacy types, MXFP4, Q4_K, Q6_K) and
    its rows come in eights."""
    fmt = QUANT_FORMATS.get(m.qtype)
    return fmt is not None and fmt.kind in packed.KINDS and m.n_out % packed.GROUP == 0


def packed_shape(m: QuantMatrix) -> tuple[int, int]:
    """The shape of a packable matrix's packed form (the same bytes, rows interleaved by GROUP)."""
    return m.n_out // packed.GROUP, int(m.data.shape[1]) * packed.GROUP


def pack_into(m: QuantMatrix, out: np.ndarray) -> np.ndarray:
    """Write m's packed form into out (`packed_shape(m)`, uint8); the result as a read-only view."""
    return packed.pack(np.ascontiguousarray(m.data), QUANT_FORMATS[m.qtype].kind, out.view(np.ndarray))


def pack_matrix(m: QuantMatrix) -> bool:
    """Give m its packed form (in memory) where `packable`; whether it has one."""
    if m.packed is None and packable(m):
        m.packed = packed.pack(np.ascontiguousarray(m.data), QUANT_FORMATS[m.qtype].kind)
    return m.packed is not None


def supports(qtype: GGMLQuantizationType) -> bool:
    return qtype in QUANT_FORMATS or qtype in FLOAT_FORMATS


def act_key(qtype: GGMLQuantizationType) -> object:
    """Weights with the same key read identically quantized activations (one quantization can
    serve several matmuls)."""
    if qtype in QUANT_FORMATS:
        return ("q", QUANT_FORMATS[qtype].act)
    return ("f", FLOAT_FORMATS[qtype])


def prepare(x: np.ndarray, qtype: GGMLQuantizationType) -> QActs | np.ndarray:
    """The activation as the kernels for this weight type take it."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    fmt = QUANT_FORMATS.get(qtype)
    if fmt is not None:
        return quantize_acts(x, fmt.act)
    ft = FLOAT_FORMATS.get(qtype)
    if ft is None:
        raise UnsupportedTensorType("<weight>", f"no matmul for ggml type {qtype.name}")
    if ft == FLOAT_F16:
        return float_gemm.round_to_f16(x)
    if ft == FLOAT_BF16:
        return N.round_bf16(x)
    return x


def matmul(xa: QActs | np.ndarray, m: QuantMatrix, out: np.ndarray | None = None) -> np.ndarray:
    """y (T, n_out) = x @ W.T, with xa from `prepare(x, m.qtype)`."""
    rows = xa.shape[0] if isinstance(xa, np.ndarray) else xa.codes.shape[0]
    threads.configure(rows * m.n_out * m.n_in)
    if isinstance(xa, np.ndarray):
        t = xa.shape[0]
        y = np.empty((t, m.n_out), dtype=np.float32) if out is None else out
        ft = FLOAT_FORMATS[m.qtype]
        if float_gemm.supports(ft, m.n_in):  # the same bits, register-tiled
            float_gemm.mm_lanes(m.data, ft, xa, y)
        else:
            Kn.mm_float(m.data, ft, xa, y)
        return y
    fmt = QUANT_FORMATS[m.qtype]
    t = xa.codes.shape[0]
    y = np.empty((t, m.n_out), dtype=np.float32) if out is None else out
    xsub = _sub_sums(xa, fmt, m.packed is not None)
    if m.packed is not None or _rows16(fmt, t):
        _decode([m], [fmt], xa, xsub, [y])
        return y
    tile = 16 if t <= 32 else TILE  # fewer padding tokens for small batches (results are the same)
    tp = -(-t // tile) * tile
    x16 = np.zeros((m.n_in // 2, tp, 2), dtype=np.int16)  # (pairs, tokens, 2): simd.tile_dot64
    x16[:, :t, :] = xa.codes.reshape(t, m.n_in // 2, 2).transpose(1, 0, 2)
    fn = prefill.address(fmt.kind)
    tasks = prefill.mm_prefill(fn, m.data, x16.reshape(-1), tp, tile, _tokens_last(xa.d, tp), _tokens_last(xa.s, tp), _tokens_last(xsub, tp), y)
    if tasks != -(-m.n_out // prefill.ROWS_PER_TASK):
        raise RuntimeError(f"the {fmt.qtype.name} prefill kernel failed (its error is printed above)")
    return y


def matmul_many(xa: QActs | np.ndarray, ms: list[QuantMatrix]) -> list[np.ndarray]:
    """[x @ W.T for W in ms], with xa from `prepare(x, ms[0].qtype)`: one parallel loop for all
    when they are few-row decodes of types that read the same quantized activation the same
    way; otherwise one matmul each (the results are the same bits either way)."""
    if isinstance(xa, np.ndarray) or not _one_call(ms, xa.codes.shape[0]):
        return [matmul(xa, m) for m in ms]
    fmts = [QUANT_FORMATS[m.qtype] for m in ms]
    f0 = fmts[0]
    t = xa.codes.shape[0]
    threads.configure(t * sum(m.n_out for m in ms) * ms[0].n_in)
    outs = [np.empty((t, m.n_out), dtype=np.float32) for m in ms]
    _decode(ms, fmts, xa, _sub_sums(xa, f0, ms[0].packed is not None), outs)
    return outs


def _one_call(ms: list[QuantMatrix], t: int) -> bool:
    """Whether t activation rows times these matrices (of one input) are one `mm_decode_many`
    call: 2 to MANY quantized matrices that decode t rows with the 16-row kernels and read
    the quantized activation the same way (and are all read-only or all writable: one
    compiled signature)."""
    fmts = [QUANT_FORMATS.get(m.qtype) for m in ms]
    f0 = fmts[0]
    return (
        2 <= len(ms) <= MANY
        and f0 is not None
        and all(f is not None and (_rows16(f, t) or m.packed is not None) for f, m in zip(fmts, ms))
        and all(f is not None and (f.qk, f.nsub, f.act, f.min_term) == (f0.qk, f0.nsub, f0.act, f0.min_term) for f in fmts)
        and len({(m.packed is not None, decode_weights(m).flags.writeable) for m in ms}) == 1
    )


def decode_weights(m: QuantMatrix) -> np.ndarray:
    """What the decode kernels read of m: its packed form, or its bytes."""
    return m.data if m.packed is None else m.packed


# One `mm_decode_many` call of a one-row decode step (core/model/kernels/qmm/layer.py):
# (fns, ws, tasks, act, nsub, sub16, slots, macs).
DecodeCall = tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray, int, int, int, np.ndarray, int]


def plan_decode_calls(ms: list[QuantMatrix], n_calls: int) -> tuple[DecodeCall, ...]:
    """The `mm_decode_many` calls that multiply one activation row by these matrices (of one
    input) as `matmul_many` does: the matrices whose activations round alike (`act_key`) in one
    call where `_one_call` allows, else one call each; padded with calls of no work items to
    `n_calls` (so that every layer of a model has the same argument types: one compilation).
    Slot i of the calls' outputs is ms[i]'s. All matrices quantized (`supports_decode_plan`)."""
    groups: dict[object, list[int]] = {}
    for i, m in enumerate(ms):
        groups.setdefault(act_key(m.qtype), []).append(i)
    calls: list[DecodeCall] = []
    for idx in groups.values():
        parts = [idx] if _one_call([ms[i] for i in idx], 1) else [[i] for i in idx]
        for part in parts:
            calls.append(_decode_call([ms[i] for i in part], part))
    if len(calls) > n_calls:
        raise ValueError(f"{len(ms)} matrices need {len(calls)} calls, more than {n_calls}")
    last = calls[-1]
    no_work = np.zeros((0, 3), dtype=np.int64)
    no_work.flags.writeable = False
    calls += [(last[0], last[1], no_work, last[3], last[4], last[5], last[6], 0)] * (n_calls - len(calls))
    return tuple(calls)


def _decode_call(ms: list[QuantMatrix], slots: list[int]) -> DecodeCall:
    fmts = [QUANT_FORMATS[m.qtype] for m in ms]
    f0 = fmts[0]
    pad = MANY - len(ms)
    is_packed = ms[0].packed is not None
    k_sums = f0.min_term == MIN_K or f0.qtype == QT.Q6_K  # as _sub_sums
    block_sums = is_packed and f0.kind in OFFSET_KINDS  # (layer.py's `_quantize`: nsub 1, sub16 0)
    return (
        decode.addresses(tuple([f.kind for f in fmts] + [fmts[-1].kind] * pad), is_packed),
        tuple([decode_weights(m) for m in ms] + [decode_weights(ms[-1])] * pad),
        _tasks(tuple(m.n_out for m in ms)),
        f0.act,
        f0.nsub if k_sums else 1 if block_sums else 0,
        f0.sub // 16 if k_sums else 0 if block_sums else 1,
        np.array(slots + [slots[-1]] * pad, dtype=np.int64),
        sum(m.n_out for m in ms) * ms[0].n_in,
    )


def supports_decode_plan(m: QuantMatrix) -> bool:
    """Whether `plan_decode_calls` can take this matrix (a quantized type)."""
    return m.qtype in QUANT_FORMATS


# mm_decode_many takes its matrices and outputs as tuples of exactly MANY arrays (fewer are
# padded with the last one, which no work item reads or writes), so that one compiled signature
# serves one matrix, gate/up and Q/K/V alike.
MANY = 3


def _decode(ms: list[QuantMatrix], fmts: list[QFormat], xa: QActs, xsub: np.ndarray, outs: list[np.ndarray]) -> None:
    """outs[i] = x @ ms[i].W.T with the 16-row kernels, all matrices in one parallel loop."""
    f0 = fmts[0]
    pad = MANY - len(ms)
    ws = tuple([decode_weights(m) for m in ms] + [decode_weights(ms[-1])] * pad)
    ys = tuple(outs + [outs[-1]] * pad)
    fns = decode.addresses(tuple([f.kind for f in fmts] + [fmts[-1].kind] * pad), ms[0].packed is not None)
    tasks = _tasks(tuple(m.n_out for m in ms))  # work items of the real matrices only
    if decode.mm_decode_many(fns, ws, xa.codes, xa.d, xa.s, xsub, ys, tasks) != len(tasks):
        raise RuntimeError(f"the {f0.qtype.name} decode kernel failed (its error is printed above)")


# Decode work items: about TASKS_PER_CALL of them per call (enough to balance the threads), of
# 16 to MAX_ROWS_PER_TASK rows. Each item costs a call through a type function's address and
# its scratch: 16-row items made the vocabulary projection (262144 rows) ~5% slower per token.
TASKS_PER_CALL = 32
MAX_ROWS_PER_TASK = 256


@lru_cache(maxsize=64)
def _tasks(n_outs: tuple[int, ...]) -> np.ndarray:
    """The work items of `mm_decode_many` for matrices of these row counts: (n, 3) rows of
    (matrix, first row, end row), a multiple of ROWS_PER_TASK rows each (built once per shape:
    a decode step asks for it twice per layer)."""
    step = sum(n_outs) // TASKS_PER_CALL // Kn.ROWS_PER_TASK * Kn.ROWS_PER_TASK
    step = max(Kn.ROWS_PER_TASK, min(MAX_ROWS_PER_TASK, step))
    t = np.array(
        [(i, r, min(n, r + step)) for i, n in enumerate(n_outs) for r in range(0, n, step)],
        dtype=np.int64,
    )
    t.flags.writeable = False
    return t


# The 32-value types whose packed kernel multiplies the codes before their offset (packed.py).
OFFSET_KINDS = frozenset({QUANT_FORMATS[QT.Q4_0].kind, QUANT_FORMATS[QT.Q5_0].kind, QUANT_FORMATS[QT.MXFP4].kind})


def _sub_sums(xa: QActs, fmt: QFormat, is_packed: bool = False) -> np.ndarray:
    """K-quants with mins, and Q6_K (its one-row kernel takes the codes' offset 32 back through
    them): the activation's code sums per sub-block (T, nb, nsub), from its sums per 16; packed
    Q4_0 and Q5_0: its code sums per block (T, nb, 1); an empty array for the other types."""
    if is_packed and fmt.kind in OFFSET_KINDS:
        return block_sums(xa.codes)
    if fmt.min_term != MIN_K and fmt.qtype != QT.Q6_K:
        return _EMPTY3
    return xa.bsums.reshape(xa.codes.shape[0], -1, fmt.nsub, fmt.sub // 16).sum(axis=-1, dtype=np.int32)


def _tokens_last(a: np.ndarray, tp: int) -> np.ndarray:
    """(T, ...) -> (..., tp): tokens on the last, contiguous axis, zero-padded to tp."""
    if a.size == 0:
        return np.zeros((0,) * a.ndim, dtype=a.dtype)
    p = np.zeros(a.shape[1:] + (tp,), dtype=a.dtype)
    p[..., : a.shape[0]] = np.moveaxis(a, 0, -1)
    return p
