"""Emulation of the roundings ggml's CPU backend applies to matmul *activations*.

Before `ggml_mul_mat(W, x)` with a quantized (or F16/BF16) weight W, ggml converts the float32
activation rows x into W's `vec_dot_type` with that type's CPU `from_float` (type_traits_cpu in
ggml-cpu/ggml-cpu.c) and multiplies integer codes. The functions here return, as float32, the
values that converted activation represents (codes times scale), so that a float32 matmul on
them sees what ggml sees. Every function works on (..., n) arrays, row by row, vectorised.

Paths followed (llama.cpp as vendored in llama-cpp-python 0.3.36, x86-64 with AVX2/AVX-512):

- Q8_0 (`quantize_row_q8_0`, ggml-cpu/arch/x86/quants.c): blocks of 32, amax = max |x|,
  d = amax / 127 stored as fp16 (round to nearest even, F16C), id = 127 / amax computed from
  the float32 amax (*not* 1 / fp16(d)), q = round-half-to-even(x * id) (`_mm256_round_ps`).
  The repacked path (`ggml_quantize_mat_q8_0_4x8`, used for Q4_0 and IQ4_NL weights) is the
  same computation, so there is no separate variant.
- Q8_1 (`quantize_row_q8_1`): the same codes and fp16 d as Q8_0, plus s = fp16(d * sum(q))
  with the float32 d; Q4_1/Q5_1 dot products use s for the weights' min term.
- Q8_K (`quantize_row_q8_K` = `quantize_row_q8_K_ref` on x86): blocks of 256, max = the
  *first* element of largest magnitude (signed), iscale = -127 / max, d = 1 / iscale in float32
  (not fp16), q = min(127, nearest_int(iscale * x)) (round half to even via the 1.5 * 2^23
  trick).
- Q8_K, repacked (`ggml_quantize_mat_q8_K_4x8`, ggml-cpu/arch/x86/repack.cpp): used when the
  weight was repacked at load time: Q4_K (AVX2, n_out % 8 == 0) and Q2_K (AVX-512,
  n_out % 8 == 0). It quantizes rows 4 at a time; rows beyond the last full group of 4 (per
  2-D plane) go through `quantize_row_q8_K`. Its choice of the scale's sign differs from the
  reference when a block holds both +amax and -amax (the repack code takes max = +amax if
  *any* element equals +amax, the reference the sign of the first one), and on blocks whose
  iscale overflows (codes -128 instead of 0, d = +-0). Then d and every code change sign
  together, so d * q is the same value and the integer dot products are identical: only
  the sign of zero outputs differs. `round_q8_K(repacked=True)` reproduces those bits too.
- F16 (`ggml_cpu_fp32_to_fp16`): `_mm512_cvtps_ph` / `_cvtss_sh`, round to nearest even,
  exactly NumPy's float32 -> float16 cast.
- BF16 (`ggml_cpu_fp32_to_bf16` -> `ggml_compute_fp32_to_bf16`): round to nearest even on the
  bits, NaN made quiet.
- F32: no rounding.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from llamacli.core.errors import UnsupportedTensorType
from llamacli.core.model.kernels.ggml_types import Q2_0

QT = GGMLQuantizationType

# vec_dot_type of each weight type in ggml-cpu.c's type_traits_cpu.
_VEC_DOT_TYPE: dict[GGMLQuantizationType, GGMLQuantizationType | None] = {
    QT.F32: None,
    QT.F16: QT.F16,
    QT.BF16: QT.BF16,
    QT.Q4_0: QT.Q8_0,
    QT.Q4_1: QT.Q8_1,
    QT.Q5_0: QT.Q8_0,
    QT.Q5_1: QT.Q8_1,
    QT.Q8_0: QT.Q8_0,
    QT.IQ4_NL: QT.Q8_0,
    QT.MXFP4: QT.Q8_0,
    QT.NVFP4: QT.Q8_0,
    QT.Q1_0: QT.Q8_0,
    Q2_0: QT.Q8_0,
    QT.Q2_K: QT.Q8_K,
    QT.Q3_K: QT.Q8_K,
    QT.Q4_K: QT.Q8_K,
    QT.Q5_K: QT.Q8_K,
    QT.Q6_K: QT.Q8_K,
    QT.IQ2_XXS: QT.Q8_K,
    QT.IQ2_XS: QT.Q8_K,
    QT.IQ2_S: QT.Q8_K,
    QT.IQ3_XXS: QT.Q8_K,
    QT.IQ3_S: QT.Q8_K,
    QT.IQ1_S: QT.Q8_K,
    QT.IQ1_M: QT.Q8_K,
    QT.IQ4_XS: QT.Q8_K,
    QT.TQ1_0: QT.Q8_K,
    QT.TQ2_0: QT.Q8_K,
}

# Weight types whose tensors the x86 CPU backend repacks (ggml_repack_get_optimal_repack_type)
# and that then quantize activations with ggml_quantize_mat_q8_K_4x8.
REPACKED_Q8_K_TYPES: frozenset[GGMLQuantizationType] = frozenset({QT.Q4_K, QT.Q2_K})


def _blocks(x: np.ndarray, block: int) -> np.ndarray:
    """(..., n) float32 -> (..., n // block, block) view (a copy only if x is not contiguous)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[-1] if x.ndim else 0
    if x.ndim == 0 or n % block:
        raise ValueError(f"the last axis ({n}) must be a multiple of {block}")
    return x.reshape(x.shape[:-1] + (n // block, block))


def _block_absmax(xb: np.ndarray) -> np.ndarray:
    """max |x| over the last axis of xb (..., nb, B) -> (..., nb).

    Reduced on a transposed (B, blocks) copy: NumPy's reductions over a short contiguous last
    axis pay a per-block overhead that an elementwise max across B long rows does not."""
    flat = xb.reshape(-1, xb.shape[-1])
    at = np.empty(flat.shape[::-1], dtype=np.float32)  # (B, blocks); never a view of x
    np.abs(flat.T, out=at)
    return at.max(axis=0).reshape(xb.shape[:-1])


def _q8_0_codes(xb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Q8_0/Q8_1 quantization of blocks xb (..., nb, 32).

    Returns (q, d, d16, overflow): q (..., nb, 32) float32 integer codes (+0.0 for zero codes),
    the float32 d = amax / 127 (..., nb), d16 = fp16(d) as float32 (..., nb), and the mask of
    blocks whose id = 127 / amax overflowed (..., nb)."""
    amax = _block_absmax(xb)  # (..., nb)
    d = amax / np.float32(127)
    inv = np.zeros_like(amax)
    np.divide(np.float32(127), amax, out=inv, where=amax != 0)  # id = 127 / amax, 0 for empty
    q = xb * inv[..., None]
    np.rint(q, out=q)  # _mm256_round_ps(_MM_ROUND_NEAREST): half to even
    q += np.float32(0.0)  # -0.0 -> +0.0, as the int8 code 0 dequantizes
    overflow = np.isinf(inv)  # amax < 127 / FLT_MAX: x * id is +-inf or NaN, which
    if overflow.any():  # _mm256_cvtps_epi32 + saturating packs turn into the code -128
        q[overflow] = -128
    return q, d, d.astype(np.float16).astype(np.float32), overflow


def round_q8_0(x: np.ndarray) -> np.ndarray:
    """Values of ggml's Q8_0 quantization of x (..., n), n % 32 == 0, dequantized: q * fp16(d)."""
    xb = _blocks(x, 32)
    with np.errstate(over="ignore", invalid="ignore"):
        q, _, d16, _ = _q8_0_codes(xb)
        q *= d16[..., None]  # exact: 8-bit code times 11-bit fp16 significand
    return q.reshape(np.shape(x))


def round_q8_1(x: np.ndarray, *, with_sums: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Values of ggml's Q8_1 quantization of x (..., n), n % 32 == 0, dequantized.

    The codes and fp16 scale are those of Q8_0. With `with_sums`, also returns s (..., n // 32)
    float32: the block's stored s = fp16(d * sum(q)) with d the float32 amax / 127 (so s is not
    exactly the sum of the returned values); ggml's Q4_1 x Q8_1 and Q5_1 x Q8_1 dot products
    add min_w * s for each block."""
    xb = _blocks(x, 32)
    with np.errstate(over="ignore", invalid="ignore"):
        q, d, d16, overflow = _q8_0_codes(xb)
        sums: np.ndarray | None = None
        if with_sums:
            # Integer sum of |q| <= 32 * 127 codes is exact in float32; then d * sum rounds once.
            total = q.sum(axis=-1)
            # Overflowed blocks: ggml sums the int32 codes before saturation, 32 * INT32_MIN,
            # which wraps to 0.
            total[overflow] = 0
            sums = (d * total).astype(np.float16).astype(np.float32)
        q *= d16[..., None]
    values = q.reshape(np.shape(x))
    return values if sums is None else (values, sums)


def _q8_k_repacked_rows(shape: tuple[int, ...]) -> np.ndarray:
    """Mask (...,) over rows of x (..., rows, n): True for the rows the repacked matmul quantizes
    with ggml_quantize_mat_q8_K_4x8 (the first rows - rows % 4 of each 2-D plane)."""
    if len(shape) < 2:
        return np.zeros(shape[:-1], dtype=bool)
    rows = shape[-2]
    mask = np.arange(rows) < rows - rows % 4
    return np.broadcast_to(mask, shape[:-1])


def round_q8_K(x: np.ndarray, *, repacked: bool = False) -> np.ndarray:
    """Values of ggml's Q8_K quantization of x (..., n), n % 256 == 0, dequantized: d * q.

    d = 1 / iscale in float32 with iscale = -127 / max, max the signed element of largest
    magnitude (the first one, in `quantize_row_q8_K`). With `repacked` (the weight is a repacked
    Q4_K/Q2_K tensor; see the module docstring), x's axis -2 is ggml's ne11 (tokens): rows in
    full groups of 4 use `ggml_quantize_mat_q8_K_4x8`, which picks max = +amax whenever some
    element equals +amax; the remaining rows use the reference rule. The two agree as values
    (== is True everywhere); only the sign of some zeros differs.

    Inputs are assumed finite (NaN/inf propagate differently from ggml's integer codes)."""
    xb = _blocks(x, 256)  # (..., nb, 256)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ax = np.abs(xb)
        first = np.argmax(ax, axis=-1)[..., None]  # first index of the largest |x|
        mx = np.take_along_axis(xb, first, axis=-1)[..., 0]  # (..., nb) signed max
        amax = np.abs(mx)
        rows = np.zeros(mx.shape, dtype=bool)
        if repacked:
            has_pos = np.any(xb == amax[..., None], axis=-1)  # some element equals +amax
            rows = np.broadcast_to(_q8_k_repacked_rows(np.shape(x))[..., None], mx.shape)
            mx = np.where(rows, np.where(has_pos, amax, -amax), mx)
        iscale = np.zeros_like(amax)
        np.divide(np.float32(-127), mx, out=iscale, where=amax != 0)
        d = np.zeros_like(amax)
        np.divide(np.float32(1), iscale, out=d, where=amax != 0)  # +-0 if iscale overflowed
        q = np.multiply(xb, iscale[..., None], out=ax)  # reuse the |x| buffer
        np.rint(q, out=q)  # nearest_int: round half to even
        np.minimum(q, np.float32(127), out=q)
        q += np.float32(0.0)  # -0.0 -> +0.0 (an int8 code 0)
        overflow = np.isinf(iscale)  # |max| < 127 / FLT_MAX: x * iscale is +-inf or NaN, which
        if overflow.any():  # nearest_int turns into code 0, the repack's cvtps + packs into -128
            q[overflow] = 0
            if repacked:
                q[overflow & rows] = -128
        q *= d[..., None]  # float32 product d * q, rounded as in dequantize_row_q8_K
    return q.reshape(np.shape(x))


def round_f16(x: np.ndarray) -> np.ndarray:
    """x rounded to fp16 and back (ggml_cpu_fp32_to_fp16: F16C, round to nearest even).

    Equal to x.astype(float16).astype(float32) (checked over every non-NaN float32; NaN stays
    NaN, its payload is not emulated) but about 2x faster: |x| + c - c with c = 2^(e + 13)
    rounds |x| in [2^e, 2^(e+1)) to the fp16 quantum 2^(e - 10), half to even, in float32
    arithmetic; e is clamped below at -14 (fp16 subnormals: quantum 2^-24) and above at 16
    (everything there overflows anyway)."""
    x = np.asarray(x, dtype=np.float32)
    c = x.view(np.uint32) & np.uint32(0x7F800000)  # 2^e as float32 bits
    np.maximum(c, np.uint32(0x38800000), out=c)  # e >= -14
    np.minimum(c, np.uint32(0x47800000), out=c)  # e <= 16
    c += np.uint32(13 << 23)  # 2^(e + 13)
    cf = c.view(np.float32)
    out = np.abs(x)
    with np.errstate(over="ignore", invalid="ignore"):
        out += cf
        out -= cf
        # Rounded magnitudes are <= 65504 or >= 65536 = 2^16: scaling by 2^112 overflows to
        # inf exactly the latter, and scaling back is exact for the rest.
        out *= np.float32(2.0**112)
    out *= np.float32(2.0**-112)
    np.copysign(out, x, out=out)
    return out


def round_bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bf16 and back (ggml_compute_fp32_to_bf16: nearest even, NaN made quiet)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    # (u + 0x7fff + lsb) >> 16 rounds the low 16 bits half to even; uint32 wraps only for NaN.
    r = u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))
    r &= np.uint32(0xFFFF0000)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        r[nan] = (u[nan] & np.uint32(0xFFFF0000)) | np.uint32(0x00400000)
    return r.view(np.float32)


def vec_dot_type(weight_qtype: GGMLQuantizationType | int) -> GGMLQuantizationType | None:
    """The type ggml converts activations to for a matmul with a `weight_qtype` weight (None: F32,
    no conversion). Raises UnsupportedTensorType for types the CPU backend cannot multiply."""
    try:
        qt = QT(weight_qtype)
        return _VEC_DOT_TYPE[qt]
    except (ValueError, KeyError):
        raise UnsupportedTensorType(
            "<weight>", f"no CPU matmul for ggml type {getattr(weight_qtype, 'name', weight_qtype)}"
        ) from None


def round_activations(
    x: np.ndarray, weight_qtype: GGMLQuantizationType | int, *, repacked: bool = False
) -> np.ndarray:
    """x (..., n_in) float32 as ggml's CPU matmul sees it against a `weight_qtype` weight.

    `repacked`: the weight was repacked at load (llama.cpp's default CPU_REPACK buffer; on x86
    this concerns Q4_K and Q2_K (Q8_K activations, see `round_q8_K`) and Q4_0/IQ4_NL (whose Q8_0
    activation path rounds identically))."""
    vdt = vec_dot_type(weight_qtype)
    if vdt is None:
        return np.asarray(x, dtype=np.float32)
    if vdt == QT.Q8_0:
        return round_q8_0(x)
    if vdt == QT.Q8_1:
        return round_q8_1(x)  # type: ignore[return-value]
    if vdt == QT.Q8_K:
        return round_q8_K(x, repacked=repacked and QT(weight_qtype) in REPACKED_Q8_K_TYPES)
    if vdt == QT.F16:
        return round_f16(x)
    return round_bf16(x)
