"""Quantized matmul kernels (core/model/kernels/qmm) against float64 references, and their invariances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from llamacli.core.model.kernels import numerics as N
from llamacli.core.model.kernels.qmm import QuantMatrix, matmul, prepare
from llamacli.core.model.kernels.qmm import threads
from llamacli.core.model.kernels.qmm.matrix import PREFILL_MIN_ROWS
from llamacli.core.quantize.convert import encode
from llamacli.core.model.kernels.dequant import dequantize
from tests.lowbit_blocks import LOW_BIT_TYPES, RANDOM_BLOCK_TYPES, SPLIT_TYPES, random_blocks
from llamacli.core.model.kernels.grids import KVALUES_FP4 as KV_FP4
from llamacli.core.model.kernels.qmm.unpack_split import UE4M3_HALF

QT = GGMLQuantizationType

TYPES = [QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q2_K, QT.Q3_K,
         QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_NL, QT.IQ4_XS, *LOW_BIT_TYPES, *SPLIT_TYPES]


def _matrix(qtype: QT, n_out: int, n_in: int, seed: int = 0) -> QuantMatrix:
    rng = np.random.default_rng(seed)
    if qtype in (QT.IQ4_NL, QT.IQ4_XS):  # no quantizer for these: random blocks, fp16 d = 0.01
        qk, size = GGML_QUANT_SIZES[qtype]
        blocks = rng.integers(0, 256, size=(n_out, n_in // qk, size), dtype=np.uint8)
        blocks[:, :, 0:2] = np.array([0.01], dtype=np.float16).view(np.uint8)
        return QuantMatrix(blocks.reshape(n_out, -1), qtype, n_in)
    if qtype in RANDOM_BLOCK_TYPES:  # nor for these: random codes, block scales for a spread of 0.05
        return QuantMatrix(random_blocks(qtype, n_out, n_in, 0.05, rng), qtype, n_in)
    w = rng.standard_normal((n_out, n_in)).astype(np.float32) * 0.05
    raw = encode(w, qtype)
    data = np.ascontiguousarray(raw).view(np.uint8).reshape(n_out, -1)
    return QuantMatrix(data, qtype, n_in)


def _reference(x: np.ndarray, m: QuantMatrix) -> np.ndarray:
    """float64 dequantize(W) @ dequantize(quantize(x)): what the kernel computes up to the
    float32 roundings of its scale arithmetic."""
    w = dequantize(m.data, m.qtype, (m.n_out, m.n_in)).astype(np.float64)
    xr = N.round_activations(x, m.qtype).astype(np.float64)
    ref = xr @ w.T
    if m.qtype in (QT.Q4_1, QT.Q5_1):
        # ggml's Q4_1/Q5_1 x Q8_1 dot adds min_w * s_x, where the Q8_1 block's s is
        # fp16(d_f32 * sum of codes), not the sum of the block's rounded values.
        _, s = N.round_q8_1(x, with_sums=True)
        nb = m.n_in // 32
        blocks = m.data.reshape(m.n_out, nb, -1)
        mins = np.ascontiguousarray(blocks[:, :, 2:4]).view(np.float16)[..., 0].astype(np.float64)
        block_sums = xr.reshape(x.shape[0], nb, 32).sum(-1)
        ref += (s.astype(np.float64) - block_sums) @ mins.T
    return ref


def _k_for(qtype: QT) -> int:
    return 96 if GGML_QUANT_SIZES[qtype][0] <= 32 else 512


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [1, 3, PREFILL_MIN_ROWS + 5, 40])  # decode, tile 16, tile 64
def test_matches_float64_reference(qtype: QT, rows: int) -> None:
    n_in = _k_for(qtype) + (0 if qtype not in (QT.F32, QT.F16, QT.BF16) else 7)  # odd K for floats
    m = _matrix(qtype, 37, n_in)  # odd row count: tails of the row partition
    x = np.random.default_rng(1).standard_normal((rows, n_in)).astype(np.float32)
    y = matmul(prepare(x, qtype), m)
    ref = _reference(x, m)
    scale = np.abs(ref).max()
    assert y.shape == (rows, 37)
    # Each output is a sum of K/qk float32-rounded terms: relative error ~ (K/qk) * 2^-24.
    np.testing.assert_allclose(y, ref, rtol=0, atol=scale * 2e-6)


# the types with 16-row kernels (core/model/kernels/qmm/rows.py: one row's tail path vs 16 rows, 1 vs 70
# tokens) and types whose batches take the token-tiled kernel (Q2_K, IQ4_XS, F16)
@pytest.mark.parametrize(
    "qtype",
    [QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q2_K, QT.IQ4_XS, QT.F16, *LOW_BIT_TYPES,
     *SPLIT_TYPES],
    ids=lambda t: t.name,
)
def test_row_alone_equals_row_in_batch(qtype: QT) -> None:
    """A token's result does not depend on the batch around it (nor on the kernel chosen)."""
    k = _k_for(qtype)
    m = _matrix(qtype, 45, k, seed=3)
    x = np.random.default_rng(4).standard_normal((70, k)).astype(np.float32)
    full = matmul(prepare(x, qtype), m)
    for i in (0, 5, 69):
        alone = matmul(prepare(x[i : i + 1], qtype), m)
        assert np.array_equal(alone[0], full[i])
    part = matmul(prepare(x[10:13], qtype), m)
    assert np.array_equal(part, full[10:13])


