"""core.dequant: bit-exact against libggml's to_float (committed fixtures), against naive
per-block loops transcribed from ggml-quants.c, and against gguf-py's dequantizers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT
from gguf.quants import _type_traits as gguf_dequantizers
from gguf.quants import dequantize as gguf_dequantize

from llamacli.core.model.kernels import dequant
from llamacli.core.errors import ModelLoadError, UnsupportedTensorType
from llamacli.core.model.kernels.dequant import SUPPORTED_TYPES, block_info, dequantize, dequantize_into, dequantize_rows

FIXTURES = Path(__file__).parent / "fixtures" / "quants"
QUANTIZED = sorted((t for t in SUPPORTED_TYPES if GGML_QUANT_SIZES[t][0] > 1), key=int)
# MXFP4, TQ*, IQ1..IQ3: checked against libggml (dequant_lowbit.npz) and gguf-py, not transcribed here
LOW_BIT = {QT.MXFP4, QT.TQ1_0, QT.TQ2_0, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S, QT.IQ1_M}


@pytest.fixture(scope="module")
def ggml_dequant() -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for f in ("dequant.npz", "dequant_lowbit.npz", "split.npz"):
        with np.load(FIXTURES / f) as data:
            out.update({k: data[k] for k in data.files})
    return out


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("qtype", sorted(SUPPORTED_TYPES - {QT.F32}, key=int), ids=lambda t: t.name)
def test_bit_exact_with_libggml_to_float(qtype: QT, ggml_dequant: dict[str, np.ndarray]) -> None:
    raw, expected = ggml_dequant[f"{qtype.name}.raw"], ggml_dequant[f"{qtype.name}.out"]
    got = dequantize(raw, qtype, expected.shape)
    assert got.dtype == np.float32 and got.shape == expected.shape
    # Bits, not values: also checks signed zeros and (F16) NaN payloads.
    np.testing.assert_array_equal(bits(got), bits(expected))


def test_fixtures_hold_real_model_blocks(ggml_dequant: dict[str, np.ndarray]) -> None:
    # Q8_0, Q5_0, Q4_K, Q6_K fixtures hold random blocks and as many demo-model blocks.
    for t in (QT.Q8_0, QT.Q5_0, QT.Q4_K, QT.Q6_K):
        n_random = 64 if GGML_QUANT_SIZES[t][0] == 256 else 256
        assert ggml_dequant[f"{t.name}.raw"].shape[0] == 2 * n_random


def test_f32_passthrough() -> None:
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_array_equal(bits(dequantize(x, QT.F32, (3, 64))), bits(x))
    np.testing.assert_array_equal(bits(dequantize(x.view(np.uint8), QT.F32, (3, 64))), bits(x))


def test_typed_f16_input_as_gguf_gives_it() -> None:
    h = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float16)
    np.testing.assert_array_equal(dequantize(h, QT.F16, (4, 32)), h.astype(np.float32))


# --- naive references, transcribed from ggml-quants.c's dequantize_row_* -----------------------

f32 = np.float32
KVALUES = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
KVALUES_FP4 = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]


def _h(b: np.ndarray, off: int) -> np.float32:
    return f32(np.frombuffer(bytes(b[off : off + 2]), dtype=np.float16)[0])


def _scale_min_k4(j: int, q: np.ndarray) -> tuple[int, int]:
    if j < 4:
        return int(q[j]) & 63, int(q[j + 4]) & 63
    return (int(q[j + 4]) & 0xF) | ((int(q[j - 4]) >> 6) << 4), (int(q[j + 4]) >> 4) | ((int(q[j]) >> 6) << 4)


def naive_block(qtype: QT, b: np.ndarray) -> list[np.float32]:
    """One block, the C loops line by line, in float32 scalar arithmetic."""
    y: list[np.float32] = []
    if qtype in (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.IQ4_NL):
        d = _h(b, 0)
        m = _h(b, 2) if qtype in (QT.Q4_1, QT.Q5_1) else f32(0)
        qh = int.from_bytes(bytes(b[4:8] if qtype == QT.Q5_1 else b[2:6]), "little")
        start = {QT.Q4_0: 2, QT.Q4_1: 4, QT.Q5_0: 6, QT.Q5_1: 8, QT.IQ4_NL: 2}[qtype]
        qs = b[start : start + 16]
        y = [f32(0)] * 32
        for j in range(16):
            x0, x1 = int(qs[j]) & 0x0F, int(qs[j]) >> 4
            if qtype == QT.IQ4_NL:
                y[j], y[j + 16] = d * f32(KVALUES[x0]), d * f32(KVALUES[x1])
                continue
            if qtype in (QT.Q5_0, QT.Q5_1):
                x0 |= ((qh >> j) << 4) & 0x10
                x1 |= (qh >> (j + 12)) & 0x10
            if qtype == QT.Q4_0:
                x0, x1 = x0 - 8, x1 - 8
            if qtype == QT.Q5_0:
                x0, x1 = x0 - 16, x1 - 16
            if qtype in (QT.Q4_1, QT.Q5_1):
                y[j], y[j + 16] = f32(x0) * d + m, f32(x1) * d + m
            else:
                y[j], y[j + 16] = f32(x0) * d, f32(x1) * d
    elif qtype == QT.Q8_0:
        d = _h(b, 0)
        y = [f32(int(q)) * d for q in b[2:34].view(np.int8)]
    elif qtype == QT.Q2_K:
        sc, qs, d, mn = b[0:16], b[16:80], _h(b, 80), _h(b, 82)
        is_ = 0
        for n in range(2):
            q = qs[32 * n : 32 * n + 32]
            for shift in (0, 2, 4, 6):
                for half in (0, 16):
                    s = int(sc[is_])
                    is_ += 1
                    dl, ml = d * f32(s & 0xF), mn * f32(s >> 4)
                    y += [dl * f32((int(q[l + half]) >> shift) & 3) - ml for l in range(16)]
    elif qtype == QT.Q3_K:
        hm, qs, d = b[0:32], b[32:96], _h(b, 108)
        aux = [int.from_bytes(bytes(b[96 + 4 * i : 100 + 4 * i]), "little") for i in range(3)]
        tmp, k1, k2 = aux[2], 0x03030303, 0x0F0F0F0F
        aux = [
            (aux[0] & k2) | (((tmp >> 0) & k1) << 4),
            (aux[1] & k2) | (((tmp >> 2) & k1) << 4),
            ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4),
            ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4),
        ]
        scales = np.frombuffer(b"".join(a.to_bytes(4, "little") for a in aux), dtype=np.int8)
        m, is_ = 1, 0
        for n in range(2):
            q = qs[32 * n : 32 * n + 32]
            for shift in (0, 2, 4, 6):
                for half in (0, 16):
                    dl = d * f32(int(scales[is_]) - 32)
                    is_ += 1
                    y += [
                        dl * f32(((int(q[l + half]) >> shift) & 3) - (0 if int(hm[l + half]) & m else 4))
                        for l in range(16)
                    ]
                m <<= 1
    elif qtype in (QT.Q4_K, QT.Q5_K):
        d, mn, sc = _h(b, 0), _h(b, 2), b[4:16]
        qh, ql = (b[16:48], b[48:176]) if qtype == QT.Q5_K else (None, b[16:144])
        u1, u2 = 1, 2
        for g in range(4):
            s1, m1 = _scale_min_k4(2 * g, sc)
            s2, m2 = _scale_min_k4(2 * g + 1, sc)
            d1, mm1, d2, mm2 = d * f32(s1), mn * f32(m1), d * f32(s2), mn * f32(m2)
            q = ql[32 * g : 32 * g + 32]
            h1 = [16 if qh is not None and int(qh[l]) & u1 else 0 for l in range(32)]
            h2 = [16 if qh is not None and int(qh[l]) & u2 else 0 for l in range(32)]
            y += [d1 * f32((int(q[l]) & 0xF) + h1[l]) - mm1 for l in range(32)]
            y += [d2 * f32((int(q[l]) >> 4) + h2[l]) - mm2 for l in range(32)]
            u1, u2 = u1 << 2, u2 << 2
    elif qtype == QT.Q6_K:
        d, sc = _h(b, 208), b[192:208].view(np.int8)
        y = [f32(0)] * 256
        for n in range(2):
            ql, qh, s = b[64 * n : 64 * n + 64], b[128 + 32 * n : 160 + 32 * n], sc[8 * n : 8 * n + 8]
            for l in range(32):
                is_ = l // 16
                q1 = ((int(ql[l]) & 0xF) | (((int(qh[l]) >> 0) & 3) << 4)) - 32
                q2 = ((int(ql[l + 32]) & 0xF) | (((int(qh[l]) >> 2) & 3) << 4)) - 32
                q3 = ((int(ql[l]) >> 4) | (((int(qh[l]) >> 4) & 3) << 4)) - 32
                q4 = ((int(ql[l + 32]) >> 4) | (((int(qh[l]) >> 6) & 3) << 4)) - 32
                base = 128 * n
                y[base + l] = d * f32(int(s[is_])) * f32(q1)
                y[base + l + 32] = d * f32(int(s[is_ + 2])) * f32(q2)
                y[base + l + 64] = d * f32(int(s[is_ + 4])) * f32(q3)
                y[base + l + 96] = d * f32(int(s[is_ + 6])) * f32(q4)
    elif qtype == QT.IQ4_XS:
        d, sh, sl, qs = _h(b, 0), int.from_bytes(bytes(b[2:4]), "little"), b[4:8], b[8:136]
        for ib in range(8):
            ls = ((int(sl[ib // 2]) >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)
            dl = d * f32(ls - 32)
            q = qs[16 * ib : 16 * ib + 16]
            y += [dl * f32(KVALUES[int(v) & 0xF]) for v in q] + [dl * f32(KVALUES[int(v) >> 4]) for v in q]
    elif qtype == QT.NVFP4:  # ggml_ue4m3_to_fp32 (ggml-impl.h), kvalues_mxfp4
        for s in range(4):
            x, e, mt = int(b[s]), (int(b[s]) >> 3) & 0xF, int(b[s]) & 7
            raw = f32(0) if x in (0, 0x7F) else f32(np.ldexp(f32(mt), -9)) if e == 0 else f32(np.ldexp(f32(1) + f32(mt) / f32(8), e - 7))
            d = raw * f32(0.5)
            q = b[4 + 8 * s : 12 + 8 * s]
            y += [f32(KVALUES_FP4[int(v) & 0x0F]) * d for v in q] + [f32(KVALUES_FP4[int(v) >> 4]) * d for v in q]
    elif qtype == QT.Q1_0:
        d = _h(b, 0)
        y = [d if (int(b[2 + j // 8]) >> (j % 8)) & 1 else -d for j in range(128)]
    elif qtype == QT.Q2_0:
        d = _h(b, 0)
        y = [f32(((int(b[2 + j // 4]) >> ((j % 4) * 2)) & 3) - 1) * d for j in range(64)]
    else:
        raise AssertionError(qtype)
    return y


def random_blocks(qtype: QT, n: int, seed: int) -> np.ndarray:
    """Random bytes with every fp16 field (found by layout) set to a small normal value."""
    rng = np.random.default_rng(seed)
    bs, ts = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, ts), dtype=np.uint8)
    offsets = {
        QT.Q4_1: (0, 2), QT.Q5_1: (0, 2), QT.Q2_K: (80, 82), QT.Q3_K: (108,),
        QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208,), QT.TQ1_0: (52,), QT.TQ2_0: (64,),
        QT.MXFP4: (), QT.IQ1_M: (), QT.NVFP4: (),  # (an E8M0 byte; fp16 bits in the scales' top nibbles)
    }.get(qtype, (0,))
    for off in offsets:
        raw[:, off : off + 2] = (rng.standard_normal((n, 1)) * 0.05).astype(np.float16).view(np.uint8)
    return raw


@pytest.mark.parametrize("qtype", [t for t in QUANTIZED if t not in LOW_BIT], ids=lambda t: t.name)
def test_matches_naive_c_transcription(qtype: QT) -> None:
    raw = random_blocks(qtype, 3, seed=int(qtype))
    bs = GGML_QUANT_SIZES[qtype][0]
    expected = np.array([v for b in raw for v in naive_block(qtype, b)], dtype=np.float32)
    np.testing.assert_array_equal(bits(dequantize(raw, qtype, (3 * bs,))), bits(expected))


@pytest.mark.parametrize("qtype", sorted((t for t in SUPPORTED_TYPES if t in gguf_dequantizers or GGML_QUANT_SIZES[t][0] == 1), key=int),
                         ids=lambda t: t.name)  # (gguf-py has no Q1_0, no Q2_0)
def test_matches_gguf_py(qtype: QT) -> None:
    bs, ts = GGML_QUANT_SIZES[qtype]
    if bs == 1:
        rng = np.random.default_rng(5)
        raw = rng.standard_normal((8, 96)).astype(np.float32).astype(
            {QT.F32: np.float32, QT.F16: np.float16, QT.BF16: np.float32}[qtype]
        )
        if qtype == QT.BF16:
            raw = (raw.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        shape = (8, 96)
    else:
        raw = random_blocks(qtype, 40, seed=100 + int(qtype)).reshape(4, -1)
        shape = (4, 10 * bs)
    expected = gguf_dequantize(raw, qtype).reshape(shape)
    np.testing.assert_array_equal(bits(dequantize(raw, qtype, shape)), bits(expected))


# --- API ---------------------------------------------------------------------------------------


def test_block_info() -> None:
    assert block_info(QT.Q4_K) == (256, 144)
    assert block_info(QT.Q8_0) == (32, 34)
    assert block_info(QT.F16) == (1, 2)
    assert block_info(QT.IQ2_XXS) == (256, 66)
    assert block_info(QT.NVFP4) == (64, 36) and block_info(QT.Q1_0) == (128, 18) and block_info(QT.Q2_0) == (64, 18)
    with pytest.raises(UnsupportedTensorType, match="Q8_1"):
        block_info(QT.Q8_1)


def test_unsupported_type_is_named() -> None:
    with pytest.raises(UnsupportedTensorType, match="Q8_1") as err:
        dequantize(np.zeros(36, np.uint8), QT.Q8_1, (32,), name="blk.0.ffn_up.weight")
    assert "blk.0.ffn_up.weight" in str(err.value)
    with pytest.raises(UnsupportedTensorType, match="99"):
        dequantize(np.zeros(4, np.uint8), 99, (1,))


def test_size_mismatch_and_bad_row_length() -> None:
    with pytest.raises(ModelLoadError, match="bytes"):
        dequantize(np.zeros(33, np.uint8), QT.Q8_0, (32,))
    with pytest.raises(ModelLoadError, match="multiple"):
        dequantize(np.zeros(34 * 2, np.uint8), QT.Q8_0, (4, 16))  # 64 values, rows of 16


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.Q4_K, QT.Q5_0, QT.BF16], ids=lambda t: t.name)
def test_chunking_boundaries(qtype: QT, monkeypatch: pytest.MonkeyPatch) -> None:
    bs = GGML_QUANT_SIZES[qtype][0]
    raw = random_blocks(qtype, 37, seed=7) if bs > 1 else np.arange(37 * 64, dtype=np.uint16).view(np.uint8)
    n = 37 * bs if bs > 1 else 37 * 64
    whole = dequantize(raw, qtype, (n,))
    monkeypatch.setattr(dequant, "_CHUNK_VALUES", 3 * max(bs, 16))  # many uneven chunks
    out = np.full((n,), np.nan, dtype=np.float32)
    assert dequantize_into(out, raw, qtype) is out
    np.testing.assert_array_equal(bits(out), bits(whole))


def test_dequantize_into_rejects_bad_out() -> None:
    with pytest.raises(ValueError):
        dequantize_into(np.empty(32, np.float64), np.zeros(34, np.uint8), QT.Q8_0)
    with pytest.raises(ValueError):
        dequantize_into(np.empty((64, 2), np.float32)[:, 0], np.zeros(68, np.uint8), QT.Q8_0)


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.Q6_K, QT.F16, QT.F32], ids=lambda t: t.name)
def test_dequantize_rows_is_a_row_selection(qtype: QT) -> None:
    bs = GGML_QUANT_SIZES[qtype][0]
    n_cols = 512
    if bs == 1:
        dtype = np.float16 if qtype == QT.F16 else np.float32
        raw = np.random.default_rng(9).standard_normal((6, n_cols)).astype(dtype)
    else:
        raw = random_blocks(qtype, 6 * n_cols // bs, seed=9).reshape(6, -1)
    whole = dequantize(raw, qtype, (6, n_cols))
    rows = [5, 0, 5, -1]
    np.testing.assert_array_equal(bits(dequantize_rows(raw, qtype, (6, n_cols), rows)), bits(whole[rows]))
    assert dequantize_rows(raw, qtype, (6, n_cols), np.array([[1, 2]])).shape == (1, 2, n_cols)
    with pytest.raises(IndexError):
        dequantize_rows(raw, qtype, (6, n_cols), [6])
