"""core.numerics: activation roundings bit-exact against the bytes libggml-cpu's from_float (and
the repacked-path quantizers) made of the same rows (committed fixtures), plus naive per-block
loops transcribed from ggml's C."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from llamacli.core.model.kernels import numerics as nm
from llamacli.core.errors import UnsupportedTensorType

FIXTURES = Path(__file__).parent / "fixtures" / "quants"


@pytest.fixture(scope="module")
def acts() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "activations.npz") as data:
        return {k: data[k] for k in data.files}


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


# --- parsing the reference bytes (block layouts of ggml-common.h / repack.h) -------------------


def deq_q8_0(raw: np.ndarray) -> np.ndarray:
    b = raw.reshape(raw.shape[0], -1, 34)  # block_q8_0: d f16 | qs[32]
    return (b[..., 2:].view(np.int8) * f16(b[..., :2])).reshape(raw.shape[0], -1)


def deq_q8_1(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = raw.reshape(raw.shape[0], -1, 36)  # block_q8_1: d f16 | s f16 | qs[32]
    values = (b[..., 4:].view(np.int8) * f16(b[..., :2])).reshape(raw.shape[0], -1)
    return values, f16(b[..., 2:4])[..., 0]


def deq_q8_K(raw: np.ndarray) -> np.ndarray:
    b = raw.reshape(raw.shape[0], -1, 292)  # block_q8_K: d f32 | qs[256] | bsums i16[16]
    d = np.ascontiguousarray(b[..., :4]).view(np.float32)
    return (b[..., 4:260].view(np.int8) * d).reshape(raw.shape[0], -1)


def deq_4x8(raw: np.ndarray, block: int) -> np.ndarray:
    """block_q8_0x4 (d f16[4] | qs[128]) / block_q8_Kx4 (d f32[4] | qs[1024] | bsums[64]):
    4 rows interleaved 8 bytes at a time: qs[32 * c + 8 * r + t] = row r, value 8 * c + t."""
    groups = raw.shape[0]
    if block == 32:
        b = raw.reshape(groups, -1, 136)
        d = f16(b[..., :8])  # (g, nb, 4)
        qs = b[..., 8:136]
    else:
        b = raw.reshape(groups, -1, 1168)
        d = np.ascontiguousarray(b[..., :16]).view(np.float32)
        qs = b[..., 16 : 16 + 1024]
    q = qs.view(np.int8).reshape(groups, -1, block // 8, 4, 8)  # [g, nb, c, r, t]
    q = q.transpose(0, 3, 1, 2, 4).reshape(groups, 4, -1, block)  # [g, r, nb, value]
    return (q * d.transpose(0, 2, 1)[..., None]).reshape(4 * groups, -1)


# --- against libggml ---------------------------------------------------------------------------


def test_q8_0_matches_ggml(acts: dict[str, np.ndarray]) -> None:
    got = nm.round_q8_0(acts["x"])
    np.testing.assert_array_equal(bits(got), bits(deq_q8_0(acts["Q8_0"])))
    np.testing.assert_array_equal(bits(got), bits(acts["Q8_0.deq"]))  # libggml's own to_float


def test_q8_0_repacked_quantizer_is_the_same(acts: dict[str, np.ndarray]) -> None:
    # ggml_quantize_mat_q8_0_4x8 (Q4_0 / IQ4_NL repacked weights) rounds like quantize_row_q8_0.
    np.testing.assert_array_equal(bits(deq_4x8(acts["Q8_0_4x8"], 32)), bits(nm.round_q8_0(acts["x"])))


def test_q8_1_matches_ggml(acts: dict[str, np.ndarray]) -> None:
    values, sums = nm.round_q8_1(acts["x"], with_sums=True)
    ref_values, ref_sums = deq_q8_1(acts["Q8_1"])
    np.testing.assert_array_equal(bits(values), bits(ref_values))
    np.testing.assert_array_equal(bits(sums), bits(ref_sums))
    np.testing.assert_array_equal(bits(nm.round_q8_1(acts["x"])), bits(values))


def test_q8_K_matches_ggml(acts: dict[str, np.ndarray]) -> None:
    got = nm.round_q8_K(acts["x"])
    np.testing.assert_array_equal(bits(got), bits(deq_q8_K(acts["Q8_K"])))
    np.testing.assert_array_equal(bits(got), bits(acts["Q8_K.deq"]))


def test_q8_K_repacked_matches_ggml_quantize_mat(acts: dict[str, np.ndarray]) -> None:
    x = acts["x"]  # 32 rows: all in full groups of 4, so all through the repack quantizer
    repacked = deq_4x8(acts["Q8_K_4x8"], 256)
    np.testing.assert_array_equal(bits(nm.round_q8_K(x, repacked=True)), bits(repacked))
    # The paths differ only on blocks holding -amax before +amax (d and every code change sign)
    # and on blocks whose iscale overflows; in both cases only the sign of zero values changes.
    reference = nm.round_q8_K(x)
    differs = np.any(bits(reference) != bits(repacked), axis=1)
    xb = x.reshape(x.shape[0], -1, 256)
    amax = np.abs(xb).max(axis=-1, keepdims=True)
    first = np.take_along_axis(xb, np.abs(xb).argmax(axis=-1)[..., None], axis=-1)
    tie = ((first < 0) & np.any(xb == amax, axis=-1, keepdims=True) & (amax > 0))[..., 0]
    overflow = ((amax > 0) & (amax < 127 / np.finfo(np.float32).max))[..., 0]
    np.testing.assert_array_equal(differs, (tie | overflow).any(axis=1))
    assert tie.any() and overflow.any()
    np.testing.assert_array_equal(reference, repacked)  # as values (-0.0 == 0.0): equal


def test_q8_K_repacked_leaves_remainder_rows_on_reference_path(acts: dict[str, np.ndarray]) -> None:
    x = acts["x"]
    tie_rows = np.nonzero(np.any(bits(nm.round_q8_K(x)) != bits(nm.round_q8_K(x, repacked=True)), axis=1))[0]
    row = x[tie_rows[0]]
    batch = np.stack([row] * 6)  # 6 tokens: rows 0-3 via quantize_mat_q8_K_4x8, 4-5 via from_float
    got = nm.round_q8_K(batch, repacked=True)
    from_ggml = deq_4x8(acts["Q8_K_4x8"], 256)[tie_rows[0]]
    np.testing.assert_array_equal(bits(got[:4]), bits(np.stack([from_ggml] * 4)))
    np.testing.assert_array_equal(bits(got[4:]), bits(nm.round_q8_K(batch[4:])))
    assert np.any(bits(got[0]) != bits(got[4]))
    # Planes (3-D input) are grouped separately: axis -2 is the token axis.
    planes = np.stack([batch, batch])
    np.testing.assert_array_equal(bits(nm.round_q8_K(planes, repacked=True)), bits(np.stack([got, got])))


def test_f16_matches_ggml(acts: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(bits(nm.round_f16(acts["x"])), bits(f16(acts["F16"])))


def test_bf16_matches_ggml(acts: dict[str, np.ndarray]) -> None:
    ref = (np.ascontiguousarray(acts["BF16"]).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(bits(nm.round_bf16(acts["x"])), bits(ref))


def test_bf16_specials() -> None:
    x = np.array([np.inf, -np.inf, np.nan, -0.0, 3.4028235e38, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8], np.float32)
    x = np.concatenate([x, np.array([0x7F800001], np.uint32).view(np.float32)])  # signalling NaN
    got = bits(nm.round_bf16(x))
    assert list(got[:2]) == [0x7F800000, 0xFF800000]
    assert got[3] == 0x80000000 and got[4] == 0x7F800000  # -0 kept; FLT_MAX rounds to inf
    assert got[5] == 0x3F800000 and got[6] == 0x3F820000  # ties to even
    assert got[7] == 0x7FC00000  # NaN made quiet: (u >> 16) | 64


def test_vec_dot_type_matches_ggml_cpu_traits(acts: dict[str, np.ndarray]) -> None:
    table = acts["vec_dot_type"]
    for t in QT:
        expected = int(table[int(t)]) if int(t) < len(table) else -1
        if t == QT.F32:
            assert nm.vec_dot_type(t) is None  # F32 x F32: nothing to convert
        elif expected < 0:
            with pytest.raises(UnsupportedTensorType):
                nm.vec_dot_type(t)
        else:
            assert nm.vec_dot_type(t) == QT(expected), t.name
    assert nm.vec_dot_type(QT.Q4_1) == QT.Q8_1 and nm.vec_dot_type(QT.Q5_1) == QT.Q8_1


# --- naive transcriptions of the C ---------------------------------------------------------------

f32 = np.float32


def naive_q8_0_avx(x: np.ndarray) -> np.ndarray:
    """quantize_row_q8_0 (AVX2 path) then dequantize_row_q8_0, one block at a time."""
    y = []
    for blk in x.reshape(-1, 32):
        amax = f32(max(abs(float(v)) for v in blk))
        d = amax / f32(127)
        idv = f32(127) / amax if amax != 0 else f32(0)
        d16 = f32(np.float16(d))
        for v in blk:
            q = int(np.rint(f32(v) * idv))  # _mm256_round_ps(_MM_ROUND_NEAREST): half to even
            y.append(f32(q) * d16)
    return np.array(y, dtype=np.float32).reshape(x.shape)


def nearest_int(fval: np.float32) -> int:
    # ggml-quants.c: add 1.5 * 2^23 in float32, read the low mantissa bits
    val = np.array([fval + f32(12582912.0)], dtype=np.float32)
    i = int(val.view(np.int32)[0])
    return (i & 0x007FFFFF) - 0x00400000


def naive_q8_K(x: np.ndarray) -> np.ndarray:
    """quantize_row_q8_K_ref then dequantize_row_q8_K."""
    y = []
    for blk in x.reshape(-1, 256):
        amax, mx = f32(0), f32(0)
        for v in blk:
            if abs(v) > amax:
                amax, mx = abs(v), v
        if amax == 0:
            y += [f32(0)] * 256
            continue
        iscale = f32(-127) / mx
        d = f32(1) / iscale
        y += [d * f32(min(127, nearest_int(iscale * f32(v)))) for v in blk]
    return np.array(y, dtype=np.float32).reshape(x.shape)


def test_q8_0_matches_naive_loop() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 96)) * 5).astype(np.float32)
    x[1, :32] = rng.integers(-126, 126, 32) + 0.5
    x[1, 7] = 127.0  # id = 1: ties at .5
    x[2, 32:64] = 0
    np.testing.assert_array_equal(bits(nm.round_q8_0(x)), bits(naive_q8_0_avx(x)))


def test_q8_K_matches_naive_loop() -> None:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 512)) * 3).astype(np.float32)
    x[0, :256] = rng.integers(-126, 126, 256) + 0.5
    x[0, 9], x[0, 100] = -127.0, 127.0  # negative max first, ties
    x[1, 256:] = 0
    np.testing.assert_array_equal(bits(nm.round_q8_K(x)), bits(naive_q8_K(x)))


def test_ties_round_half_to_even() -> None:
    x = np.zeros(32, np.float32)
    x[:6] = [127.0, 0.5, 1.5, 2.5, -0.5, -2.5]
    assert list(nm.round_q8_0(x)[:6]) == [127.0, 0.0, 2.0, 2.0, 0.0, -2.0]
    assert bits(nm.round_q8_0(x))[4] == 0  # +0.0, as an int8 code 0 dequantizes


# --- shapes and dispatch -----------------------------------------------------------------------


def test_shapes_and_noncontiguous_input() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 512)).astype(np.float32)
    for fn in (nm.round_q8_0, nm.round_q8_1, nm.round_q8_K, nm.round_f16, nm.round_bf16):
        out = fn(x)
        assert out.shape == x.shape and out.dtype == np.float32
        np.testing.assert_array_equal(fn(x[:, :, :256].copy()), fn(x[:, :, :256]))  # view input
    np.testing.assert_array_equal(nm.round_q8_0(x[0, 0]), nm.round_q8_0(x)[0, 0])  # 1-D row


def test_inputs_are_not_modified() -> None:
    x = np.random.default_rng(8).standard_normal((3, 256)).astype(np.float32)
    for row in (x, x[0], x[:1], x[:, :32]):
        before = row.copy()
        for fn in (nm.round_q8_0, nm.round_q8_1, nm.round_q8_K, nm.round_f16, nm.round_bf16):
            if fn is nm.round_q8_K and row.shape[-1] % 256:
                continue  # a 32-wide slice is not a whole Q8_K block
            fn(row)
        np.testing.assert_array_equal(row, before)


def test_f16_equals_numpy_cast_over_a_bit_pattern_sweep() -> None:
    # Every 4099th float32 bit pattern (~1M values: all exponents, subnormals, ties, overflow);
    # an offline sweep over all 2^32 patterns found no difference either (NaN excluded).
    u = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)
    u = np.concatenate([u, np.array([0x477FEFFF, 0x477FF000, 0x33000000, 0x33000001, 0x387FE000], np.uint32)])
    x = u.view(np.float32)
    x = x[~np.isnan(x)]
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(bits(nm.round_f16(x)), bits(expected))
    assert np.isnan(nm.round_f16(np.array([np.nan], np.float32)))[0]


def test_length_must_be_whole_blocks() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        nm.round_q8_0(np.zeros(48, np.float32))
    with pytest.raises(ValueError, match="multiple of 256"):
        nm.round_q8_K(np.zeros((2, 128), np.float32))


@pytest.mark.parametrize(
    ("wtype", "fn"),
    [
        (QT.Q4_0, nm.round_q8_0), (QT.Q5_0, nm.round_q8_0), (QT.Q8_0, nm.round_q8_0),
        (QT.IQ4_NL, nm.round_q8_0), (QT.Q4_1, nm.round_q8_1), (QT.Q5_1, nm.round_q8_1),
        (QT.Q2_K, nm.round_q8_K), (QT.Q3_K, nm.round_q8_K), (QT.Q4_K, nm.round_q8_K),
        (QT.Q5_K, nm.round_q8_K), (QT.Q6_K, nm.round_q8_K), (QT.IQ4_XS, nm.round_q8_K),
        (QT.F16, nm.round_f16), (QT.BF16, nm.round_bf16), (QT.F32, lambda x: x),
    ],
    ids=lambda v: getattr(v, "name", ""),
)
def test_round_activations_dispatch(wtype: QT, fn, acts: dict[str, np.ndarray]) -> None:
    x = acts["x"]
    np.testing.assert_array_equal(bits(nm.round_activations(x, wtype)), bits(fn(x)))


def test_round_activations_repacked_only_for_repacked_types(acts: dict[str, np.ndarray]) -> None:
    x = acts["x"]
    for t in (QT.Q4_K, QT.Q2_K):
        np.testing.assert_array_equal(
            bits(nm.round_activations(x, t, repacked=True)), bits(nm.round_q8_K(x, repacked=True))
        )
    for t in (QT.Q6_K, QT.Q5_K, QT.Q3_K):  # not repacked on x86: reference path
        np.testing.assert_array_equal(bits(nm.round_activations(x, t, repacked=True)), bits(nm.round_q8_K(x)))


def test_overflowing_scale_gives_zeros() -> None:
    x = np.full((1, 256), 1e-38, np.float32)  # 127 / amax overflows float32
    assert not np.any(nm.round_q8_0(x)) and not np.any(nm.round_q8_K(x))
    assert math.isfinite(float(nm.round_q8_K(x, repacked=False).sum()))