@pytest.mark.parametrize("qtype", [QT.MXFP4, QT.TQ2_0, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ3_XXS, QT.IQ1_S, QT.IQ2_S, QT.IQ3_S,
                                   QT.IQ1_M, QT.TQ1_0],
                         ids=lambda t: t.name)
def test_16_row_kernel_gives_the_unpacking_paths_bits(qtype: QT) -> None:
    """A low-bit type's 16-row kernel (rows.py, rows_grid.py) gives each row the bits of the
    row unpacked to int16 codes and dotted alone (decode.py's path for a matrix's last rows):
    the same exact block sums, the same float terms in the same order."""
    k = _k_for(qtype) * 2
    m = _matrix(qtype, 32, k, seed=7)
    x = np.random.default_rng(8).standard_normal((20, k)).astype(np.float32)
    for rows in (1, 3, 20):
        xa = prepare(x[:rows], qtype)
        full = matmul(xa, m)
        for i in (0, 5, 17, 31):
            alone = matmul(xa, QuantMatrix(m.data[i : i + 1], qtype, k))
            assert np.array_equal(alone[:, 0], full[:, i])


@pytest.mark.parametrize("case", ["k2880", "k160", "k512"])
def test_q8_0_matmul_gives_ggml_bits(case: str) -> None:
    """Q8_0 weights give libggml's own matmul bits (tests/fixtures/quants/matmul_q8_0.npz: one
    activation row through ggml_vec_dot_q8_0_q8_0, several through tinyBLAS; the AVX2 and
    AVX-512 builds agree), stored and packed, for row lengths that are and are not multiples of
    256: the float order is ggml's eight FMA lanes per row (core/model/kernels/qmm/lanes.py).
    A sequential sum over blocks gives the same values to ~1e-7 relative, but a changed last
    bit moves some later activation across a Q8 rounding step."""
    from llamacli.core.model.kernels.qmm.matrix import pack_matrix

    z = np.load(Path(__file__).parent / "fixtures" / "quants" / "matmul_q8_0.npz")
    w, x = z[f"{case}.w"], z[f"{case}.x"]
    stored = QuantMatrix(w, QT.Q8_0, x.shape[1])
    packed = QuantMatrix(w, QT.Q8_0, x.shape[1])
    assert pack_matrix(packed) == (w.shape[0] % 8 == 0)
    for rows in (1, 3, x.shape[0]):
        xa = prepare(x[:rows], QT.Q8_0)
        want = z[f"{case}.y{rows}"]
        assert np.array_equal(matmul(xa, stored), want)
        assert np.array_equal(matmul(xa, packed), want)


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.MXFP4, QT.Q4_K, QT.Q6_K], ids=lambda t: t.name)
def test_packed_matrix_gives_the_same_bits(qtype: QT) -> None:
    """A matrix of a 32-value type (MXFP4 included), Q4_K or Q6_K packed (rows interleaved by eights, core/model/
    kernels/qmm/packed.py, packed_k.py) gives every row the bits of the stored one, for one and
    many activation rows (a block of -128 codes included), alone and beside other matrices."""
    from llamacli.core.model.kernels.qmm import matmul_many
    from llamacli.core.model.kernels.qmm.matrix import pack_matrix

    k = 768 if qtype in (QT.Q4_K, QT.Q6_K) else 160
    stored = [_matrix(qtype, 48, k, seed=40), _matrix(qtype, 24, k, seed=41)]
    packed = [QuantMatrix(m.data, m.qtype, m.n_in) for m in stored]
    assert all(pack_matrix(m) for m in packed) and not pack_matrix(_matrix(qtype, 44, k))  # 44: not a multiple of 8
    assert packed[0].packed is not None and packed[0].packed.shape == (6, stored[0].data.shape[1] * 8)
    x = np.random.default_rng(42).standard_normal((70, k)).astype(np.float32)
    x[1, 32:64] = 1e-39
    for rows in (1, 3, 70):
        xa = prepare(x[:rows], qtype)
        for s, p in zip(stored, packed):
            assert np.array_equal(matmul(xa, p), matmul(xa, s))
        assert all(np.array_equal(a, b) for a, b in zip(matmul_many(xa, packed), matmul_many(xa, stored)))


