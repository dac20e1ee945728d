"""Dequantization of ggml tensor types with vectorised NumPy, bit-exact with libggml's `to_float`.

Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
IQ4_NL, IQ4_XS, and the low-bit types MXFP4, TQ1_0, TQ2_0, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
IQ3_XXS, IQ3_S, NVFP4, Q1_0, Q2_0. Block layouts and formulas follow ggml/src/ggml-common.h and the
`dequantize_row_*` functions of ggml/src/ggml-quants.c. The low-bit types decode through the
matmul's own unpackers (core/model/kernels/qmm/unpack_lowbit.py, unpack_split.py: integer codes times an exact
block scale), so that what is multiplied is what is tested against ggml here.

Why the results are bit-exact: in every type, the value is `scale * q` or `scale * q - min`
(`+ min` for Q4_1/Q5_1), where `scale`, `min` are products of an fp16 (11-bit significand) and a
small integer, and `scale * q` fits in 24 bits. Every product is therefore exact in float32, in
any association, and only the final add/subtract rounds, once, as in C (an FMA contraction in
the C code would give the same result, since the product it fuses is exact). We never compute
in float64.

Speed: the work is done in chunks of about `_CHUNK_VALUES` outputs so that the byte-sized
temporaries and the float32 output chunk stay in the CPU cache; each chunk costs one cast-copy
from int8/uint8 codes into the float32 output and one or two in-place float32 passes
(`*=` scale, `-=` min). Bit fiddling is done on uint8 arrays (a quarter of the memory traffic
of float32).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from llamacli.core.errors import ModelLoadError, UnsupportedTensorType
from llamacli.core.model.kernels.ggml_types import Q2_0

QT = GGMLQuantizationType

# Output values per chunk: 2 MiB of float32, so that a chunk and its temporaries fit in L2.
_CHUNK_VALUES = 1 << 19

# The 16 non-linear levels of IQ4_NL / IQ4_XS (kvalues_iq4nl in ggml-common.h).
_KVALUES_IQ4NL = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8
)

_KVALUES_IQ4NL_F32 = _KVALUES_IQ4NL.astype(np.float32)

# Shifts that bring bit pair k (k = 0..3) of a byte to the bottom.
_SHIFT_2BIT = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
# Shifts that bring bit b (b = 0..7) of a byte to the bottom.
_SHIFT_1BIT = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)

Kernel = Callable[[np.ndarray, np.ndarray], None]


def _f16(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The fp16 field at byte `offset` of each block, as float32 of shape (n, 1) (exact)."""
    return np.ascontiguousarray(blocks[:, offset : offset + 2]).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(..., m) uint8 -> (..., 2, m) uint8: low nibbles first, then high nibbles.

    This is the order of every 4-bit ggml type: byte j holds value j (low) and j + m (high)."""
    out = np.empty(qs.shape[:-1] + (2, qs.shape[-1]), dtype=np.uint8)
    np.bitwise_and(qs, 0x0F, out=out[..., 0, :])
    np.right_shift(qs, 4, out=out[..., 1, :])
    return out


def _as_int8(codes: np.ndarray, offset: int) -> np.ndarray:
    """uint8 codes c -> int8 (c - offset), computed in place with uint8 wrap-around."""
    np.subtract(codes, np.uint8(offset), out=codes)
    return codes.view(np.int8)


# ---------------------------------------------------------------------------------------------
# Kernels: blocks (n, type_size) uint8 -> out (n, block_size) float32, written in place.
# ---------------------------------------------------------------------------------------------


def _dq_q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q4_0: d f16 | qs[16]; y[j] = d * ((qs[j] & 15) - 8), y[j + 16] = d * ((qs[j] >> 4) - 8)
    n = blocks.shape[0]
    out.reshape(n, 2, 16)[...] = _as_int8(_nibbles(blocks[:, 2:18]), 8)
    out *= _f16(blocks, 0)


def _dq_q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q4_1: d f16 | m f16 | qs[16]; y = d * q + m
    n = blocks.shape[0]
    out.reshape(n, 2, 16)[...] = _nibbles(blocks[:, 4:20])
    out *= _f16(blocks, 0)
    out += _f16(blocks, 2)


def _q5_codes(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1 5-bit codes (n, 32) uint8 from qh (n, 4) and qs (n, 16).

    Bit j of the little-endian uint32 qh is the 5th bit of y[j] (j < 32): for y[j + 16] ggml
    takes (qh >> (j + 12)) & 0x10, i.e. bit j + 16. unpackbits(bitorder="little") of the 4
    bytes yields exactly bit j at index j."""
    n = qs.shape[0]
    codes = _nibbles(qs).reshape(n, 32)
    high = np.unpackbits(qh, axis=1, bitorder="little")  # (n, 32) of 0/1
    np.left_shift(high, 4, out=high)
    np.bitwise_or(codes, high, out=codes)
    return codes


