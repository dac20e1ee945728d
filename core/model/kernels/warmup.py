"""Compiling (or loading from numba's disk cache) the kernels a model needs, before its first
request.

The first run on a machine compiles the kernels for its CPU and caches them; later runs load
them in well under a second. The work is split into jobs, one kernel (or a few small ones)
each, and only the jobs the model's weight types need: one decode function per quantized type
(core/model/kernels/qmm/decode.py), of its packed matrices where it has a packed form
(packed.py), their parallel loop, the one-token layer in one call
(layer.py), one token-tiled function per type
without a 16-row kernel (prefill.py) and its loop, the float kernels where a matrix is
F32/F16/BF16, the activation quantizers its types read, and the kernels every model runs
(attention, RMSNorm, RoPE, the GELU table). Each job's kernels are
written to the disk cache as soon as they are compiled, so a first start killed part-way
leaves the next one only what it had not finished. On a machine with several cores, helper
processes compile jobs into the same cache meanwhile; this process then loads them from it.
A helper finishes the job it is on and starts no other once this process is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels import delta_net, ssm
from llamacli.core.model.kernels.qmm import acts, attention, block_dots, decode, experts, float_gemm, layer, packed, prefill, tables
from llamacli.core.model.kernels.qmm.matrix import PREFILL_MIN_ROWS, QuantMatrix, matmul, pack_matrix, plan_decode_calls, prepare
from llamacli.core.model.kernels.qmm.per_type import ROWS16_KINDS
from llamacli.core.model.kernels.qmm.weight_types import ACT_Q8_0, ACT_Q8_K, FLOAT_FORMATS, QUANT_FORMATS

QT = GGMLQuantizationType

MAX_HELPERS = 3  # helper processes at most (besides this one)


@dataclass(frozen=True)
class Job:
    """Some kernels compiled (or loaded) together: `run` calls them on tiny inputs, `cached`
    says whether they are in this process or numba's disk cache; `cost` a rough weight (CPU
    seconds of a cold compile on this project's AMD EPYC) for sharing the jobs between
    processes."""

    name: str
    run: Callable[[], object]
    cached: Callable[[], bool]
    cost: float = 1.0


@dataclass
class WarmupReport:
    """What a warmup did: the jobs it compiled (in this process) and those it loaded."""

    compiled: list[str] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)


def _in_cache(*kernels: Any) -> bool:
    """Whether numba dispatchers are compiled here or have signatures in the disk cache."""
    for k in kernels:
        if k.signatures:
            continue
        try:
            if not k._cache._cache_file._load_index():  # numba's index of cached signatures
                return False
        except Exception:  # noqa: BLE001  (private API: assume not)
            return False
    return True


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _matmuls(qt: GGMLQuantizationType, rows: tuple[int, ...], packed_rows: bool = False) -> None:
    """One tiny matmul of type qt for each activation row count (read-only weights, as the
    mapped file's); packed_rows: of 8 weight rows, packed where the type has a packed form."""
    k = 256 if qt in QUANT_FORMATS and QUANT_FORMATS[qt].qk == 256 else max(32, GGML_QUANT_SIZES[qt][0])  # (Q1_0: 128)
    assert k % GGML_QUANT_SIZES[qt][0] == 0
    data = np.zeros((8 if packed_rows else 2, k // GGML_QUANT_SIZES[qt][0] * GGML_QUANT_SIZES[qt][1]), dtype=np.uint8)
    m = QuantMatrix(_readonly(data), qt, k)
    if packed_rows and not pack_matrix(m):
        return
    for n in rows:
        matmul(prepare(np.ones((n, k), dtype=np.float32), qt), m)


def _each_float(floats: list[GGMLQuantizationType]) -> None:
    for qt in floats:
        _matmuls(qt, (1,))


def _decode_loop() -> None:
    """The parallel loop of the decode functions (it calls them by address: with no work items
    it calls none)."""
    w = _readonly(np.zeros((1, 34), dtype=np.uint8))
    y = np.zeros((1, 1), dtype=np.float32)
    decode.mm_decode_many(
        _readonly(np.zeros(3, dtype=np.int64)), (w, w, w), np.zeros((1, 32), dtype=np.int8), np.zeros((1, 1), dtype=np.float32),
        np.zeros((0, 0), dtype=np.float32), np.zeros((0, 0, 0), dtype=np.int32), (y, y, y), _readonly(np.zeros((0, 3), dtype=np.int64)),
    )


def _prefill_loop() -> None:
    """The parallel loop of the token-tiled functions (a matrix of no rows calls none)."""
    prefill.mm_prefill(
        0, _readonly(np.zeros((0, 110), dtype=np.uint8)), np.zeros(256 * 16, dtype=np.int16), 16, 16, np.zeros((1, 16), dtype=np.float32),
        np.zeros((0, 0), dtype=np.float32), np.zeros((0, 0, 0), dtype=np.int32), np.zeros((16, 0), dtype=np.float32),
    )


def _common() -> None:
    """What every model runs: the GELU table (alone and times the up projection), the f16
    rounding of K/V, Q8_0 block sums, attention, RMSNorm and RoPE."""
    x = np.ones(4, dtype=np.float32)
    tables.gelu_lookup(x, np.zeros(65536, dtype=np.float32), np.empty_like(x))
    tables.gelu_mul_lookup(x, x, np.zeros(65536, dtype=np.float32), np.empty_like(x))
    tables.round_f16_into(x, np.empty_like(x))
    acts.block_sums(np.zeros((1, 32), dtype=np.int8))
    kv = np.zeros((1, 1, 2, 16), dtype=np.float32)
    attention.attention(np.ones((1, 1, 1, 16), dtype=np.float32), kv, kv, np.zeros((1, 1, 2), dtype=np.float32), 1.0, None)
    K.rms_norm(np.ones((1, 16), dtype=np.float32), np.ones(16, dtype=np.float32), 1e-6)
    cos, sin = np.ones((1, 8), dtype=np.float32), np.zeros((1, 8), dtype=np.float32)
    K.apply_rope(np.ones((1, 1, 16), dtype=np.float32), cos, sin, 16, True, fma=True)


def _recurrent() -> None:
    """Mamba-2's convolution and scan (kernels/ssm.py) and the gated delta rule (kernels/delta_net.py),
    for the models that have them."""
    x = np.ones((1, 4), dtype=np.float32)
    ssm.ssm_conv(x, np.zeros(1, dtype=np.int64), np.ones((4, 4), dtype=np.float32), np.zeros((1, 4, 3), dtype=np.float32))
    ones = np.ones((1, 1, 4), dtype=np.float32)
    ssm.ssm_scan(ones, np.ones((1, 1), dtype=np.float32), -np.ones(1, dtype=np.float32), ones, ones,
                 np.zeros(1, dtype=np.int64), np.zeros((1, 1, 4, 4), dtype=np.float32))
    delta_net.gated_delta_net(ones, ones, ones, -np.ones((1, 1), dtype=np.float32), np.ones((1, 1), dtype=np.float32),
                              np.zeros(1, dtype=np.int64), np.zeros((1, 1, 4, 4), dtype=np.float32))


#: the kind a model names (DecoderModel.kernel_kinds) for the recurrent kernels
RECURRENT = "ssm"


def _decode_step(kind: str) -> None:
    """The one-token layer in one call (core/model/kernels/qmm/layer.py) of a GELU ("gelu":
    decode_layer) or SiLU ("silu": attention_block, ffn_out) model, on a tiny layer of read-only
    Q8_0 matrices (their type functions are called by address: one compiled form serves every
    quantized type)."""
    e = 32

    def mat(n: int) -> QuantMatrix:
        return QuantMatrix(_readonly(np.zeros((n, e // 32 * 34), dtype=np.uint8)), QT.Q8_0, e)

    none = np.zeros(0, dtype=np.float32)
    norms = (np.ones(e, dtype=np.float32), none, none, none, np.ones(e, dtype=np.float32), none, none)
    calls = [plan_decode_calls([mat(e)] * n, n) for n in (3, 1, 2, 1)]
    ints = np.array([1, 1, e, e, e, e // 2, 1, 0, 0, 0], dtype=np.int64)
    rows = np.zeros((1, 3), dtype=np.int64)  # layer.ROW_SEQ ..: sequence 0, position 0
    kv = np.zeros((1, 1, 1, e), dtype=np.float32)
    x, act = np.ones((1, e), dtype=np.float32), np.ones((1, e), dtype=np.float32)
    rope = (np.ones((1, e // 2), dtype=np.float32), np.zeros((1, e // 2), dtype=np.float32))
    f, biases = np.float32, (none,) * 7
    qkv, o, up, down = calls
    if kind == "gelu":
        table = np.zeros(65536, dtype=np.float32)
        layer.decode_layer(x, norms, biases, qkv, o, up, down, ints, rows, f(1e-6), f(0), f(1), f(0), *rope, kv, kv, table, 1 << 62, 1)
    else:
        layer.attention_block(x, norms, biases, qkv, o, up, ints, rows, f(1e-6), f(0), f(1), f(0), *rope, kv, kv, 1 << 62, 1)
        layer.ffn_out(x, act, norms, biases, down, f(1e-6), 1 << 62, 1)


def _moe_step() -> None:
    """The one-token layer with experts in two calls (core/model/kernels/qmm/experts.py: moe_up,
    moe_down) on a tiny layer of 2 read-only Q8_0 experts and attention matrices and an F32
    router (read-only bytes, as the mapped file's); the SiLU step of its dense layers; a batch's
    expert loop."""
    _decode_step("silu")
    e = 32
    none = np.zeros(0, dtype=np.float32)

    def mat(n: int) -> QuantMatrix:
        return QuantMatrix(_readonly(np.zeros((n, e // 32 * 34), dtype=np.uint8)), QT.Q8_0, e)

    norms = (np.ones(e, dtype=np.float32), none, none, none, np.ones(e, dtype=np.float32), none, none)
    qkv, o = plan_decode_calls([mat(e)] * 3, 3), plan_decode_calls([mat(e)], 1)
    up, down = plan_decode_calls([mat(2 * e)] * 2, 2), plan_decode_calls([mat(2 * e)], 1)
    ints = np.array([1, 1, e, e, e, e // 2, 1, 0, 0, 0], dtype=np.int64)
    mints = np.array([1, e, 1, 16, 16], dtype=np.int64)  # experts.N_USED ..
    kv = np.zeros((1, 1, 1, e), dtype=np.float32)
    x = np.ones((1, e), dtype=np.float32)
    rope = (np.ones((1, e // 2), dtype=np.float32), np.zeros((1, e // 2), dtype=np.float32))
    f, router = np.float32, _readonly(np.zeros((2, 4 * e), dtype=np.uint8))
    ok, sel, w, g, u = experts.moe_up(x, norms, (none,) * 7, qkv, o, ints, f(1e-6), f(0), f(1), f(0), *rope, kv, kv, router,
                                      FLOAT_FORMATS[QT.F32], none, mints, f(0), up, 1 << 62, 1)
    experts.moe_down(x, g * u, sel, w, down, norms, f(1e-6), mints, 1 << 62, 1)
    _experts_loop()


def _experts_loop() -> None:
    """A batch's expert matmuls in one loop (experts.mul_mat_id), for both activation types."""
    for qt in (QT.Q8_0, QT.Q4_K):
        k = 256 if qt == QT.Q4_K else 32
        m = QuantMatrix(_readonly(np.zeros((32, k // GGML_QUANT_SIZES[qt][0] * GGML_QUANT_SIZES[qt][1]), dtype=np.uint8)), qt, k)
        xa = prepare(np.ones((2, k), dtype=np.float32), qt)
        experts.mul_mat_id(xa, np.array([0, 1]), np.array([0, 1]), [m], 16)  # type: ignore[arg-type]


# The compiled functions of each kind of one-token step (`_decode_step`, `_moe_step`).
STEPS: dict[str, tuple[Any, ...]] = {"gelu": (layer.decode_layer,), "silu": (layer.attention_block, layer.ffn_out),
                                     "moe": (layer.attention_block, layer.ffn_out, experts.moe_up, experts.moe_down, experts.mm_ids)}


ALL_TYPES: tuple[GGMLQuantizationType, ...] = tuple(QUANT_FORMATS) + tuple(FLOAT_FORMATS)


def plan(qtypes: Iterable[GGMLQuantizationType] | None = None, steps: Iterable[str] | None = None) -> list[Job]:
    """The jobs for weights of these ggml types (None: every type with a matmul) and these
    kinds of one-token step (STEPS' keys; None: every kind), costliest first. Types without a
    matmul (norms' F32 vectors are not passed here) are ignored."""
    wanted = set(ALL_TYPES if qtypes is None else qtypes)
    quant = [QUANT_FORMATS[qt] for qt in QUANT_FORMATS if qt in wanted]
    jobs = [
        Job(f"decode {f.qtype.name}", partial(decode.type_function, f.kind), partial(decode.cached, f.kind), 3.5 if f.qk == 256 else 1.0)
        for f in quant
    ]
    jobs += [
        Job(f"decode packed {f.qtype.name}", partial(decode.type_function, f.kind, True), partial(decode.cached, f.kind, True), 1.0)
        for f in quant if f.kind in packed.KINDS
    ]
    if quant:
        jobs.append(Job("decode loop", _decode_loop, partial(_in_cache, decode.mm_decode_many), 1.0))
        jobs += [Job(f"decode step {k}", partial(_moe_step) if k == "moe" else partial(_decode_step, k), partial(_in_cache, *STEPS[k]), 5.0)
                 for k in (STEPS if steps is None else [k for k in STEPS if k in set(steps)])]
    tiled = [f for f in quant if f.kind not in ROWS16_KINDS]
    jobs += [Job(f"prefill {f.qtype.name}", partial(prefill.type_function, f.kind), partial(prefill.cached, f.kind), 1.5) for f in tiled]
    if tiled:
        jobs.append(Job("prefill loop", _prefill_loop, partial(_in_cache, prefill.mm_prefill), 1.0))
    x = np.ones((1, 256), dtype=np.float32)
    for act, name, kernel in ((ACT_Q8_0, "q8_0", acts._q8_0), (ACT_Q8_K, "q8_k", acts._q8_k)):
        if any((f.act == ACT_Q8_K) == (act == ACT_Q8_K) for f in quant):
            jobs.append(Job(f"quantizer {name}", partial(acts.quantize_acts, x, act), partial(_in_cache, kernel), 0.5))
    floats = [qt for qt in FLOAT_FORMATS if qt in wanted]
    if floats:  # F32 weights take the float kernel, F16 and BF16 (rows of whole 16-value groups) the tiled one
        kernels = ([block_dots.mm_float] if QT.F32 in floats else []) + ([float_gemm._mm_lanes] if floats != [QT.F32] else [])
        kernels += [float_gemm._round_f16] if QT.F16 in floats else []
        jobs.append(Job("float", partial(_each_float, floats), partial(_in_cache, *kernels), 2.5))
    common = (tables.gelu_lookup, tables.gelu_mul_lookup, tables.round_f16_into, acts._block_sums, attention._attend, K._rms_rows, K._rope_fma)
    jobs.append(Job("common", _common, partial(_in_cache, *common), 6.0))
    if RECURRENT in (steps or ()):  # only where a model names them
        jobs.append(Job("recurrent", _recurrent, partial(_in_cache, ssm._conv_rows, ssm._scan_heads, delta_net._gdn_heads), 1.5))
    return sorted(jobs, key=lambda j: -j.cost)


def needs_compile(qtypes: Iterable[GGMLQuantizationType] | None = None, steps: Iterable[str] | None = None) -> bool:
    """True when some kernel these weight types (and kinds of one-token step) need is neither
    in this process nor in the disk cache."""
    return not all(j.cached() for j in plan(qtypes, steps))


def run_jobs(names: list[str], qtypes: list[str] | None = None, parent: int | None = None) -> WarmupReport:
    """Run the named jobs of plan(qtypes) in order (a helper process's work): each one's
    kernels reach the disk cache before the next starts. A helper of process `parent` stops
    between jobs once that process is gone."""
    jobs = {j.name: j for j in plan(None if qtypes is None else [QT.__members__[n] for n in qtypes], None)}
    report = WarmupReport()
    for name in names:
        if parent is not None and os.getppid() != parent:
            break
        _run(jobs[name], report)
    return report


def _run(job: Job, report: WarmupReport) -> None:
    was_cached = job.cached()
    job.run()
    (report.loaded if was_cached else report.compiled).append(job.name)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def share(jobs: list[Job], n: int) -> list[list[Job]]:
    """The jobs in n lists of about equal cost (each job to the least loaded list, costliest
    first)."""
    lists: list[list[Job]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for j in sorted(jobs, key=lambda j: -j.cost):
        i = loads.index(min(loads))
        lists[i].append(j)
        loads[i] += j.cost
    return lists


def _start_helper(jobs: list[Job], qtypes: list[str] | None) -> subprocess.Popen[bytes] | None:
    """A process running these jobs (the same llamacli as this one's, whatever the working
    folder), or None where it cannot start (this process then compiles them)."""
    import llamacli

    root = os.path.dirname(os.path.dirname(os.path.abspath(llamacli.__file__)))
    names = [j.name for j in jobs]
    code = (
        f"import sys; sys.path.insert(0, {root!r}); from llamacli.core.model.kernels.warmup import run_jobs; "
        f"run_jobs({names!r}, {qtypes!r}, {os.getpid()})"
    )
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def warmup(qtypes: Iterable[GGMLQuantizationType] | None = None, steps: Iterable[str] | None = None) -> WarmupReport:
    """Run every kernel that weights of these ggml types (None: every type) and these kinds of
    one-token step (None: every kind) need once on tiny inputs, compiling what the disk cache
    lacks (module docstring)."""
    names = None if qtypes is None else sorted({qt.name for qt in qtypes})
    jobs = plan(None if names is None else [QT.__members__[n] for n in names], steps)
    todo = [j for j in jobs if not j.cached()]
    n = min(_cores(), MAX_HELPERS + 1, len(todo)) if todo else 1
    shares = share(todo, n)
    helpers = [h for h in (_start_helper(s, names) for s in shares[1:]) if h is not None]
    report = WarmupReport()
    try:
        for j in shares[0]:
            _run(j, report)
    except BaseException:  # an interrupt too: stop the helpers rather than wait for them
        for h in helpers:
            h.kill()
            h.wait()
        raise
    for h in helpers:
        h.wait()  # its kernels are in the disk cache now (or it failed: compiled below)
    done = {j.name for j in shares[0]}
    for j in jobs:
        if j.name not in done:
            _run(j, report)
    for qt in (qt for qt in QUANT_FORMATS if names is None or qt.name in names):
        _matmuls(qt, (1, PREFILL_MIN_ROWS))  # each type's paths run once here, not in the first request
        _matmuls(qt, (1, PREFILL_MIN_ROWS), packed_rows=True)
    return report