@pytest.mark.parametrize("qtype", [QT.Q5_0, QT.Q4_K, QT.MXFP4, QT.IQ2_XXS], ids=lambda t: t.name)
def test_thread_count_does_not_change_results(qtype: QT) -> None:
    k = _k_for(qtype)
    m = _matrix(qtype, 301, k, seed=5)
    x = np.random.default_rng(6).standard_normal((20, k)).astype(np.float32)
    results = []
    try:
        for n in (1, 2, 4):
            threads.set_threads(n)
            results.append((matmul(prepare(x[:2], qtype), m), matmul(prepare(x, qtype), m)))
    finally:
        threads.set_threads(None)
    for a, b in results[1:]:
        assert np.array_equal(a, results[0][0]) and np.array_equal(b, results[0][1])


_CROSS_CPU_SCRIPT = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import test_qmm as T
from llamacli.core.model.kernels.qmm import matmul, prepare, threads
threads.set_threads(int(sys.argv[3]))
out = []
from llamacli.core.model.kernels.qmm.matrix import pack_matrix
for qt in (T.QT.Q8_0, T.QT.Q4_0, T.QT.Q4_1, T.QT.Q5_0, T.QT.Q5_1, T.QT.Q4_K, T.QT.Q5_K, T.QT.Q6_K, T.QT.IQ4_XS, T.QT.F16,
           T.QT.MXFP4, T.QT.TQ1_0, T.QT.TQ2_0, T.QT.IQ2_XXS, T.QT.IQ2_XS, T.QT.IQ2_S, T.QT.IQ3_XXS, T.QT.IQ3_S, T.QT.IQ1_S, T.QT.IQ1_M,
           *T.SPLIT_TYPES):
    k = T._k_for(qt)
    ms = [T._matrix(qt, 33, k, seed=9), T._matrix(qt, 40, k, seed=12)]
    pack_matrix(ms[1])  # the 32-value types, Q4_K, Q6_K: rows interleaved by eights (packed.py)
    x = np.random.default_rng(10).standard_normal((20, k)).astype(np.float32)
    x[3, :32] = 1e-39  # a block of Q8_0 codes -128 (its 127 / amax overflows; d rounds to 0)
    for m in ms:
        out.append(matmul(prepare(x[:1], qt), m))
        out.append(matmul(prepare(x[:2], qt), m))
        out.append(matmul(prepare(x, qt), m))
z = np.load(T.Path(sys.argv[1]) / "fixtures" / "quants" / "matmul_q8_0.npz")
for case in ("k2880", "k160"):  # Q8_0 in ggml's lane order (lanes.py), stored and packed
    m = T.QuantMatrix(z[case + ".w"], T.QT.Q8_0, z[case + ".x"].shape[1])
    out.append(matmul(prepare(z[case + ".x"], T.QT.Q8_0), m))
    if pack_matrix(m):
        out.append(matmul(prepare(z[case + ".x"][:1], T.QT.Q8_0), m))