def _dq_q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q5_0: d f16 | qh[4] | qs[16]; y = d * (q5 - 16)
    out[...] = _as_int8(_q5_codes(blocks[:, 2:6], blocks[:, 6:22]), 16)
    out *= _f16(blocks, 0)


def _dq_q5_1(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q5_1: d f16 | m f16 | qh[4] | qs[16]; y = d * q5 + m
    out[...] = _q5_codes(blocks[:, 4:8], blocks[:, 8:24])
    out *= _f16(blocks, 0)
    out += _f16(blocks, 2)


def _dq_q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q8_0: d f16 | qs[32] int8; y = d * q
    out[...] = blocks[:, 2:34].view(np.int8)
    out *= _f16(blocks, 0)


def _two_bit_codes(qs: np.ndarray) -> np.ndarray:
    """Q2_K/Q3_K low bits: qs (n, 64) -> (n, 2, 4, 32) uint8.

    Value p = 128*h + 32*k + l (h = half, k = bit pair, l < 32) is (qs[32*h + l] >> 2k) & 3."""
    n = qs.shape[0]
    codes = np.right_shift(qs.reshape(n, 2, 1, 32), _SHIFT_2BIT)
    np.bitwise_and(codes, 3, out=codes)
    return codes


def _dq_q2_K(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q2_K: scales[16] | qs[64] | d f16 | dmin f16.
    # Sub-block s (16 values, s = p // 16): y = d * (sc[s] & 15) * q - dmin * (sc[s] >> 4)
    n = blocks.shape[0]
    sc = blocks[:, 0:16]
    scale = _f16(blocks, 80) * (sc & 0x0F)  # (n, 16) exact
    mins = _f16(blocks, 82) * (sc >> 4)  # (n, 16) exact
    out.reshape(n, 2, 4, 32)[...] = _two_bit_codes(blocks[:, 16:80])
    o = out.reshape(n, 16, 16)
    o *= scale[:, :, None]
    o -= mins[:, :, None]


def _q3_k_scales(s: np.ndarray) -> np.ndarray:
    """Q3_K: the 16 6-bit scales (n, 16) int8, minus 32, from the 12 packed bytes s (n, 12).

    Scale k: low 4 bits = s[k] & 15 (k < 8) or s[k - 8] >> 4 (k >= 8);
    high 2 bits = (s[8 + k % 4] >> 2 * (k // 4)) & 3 (the kmask1/kmask2 dance of ggml)."""
    n = s.shape[0]
    sc = np.empty((n, 16), dtype=np.uint8)
    np.bitwise_and(s[:, 0:8], 0x0F, out=sc[:, 0:8])
    np.right_shift(s[:, 0:8], 4, out=sc[:, 8:16])
    high = np.right_shift(s[:, None, 8:12], _SHIFT_2BIT.reshape(1, 4, 1))  # (n, 4, 4): [k//4, k%4]
    high &= 3
    high <<= 4
    sc |= high.reshape(n, 16)
    return _as_int8(sc, 32)


def _dq_q3_K(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q3_K: hmask[32] | qs[64] | scales[12] | d f16.
    # Value p = 32*b + l (b = 4*h + k): q = ((qs[32h + l] >> 2k) & 3) - (hmask[l] bit b ? 0 : 4),
    # y = d * (scale[p // 16] - 32) * q
    n = blocks.shape[0]
    codes = _two_bit_codes(blocks[:, 32:96]).reshape(n, 8, 32)
    high = np.right_shift(blocks[:, None, 0:32], _SHIFT_1BIT)  # (n, 8, 32): hmask >> b
    high &= 1
    high <<= 2
    codes |= high  # q + 4 in 0..7
    out.reshape(n, 8, 32)[...] = _as_int8(codes, 4)
    scale = _f16(blocks, 108) * _q3_k_scales(blocks[:, 96:108])  # (n, 16) exact
    out.reshape(n, 16, 16)[...] *= scale[:, :, None]


def _k4_scales_mins(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: get_scale_min_k4 for j = 0..7 on the 12 packed bytes s (n, 12).

    j < 4: sc = s[j] & 63, m = s[j + 4] & 63;
    j >= 4: sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, m = (s[j + 4] >> 4) | (s[j] >> 6) << 4."""
    n = s.shape[0]
    sc = np.empty((n, 8), dtype=np.uint8)
    mn = np.empty((n, 8), dtype=np.uint8)
    np.bitwise_and(s[:, 0:4], 63, out=sc[:, 0:4])
    np.bitwise_and(s[:, 4:8], 63, out=mn[:, 0:4])
    np.bitwise_or(s[:, 8:12] & 0x0F, (s[:, 0:4] >> 6) << 4, out=sc[:, 4:8])
    np.bitwise_or(s[:, 8:12] >> 4, (s[:, 4:8] >> 6) << 4, out=mn[:, 4:8])
    return sc, mn


def _dq_q4_K(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q4_K: d f16 | dmin f16 | scales[12] | qs[128].
    # 8 sub-blocks of 32; sub-block 2g / 2g + 1 are the low / high nibbles of qs[32g : 32g + 32];
    # y = (d * sc) * q - dmin * m
    n = blocks.shape[0]
    sc, mn = _k4_scales_mins(blocks[:, 4:16])
    out.reshape(n, 4, 2, 32)[...] = _nibbles(blocks[:, 16:144].reshape(n, 4, 32))
    o = out.reshape(n, 8, 32)
    o *= (_f16(blocks, 0) * sc)[:, :, None]
    o -= (_f16(blocks, 2) * mn)[:, :, None]


def _dq_q5_K(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q5_K: d f16 | dmin f16 | scales[12] | qh[32] | qs[128].
    # As Q4_K, plus a 5th bit: bit b of qh[l] for value l of sub-block b.
    n = blocks.shape[0]
    sc, mn = _k4_scales_mins(blocks[:, 4:16])
    codes = _nibbles(blocks[:, 48:176].reshape(n, 4, 32)).reshape(n, 8, 32)
    high = np.right_shift(blocks[:, None, 16:48], _SHIFT_1BIT)  # (n, 8, 32): qh >> b
    high &= 1
    high <<= 4
    codes |= high
    o = out.reshape(n, 8, 32)
    o[...] = codes
    o *= (_f16(blocks, 0) * sc)[:, :, None]
    o -= (_f16(blocks, 2) * mn)[:, :, None]


def _dq_q6_K(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_q6_K: ql[128] | qh[64] | scales[16] int8 | d f16.
    # Half h (128 values), group k = 0..3 (32 values): low 4 bits = nibble k // 2 of
    # ql[64h + 32 * (k % 2) + l], high 2 bits = (qh[32h + l] >> 2k) & 3; y = d * sc[p // 16] * (q - 32)
    n = blocks.shape[0]
    codes = np.empty((n, 2, 4, 32), dtype=np.uint8)  # [h, k, l]
    ql = blocks[:, 0:128].reshape(n, 2, 2, 32)  # [h, k % 2, l]
    np.bitwise_and(ql, 0x0F, out=codes[:, :, 0:2])
    np.right_shift(ql, 4, out=codes[:, :, 2:4])
    high = np.right_shift(blocks[:, 128:192].reshape(n, 2, 1, 32), _SHIFT_2BIT)
    high &= 3
    high <<= 4
    codes |= high
    out.reshape(n, 2, 4, 32)[...] = _as_int8(codes, 32)
    scale = _f16(blocks, 208) * blocks[:, 192:208].view(np.int8)  # (n, 16) exact
    out.reshape(n, 16, 16)[...] *= scale[:, :, None]


def _dq_iq4_nl(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_iq4_nl: d f16 | qs[16]; y = d * kvalues[nibble], low nibbles first
    n = blocks.shape[0]
    np.take(_KVALUES_IQ4NL_F32, _nibbles(blocks[:, 2:18]), out=out.reshape(n, 2, 16))
    out *= _f16(blocks, 0)


def _dq_iq4_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    # block_iq4_xs: d f16 | scales_h u16 | scales_l[4] | qs[128]. Sub-block ib (32 values):
    # ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 15) | ((scales_h >> 2 * ib) & 3) << 4,
    # y = d * (ls - 32) * kvalues[nibble of qs[16 * ib + j]]
    n = blocks.shape[0]
    ls = _nibbles(blocks[:, 4:8]).transpose(0, 2, 1).reshape(n, 8)  # low 4 bits, ib = 2i + nibble
    sh = np.ascontiguousarray(blocks[:, 2:4]).view("<u2")  # (n, 1)
    high = (sh >> (2 * np.arange(8, dtype=np.uint16))) & 3  # (n, 8)
    ls = (ls | (high.astype(np.uint8) << 4)).astype(np.int8) - np.int8(32)
    np.take(_KVALUES_IQ4NL_F32, _nibbles(blocks[:, 8:136].reshape(n, 8, 16)), out=out.reshape(n, 8, 2, 16))
    out.reshape(n, 8, 32)[...] *= (_f16(blocks, 0) * ls)[:, :, None]


def _dq_f32(blocks: np.ndarray, out: np.ndarray) -> None:
    out[...] = blocks.view(np.float32)


@lru_cache(maxsize=1)
def _f16_table() -> np.ndarray:
    """float32 value of each of the 65536 fp16 bit patterns, as ggml_compute_fp16_to_fp32 gives
    it: exact, except that it goes through a float multiply, which makes signalling NaNs quiet
    (NumPy's cast keeps them signalling), so the quiet bit is set on every NaN."""
    table = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    table.view(np.uint32)[np.isnan(table)] |= np.uint32(0x00400000)
    return table


def _dq_f16(blocks: np.ndarray, out: np.ndarray) -> None:
    # A gather from a 256 KiB table is ~2.5x faster than NumPy's fp16 -> fp32 cast.
    np.take(_f16_table(), blocks.view(np.uint16)[:, 0], out=out[:, 0])


def _dq_bf16(blocks: np.ndarray, out: np.ndarray) -> None:
    # bf16 is the top half of a float32: widen the 16 bits and shift them up.
    bits = out.view(np.uint32)
    bits[...] = blocks.view(np.uint16)
    bits <<= 16


def _via_unpack(qtype: GGMLQuantizationType) -> Kernel:
    """A low-bit type's kernel: each value is ds * q, the integer code q and the block scale ds
    (d times a power of two) from the matmul's unpacker. ggml's value d * (small integers and
    powers of two) is exact in any association, and so is this one product."""

    def kernel(blocks: np.ndarray, out: np.ndarray) -> None:
        from llamacli.core.model.kernels.qmm.per_type import TYPE_CODES  # (numba: loaded when used)
        from llamacli.core.model.kernels.qmm.weight_types import QUANT_FORMATS

        fmt = QUANT_FORMATS[qtype]
        n = blocks.shape[0] * fmt.split  # the kernel's blocks
        codes = np.empty(n * fmt.qk, dtype=np.int16)
        ds = np.empty(n, dtype=np.float32)
        unused_i, unused_f = np.empty((n, fmt.nsub), dtype=np.int32), np.empty(n, dtype=np.float32)
        TYPE_CODES[fmt.kind].unpack(np.ascontiguousarray(blocks).reshape(-1), n, codes, unused_i, unused_i, ds, unused_f)
        np.multiply(codes.reshape(n, fmt.qk), ds[:, None], out=out.reshape(n, fmt.qk))

    return kernel


_LOW_BIT = (
    QT.MXFP4, QT.TQ1_0, QT.TQ2_0, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S, QT.IQ1_M, QT.NVFP4, QT.Q1_0,
    Q2_0,
)

_KERNELS: dict[GGMLQuantizationType, Kernel] = {
    QT.F32: _dq_f32,
    QT.F16: _dq_f16,
    QT.BF16: _dq_bf16,
    QT.Q4_0: _dq_q4_0,
    QT.Q4_1: _dq_q4_1,
    QT.Q5_0: _dq_q5_0,
    QT.Q5_1: _dq_q5_1,
    QT.Q8_0: _dq_q8_0,
    QT.Q2_K: _dq_q2_K,
    QT.Q3_K: _dq_q3_K,
    QT.Q4_K: _dq_q4_K,
    QT.Q5_K: _dq_q5_K,
    QT.Q6_K: _dq_q6_K,
    QT.IQ4_NL: _dq_iq4_nl,
    QT.IQ4_XS: _dq_iq4_xs,
    **{qt: _via_unpack(qt) for qt in _LOW_BIT},
}

SUPPORTED_TYPES: frozenset[GGMLQuantizationType] = frozenset(_KERNELS)


def _check_type(qtype: GGMLQuantizationType | int, name: str) -> GGMLQuantizationType:
    try:
        qt = QT(qtype)
    except ValueError:
        raise UnsupportedTensorType(name, f"unknown ggml type id {int(qtype)}") from None
    if qt not in _KERNELS:
        supported = ", ".join(t.name for t in _KERNELS)
        raise UnsupportedTensorType(
            name, f"ggml type {qt.name} cannot be dequantized (supported: {supported})"
        )
    return qt


def block_info(qtype: GGMLQuantizationType | int) -> tuple[int, int]:
    """(values per block, bytes per block) of a supported type, e.g. Q4_K -> (256, 144)."""
    return GGML_QUANT_SIZES[_check_type(qtype, "<type>")]


def _as_bytes(raw: np.ndarray) -> np.ndarray:
    """Any array (uint8 bytes, or the typed array gguf gives for F32/F16) -> flat uint8 view."""
    arr = np.ascontiguousarray(raw)
    return arr.reshape(-1).view(np.uint8)


def dequantize_into(
    out: np.ndarray,
    raw: np.ndarray,
    qtype: GGMLQuantizationType | int,
    *,
    name: str = "<tensor>",
) -> np.ndarray:
    """Dequantize `raw` into the C-contiguous float32 array `out` (any shape) and return `out`.

    `out.size` values are decoded, in ggml order (the last numpy axis is ggml's ne0, contiguous).
    Work is chunked, so apart from `out` the peak extra memory is a few MiB."""
    qt = _check_type(qtype, name)
    if out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous float32 array")
    block_size, type_size = GGML_QUANT_SIZES[qt]
    n_values = out.size
    if out.ndim and out.shape[-1] % block_size:
        raise ModelLoadError(
            name, f"row length {out.shape[-1]} is not a multiple of the {qt.name} block size {block_size}"
        )
    data = _as_bytes(raw)
    n_blocks = n_values // block_size
    if data.size != n_blocks * type_size:
        raise ModelLoadError(
            name,
            f"{qt.name} data has {data.size} bytes, expected {n_blocks * type_size} "
            f"for {n_values} values",
        )
    blocks = data.reshape(n_blocks, type_size)
    flat = out.reshape(n_blocks, block_size)
    kernel = _KERNELS[qt]
    step = max(1, _CHUNK_VALUES // block_size)
    # Garbage scales (inf/NaN fp16) decode to inf/NaN as in C, without NumPy warnings.
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, n_blocks, step):
            kernel(blocks[start : start + step], flat[start : start + step])
    return out


def dequantize(
    raw: np.ndarray,
    qtype: GGMLQuantizationType | int,
    shape: tuple[int, ...],
    *,
    name: str = "<tensor>",
) -> np.ndarray:
    """Decode a ggml tensor to float32 of numpy shape `shape` (for a 2-D weight (n_out, n_in)).

    `raw` holds the tensor's bytes (uint8, any shape) or the typed array gguf gives (float32,
    float16). Equal bit for bit to libggml's `to_float`. Unsupported types raise
    UnsupportedTensorType naming the type; `name` (tensor name or path) goes into errors."""
    _check_type(qtype, name)
    out = np.empty(tuple(int(s) for s in shape), dtype=np.float32)
    return dequantize_into(out, raw, qtype, name=name)


def dequantize_rows(
    raw: np.ndarray,
    qtype: GGMLQuantizationType | int,
    shape: tuple[int, ...],
    rows: np.ndarray | list[int],
    *,
    name: str = "<tensor>",
) -> np.ndarray:
    """Rows `rows` of a 2-D tensor of numpy shape `shape` = (n_rows, n_cols), decoded to float32
    (len(rows), n_cols): an embedding lookup (ggml_get_rows) without decoding the whole matrix.
    Each row is a whole number of blocks, so the result equals dequantize(...)[rows] bit for bit."""
    qt = _check_type(qtype, name)
    n_rows, n_cols = (int(s) for s in shape)
    block_size, type_size = GGML_QUANT_SIZES[qt]
    data = _as_bytes(raw)
    if n_cols % block_size or data.size != n_rows * (n_cols // block_size) * type_size:
        raise ModelLoadError(name, f"{qt.name} data of {data.size} bytes does not hold shape {shape}")
    idx = np.asarray(rows, dtype=np.int64)
    if idx.size and (idx.min() < -n_rows or idx.max() >= n_rows):
        raise IndexError(f"{name}: row index out of range for {n_rows} rows")
    picked = data.reshape(n_rows, -1)[idx]  # (len(rows), row bytes)
    out = np.empty(idx.shape + (n_cols,), dtype=np.float32)
    return dequantize_into(out, picked, qt, name=name)