import test_qmm_attention as A
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm.attention import attention
q, kc, vc = A._inputs(2, 4, 1, 9, 70, 256, 256, seed=11)
out.append(attention(q, kc, vc, K.attention_mask(np.array([[3] * 9, list(range(61, 70))]), 0, 70, None), 0.0625, None))
from llamacli.core.model.kernels.qmm.attention import attention_f32
rng = np.random.default_rng(13)  # the encoders' float32 attention: 8-row pairs, 4-row tails, 80-column tiles
out.append(attention_f32(*(rng.standard_normal((1, 2, n, 72)).astype(np.float32) for n in (21, 70, 70)), 0.117851))
for qt in (T.QT.F16, T.QT.BF16):  # the tiled float GEMM: 4 x 4 or 2 x 2 tiles and their tails
    m = T._matrix(qt, 70, 160, seed=14)
    out.append(matmul(prepare(np.random.default_rng(15).standard_normal((67, 160)).astype(np.float32), qt), m))
np.save(sys.argv[2], np.concatenate([o.reshape(-1) for o in out]))
from numba.core.registry import cpu_target
from llamacli.core.model.kernels.qmm.isa import target_path
print("path", target_path(cpu_target.target_context))
"""

# Each code path of core/model/kernels/qmm/isa.py: (numba CPU name, features, the host
# features it needs to run). NUMBA_CPU_NAME alone keeps the host's feature list (it would
# compile AVX-512 code for "haswell"): each names its features, the others switched off.
_NO_AVX512 = "-avx512f,-avx512bw,-avx512dq,-avx512cd,-avx512vl,-avx512vnni,-avx512bf16,-avx512vbmi,-avx512vbmi2,-avx512ifma,-avx512bitalg,-avx512vpopcntdq,-avx512vp2intersect"
_AVX2 = "+sse4.2,+popcnt,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe"
_PATHS = {
    "avx2": ("haswell", f"{_AVX2},-avxvnni,{_NO_AVX512}", {"avx2", "fma", "f16c"}),
    "avx-vnni": ("alderlake", f"{_AVX2},+avxvnni,{_NO_AVX512}", {"avx2", "fma", "f16c", "avxvnni"}),
    "avx512bw": ("skylake-avx512", f"{_AVX2},-avxvnni,+avx512f,+avx512bw,+avx512dq,+avx512cd,+avx512vl,-avx512vnni", {"avx512bw", "avx512vl"}),
    # Ivy Bridge: AVX and F16C (the kernels' fp16 conversions), no AVX2
    "generic": ("ivybridge", "+sse4.2,+popcnt,+avx,+f16c,-avx2,-fma,-bmi2,-avxvnni," + _NO_AVX512, {"avx", "f16c"}),
}


def _run_cross_cpu(tmp_path, name: str, cpu: str | None, features: str | None, n_threads: int) -> tuple[np.ndarray, str]:  # type: ignore[no-untyped-def]
    """The cross-CPU script's results and the path it reports, compiled for `cpu` (None: the host)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ)
    env["NUMBA_NUM_THREADS"] = str(n_threads)
    for k in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        env.pop(k, None)
    if cpu and features:
        env["NUMBA_CPU_NAME"] = cpu
        env["NUMBA_CPU_FEATURES"] = features
        env["NUMBA_CACHE_DIR"] = str(tmp_path / f"numba-cache-{name}")  # never mix with the host cache
    f = tmp_path / f"{name}.npy"
    cmd = [sys.executable, "-c", _CROSS_CPU_SCRIPT, str(Path(__file__).parent), str(f), str(n_threads)]
    run = subprocess.run(cmd, env=env, check=True, timeout=900, capture_output=True, text=True)
    return np.load(f), run.stdout.split()[-1]


def _host_lacks(path: str) -> set[str]:
    from llvmlite import binding as ll

    return {f for f in _PATHS[path][2] if not ll.get_host_cpu_features().get(f, False)}


@pytest.fixture(scope="module")
def cross_cpu_runs(request, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The host's run and each selected path's, started together (tests/side_runs.py): each is
    a cold compile of most kernels."""
    from functools import partial

    from tests.side_runs import selected, together

    paths = [p for p in (item.callspec.params["path"] for item in selected(request, "test_same_bits_on_every_code_path"))
             if not _host_lacks(p)]
    jobs = {"host": partial(_run_cross_cpu, tmp_path_factory.mktemp("host"), "host", None, None, 1)}
    for path in paths:
        jobs[path] = partial(_run_cross_cpu, tmp_path_factory.mktemp(path), path, _PATHS[path][0], _PATHS[path][1], 4)
    with together(jobs) as runs:
        yield runs


@pytest.mark.slow
@pytest.mark.parametrize("path", list(_PATHS))
def test_same_bits_on_every_code_path(path: str, cross_cpu_runs) -> None:  # type: ignore[no-untyped-def]
    """The kernels compiled for each instruction-set path (core/model/kernels/qmm/isa.py) on 4
    threads give the same bits as this CPU's on 1: integer block dots are exact and the float
    order is fixed, whatever the SIMD width, the instructions (vpdpbusd, vpmaddubsw, vpmaddwd or
    the products written out) and the thread count (the attention kernel's float32 sums too).
    A path needs the instructions it is compiled for: on a CPU without them it is skipped."""
    missing = _host_lacks(path)
    if missing:
        pytest.skip(f"this CPU lacks {sorted(missing)}")
    got, reported = cross_cpu_runs[path].result()
    assert reported == path
    assert np.array_equal(got, cross_cpu_runs["host"].result()[0])


def test_model_weights_are_views_of_the_mapped_file(demo_model) -> None:  # type: ignore[no-untyped-def]
    """No float32 copy of a quantized matrix at rest: every matmul weight is the file's bytes,
    and those of the 32-value types, Q4_K and Q6_K also their packed form, of the same size."""
    from llamacli.core.model.load import load_model

    model, g, stats = load_model(demo_model)
    mapped = g.data
    mats = [model.output.q, model.tok_embd.q]
    for lw in model.layers:
        mats += [lw.wq.q, lw.wk.q, lw.wv.q, lw.wo.q, lw.w_gate.q, lw.w_up.q, lw.w_down.q]
    for m in mats:
        assert m is not None and m.data.dtype == np.uint8
        assert np.shares_memory(m.data, mapped)
        assert not m.data.flags.owndata
        packable = m.qtype in (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q4_K, QT.Q6_K) and m.n_out % 8 == 0
        assert (m.packed is not None) == packable and (m.packed is None or m.packed.nbytes == m.data.nbytes)
    assert stats.weight_bytes < 1 << 20  # only the norm vectors are float32
    assert stats.packed_bytes == sum({id(m): m.packed.nbytes for m in mats if m.packed is not None}.values())


@pytest.mark.slow
def test_demo_logits_do_not_depend_on_batch_or_chunking(demo_model) -> None:  # type: ignore[no-untyped-def]
    """A token's logits are the same bits whether its prompt is evaluated alone, in chunks
    (as a prompt cache or n_batch splits it), or beside another sequence in the batch."""
    from llamacli.core.model.state.batch import Batch
    from llamacli.core.model.load import load_model

    model, _, _ = load_model(demo_model)
    a = [2, 818, 5279, 529, 7001, 563, 9079, 236761, 669, 5279, 529, 9405, 563]
    b = [2, 2063, 1138, 236769, 236746, 236764, 518, 1473]

    def run(chunks: list[list[int]]) -> np.ndarray:
        cache = model.new_cache(1, 64)
        pos = 0
        for c in chunks:
            out = model.forward(Batch.single(c, start_pos=pos, all_logits=True), cache)
            pos += len(c)
        return out[-1]

    whole = run([a])
    assert np.array_equal(run([a[:5], a[5:]]), whole)
    assert np.array_equal(run([a[:12], a[12:]]), whole)  # the last token decoded alone
    # a and b in one batch (two sequences, one forward)
    cache = model.new_cache(2, 64)
    seq = np.array([0] * len(a) + [1] * len(b))
    pos = np.concatenate([np.arange(len(a)), np.arange(len(b))])
    batch = Batch(np.array(a + b), seq, pos, output=np.ones(len(a) + len(b), dtype=bool))
    both = model.forward(batch, cache)
    assert np.array_equal(both[len(a) - 1], whole)


@pytest.mark.parametrize("types", [(QT.Q5_0, QT.Q5_0, QT.Q8_0), (QT.Q4_K, QT.Q5_K), (QT.Q4_1, QT.Q5_1)], ids=str)
def test_matmul_many_equals_one_by_one(types: tuple[QT, ...]) -> None:
    """Q/K/V (gate/up) in one parallel loop give the bits of separate matmuls."""
    from llamacli.core.model.kernels.qmm import matmul_many

    k = _k_for(types[0])
    ms = [_matrix(qt, 20 + 7 * i, k, seed=20 + i) for i, qt in enumerate(types)]
    x = np.random.default_rng(21).standard_normal((3, k)).astype(np.float32)
    together = matmul_many(prepare(x, types[0]), ms)
    for m, y in zip(ms, together):
        assert np.array_equal(y, matmul(prepare(x, m.qtype), m))


def test_contention_raises_the_serial_threshold(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Other processes' CPU time (the machine's busy time minus ours) above half a core makes
    medium matmuls run on the calling thread; on a quiet machine they use the pool."""
    clock = [99.0]
    sample = [(99.0, 0.0, 0.0)]  # (time, machine busy seconds, ours)
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(threads._Contention, "_sample", staticmethod(lambda: sample[0]))
    c = threads._Contention()
    clock[0], sample[0] = 100.0, (100.0, 1.2, 0.1)
    assert c.update() is True  # 1.1 s of others' CPU in 1 s
    clock[0], sample[0] = 101.0, (101.0, 2.2, 1.0)
    assert c.update() is False  # 1.0 s busy, 0.9 s of it ours
    monkeypatch.setattr(threads, "_contention", c)
    seen: list[int] = []
    monkeypatch.setattr(threads.numba, "set_num_threads", lambda n: seen.append(n))
    monkeypatch.setattr(threads._local, "n", None, raising=False)
    c.busy, c._last = True, None  # without /proc/stat the last state stays
    threads.configure(1 << 20)
    c.busy = False
    threads.configure(1 << 20)
    assert seen == [1, threads._wanted or threads.max_threads()]


@pytest.mark.slow
def test_demo_decoding_beside_many_sequences_equals_alone(demo_model) -> None:  # type: ignore[no-untyped-def]
    """Ten sequences of different lengths decoding one token each in one forward (their
    attention in several groups, keys padded to the longest of each) give each sequence the
    bits it gets decoding alone."""
    from llamacli.core.model.state.batch import Batch
    from llamacli.core.model.load import load_model

    model, _, _ = load_model(demo_model)
    rng = np.random.default_rng(12)
    prompts = [rng.integers(3, 20000, size=n).tolist() for n in (3, 17, 5, 9, 30, 1, 12, 8, 21, 2)]
    nxt = rng.integers(3, 20000, size=len(prompts))

    def prefilled(n_seq: int, seqs: list[int]):  # type: ignore[no-untyped-def]
        cache = model.new_cache(n_seq, 64)
        for slot, s in enumerate(seqs):
            model.forward(Batch.single(prompts[s], seq_id=slot), cache)
        return cache

    cache = prefilled(len(prompts), list(range(len(prompts))))
    n = len(prompts)
    step = Batch(nxt, np.arange(n), np.array([len(p) for p in prompts]), decode=np.ones(n, dtype=bool))
    together = model.forward(step, cache)
    for s in (0, 4, 9):
        alone_cache = prefilled(1, [s])
        one = Batch(nxt[s : s + 1], np.zeros(1), np.array([len(prompts[s])]), decode=np.ones(1, dtype=bool))
        assert np.array_equal(model.forward(one, alone_cache)[0], together[s])


@pytest.mark.parametrize(
    "types, n_calls",
    [((QT.Q4_K, QT.Q4_K, QT.Q6_K), 3), ((QT.Q5_0, QT.Q8_0, QT.Q4_K), 2), ((QT.Q4_1, QT.Q5_1, QT.Q8_0), 2)],
    ids=str,
)
def test_planned_decode_calls_equal_matmuls(types: tuple[QT, ...], n_calls: int) -> None:
    """The calls a compiled decode step makes for one input's matrices (core/model/kernels/qmm/
    layer.py): grouped as `matmul_many` groups them (here 2 or 3 calls, padded to 3), giving
    each matrix the bits of its own matmul, plus its bias."""
    from llamacli.core.model.kernels.qmm.layer import _project
    from llamacli.core.model.kernels.qmm.matrix import plan_decode_calls

    k = 512
    ms = [_matrix(qt, 20 + 7 * i, k, seed=30 + i) for i, qt in enumerate(types)]
    calls = plan_decode_calls(ms, 3)
    assert len(calls) == 3 and sum(c[2].shape[0] > 0 for c in calls) == n_calls
    x = np.random.default_rng(31).standard_normal((1, k)).astype(np.float32)
    outs = tuple(np.zeros((1, m.n_out), dtype=np.float32) for m in ms)
    bias = np.random.default_rng(32).standard_normal(ms[1].n_out).astype(np.float32)
    none = np.zeros(0, np.float32)
    assert _project(x, calls, outs, (none, bias, none), 1 << 40, 1)
    for i, m in enumerate(ms):
        y = matmul(prepare(x, m.qtype), m)
        assert np.array_equal(outs[i], y + bias if i == 1 else y)


@pytest.mark.parametrize("qtype", SPLIT_TYPES, ids=lambda t: t.name)
def test_split_types_match_ggml_mul_mat(qtype: QT) -> None:
    """NVFP4, Q1_0, Q2_0 against libggml-cpu's own ggml_mul_mat (tests/fixtures/quants/split.npz,
    one thread, AVX-512 build): the same integer block dots and scale products; ggml sums the
    terms lane by lane in its registers, we in one fixed order (core/model/kernels/qmm/block_dots.py),
    so the last bits may differ: within (K / 16) float32 roundings of the largest output."""
    z = np.load(Path(__file__).parent / "fixtures" / "quants" / "split.npz")
    w, x = z[f"{qtype.name}.w"], z[f"{qtype.name}.x"]
    m = QuantMatrix(w, qtype, x.shape[1])
    for rows in (1, 5):
        ref = z[f"{qtype.name}.y{rows}"]
        y = matmul(prepare(x[:rows], qtype), m)
        np.testing.assert_allclose(y, ref, rtol=0, atol=np.abs(ref).max() * (x.shape[1] // 16) * 2.0**-24)


def _ggml_generic_dot(qtype: QT, w_row: np.ndarray, codes: np.ndarray, xd: np.ndarray) -> np.float32:
    """ggml-cpu/quants.c's ggml_vec_dot_{nvfp4,q1_0,q2_0}_q8_0_generic in float32 scalars: the
    weight codes and scales from dequantize (value = scale * code), the Q8_0 activation's."""
    f32 = np.float32
    qk = GGML_QUANT_SIZES[qtype][0]
    vals = dequantize(w_row, qtype, (codes.size,))
    sumf = f32(0)
    for i in range(codes.size // qk):
        if qtype == QT.NVFP4:  # sumf += dy * d * (sumi_lo + sumi_hi), per 16 values
            for s in range(4):
                d = UE4M3_HALF[w_row[36 * i + s]]
                q = np.array([KV_FP4[v & 15] for v in w_row[36 * i + 4 + 8 * s: 36 * i + 12 + 8 * s]]
                             + [KV_FP4[v >> 4] for v in w_row[36 * i + 4 + 8 * s: 36 * i + 12 + 8 * s]])
                o = qk * i + 16 * s
                isum = int((q.astype(np.int64) * codes[o : o + 16]).sum())
                sumf = f32(sumf + f32(f32(xd[o // 32] * d) * f32(isum)))
        else:  # sumi += d1 * sumi_block over the Q8_0 blocks; sumf += d0 * sumi
            d0 = f32(np.frombuffer(w_row[18 * i : 18 * i + 2].tobytes(), dtype=np.float16)[0])
            sumi = f32(0)
            for k in range(qk // 32):
                o = qk * i + 32 * k
                q = np.rint(vals[o : o + 32] / d0).astype(np.int64) if d0 != 0 else np.zeros(32, np.int64)
                sumi = f32(sumi + f32(xd[o // 32] * f32(int((q * codes[o : o + 32]).sum()))))
            sumf = f32(sumf + f32(d0 * sumi))
    return sumf


@pytest.mark.parametrize("qtype", SPLIT_TYPES, ids=lambda t: t.name)
def test_split_types_sum_in_ggml_generic_order(qtype: QT) -> None:
    """The scale terms of NVFP4, Q1_0, Q2_0 in ggml's generic order, bit for bit, in the
    one-row and the token-tiled kernels (Q1_0/Q2_0: the weight scale after the block's sum)."""
    m = _matrix(qtype, 5, 512, seed=21)
    x = np.random.default_rng(22).standard_normal((40, 512)).astype(np.float32)
    xa = prepare(x, qtype)
    for y, rows in ((matmul(prepare(x[:1], qtype), m), 1), (matmul(xa, m), 40)):
        for t in (0, rows - 1):
            for r in range(5):
                assert y[t, r] == _ggml_generic_dot(qtype, m.data[r], xa.codes[t].astype(np.int64), xa.d[t]), (rows, t, r)
