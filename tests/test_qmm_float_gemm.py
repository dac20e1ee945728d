"""The register-tiled F16/BF16 matmul (core/model/kernels/qmm/float_gemm.py): the same bits as
the float kernel `mm_float` for every shape (tiles' row and column tails, work-item sizes), the
dispatcher's choice between them, and the compiled f16 rounding of the activations."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from llamacli.core.model.kernels import numerics as N
from llamacli.core.model.kernels.qmm import QuantMatrix, matmul, prepare
from llamacli.core.model.kernels.qmm import block_dots, float_gemm
from llamacli.core.model.kernels.qmm.weight_types import FLOAT_BF16, FLOAT_F16

f32 = np.float32


def _weights(ftype: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes (n, 2 k), the weights' float32 values) of a random F16 or BF16 matrix."""
    w = np.random.default_rng(seed).standard_normal((n, k)).astype(f32)
    if ftype == FLOAT_F16:
        h = w.astype(np.float16)
        return h.view(np.uint8).reshape(n, 2 * k), h.astype(f32)
    b = (w.view(np.uint32) >> 16).astype(np.uint16)
    return b.view(np.uint8).reshape(n, 2 * k), (b.astype(np.uint32) << 16).view(f32)


def _acts(ftype: int, t: int, k: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((t, k)).astype(f32) * f32(3.0)
    return N.round_f16(x) if ftype == FLOAT_F16 else N.round_bf16(x)


@pytest.mark.parametrize("ftype", [FLOAT_F16, FLOAT_BF16])
@pytest.mark.parametrize("t, n, k", [(1, 1, 16), (3, 5, 48), (7, 13, 160), (64, 70, 64), (67, 130, 592), (130, 9, 1152)])
def test_same_bits_as_the_float_kernel(ftype: int, t: int, n: int, k: int) -> None:
    """Every element is mm_float's sum (16 lanes over K in order, then pairwise), whatever the
    tile a row or column falls in (4 x 4 or 2 x 2 and their tails) and the work-item size."""
    wb, _ = _weights(ftype, n, k, seed=t + n)
    x = _acts(ftype, t, k, seed=k)
    want = np.empty((t, n), dtype=f32)
    got = np.full((t, n), np.nan, dtype=f32)
    block_dots.mm_float(wb, ftype, x, want)
    float_gemm.mm_lanes(wb, ftype, x, got)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_matches_float64_reference() -> None:
    """A check on the order itself: the float64 product of the same values, to float32 accuracy."""
    wb, w = _weights(FLOAT_F16, 70, 1152, seed=1)
    x = _acts(FLOAT_F16, 40, 1152, seed=2)
    got = np.empty((40, 70), dtype=f32)
    float_gemm.mm_lanes(wb, FLOAT_F16, x, got)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))


@pytest.mark.parametrize("qtype", [QT.F16, QT.BF16])
def test_matmul_takes_the_gemm_where_it_applies(qtype: QT, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Widths in whole 16-value groups go to the tiled kernel, others to mm_float; a row's
    result is the same bits alone or in a batch either way."""
    ftype = FLOAT_F16 if qtype == QT.F16 else FLOAT_BF16
    calls: list[str] = []
    monkeypatch.setattr(float_gemm, "_mm_lanes", _spy(float_gemm._mm_lanes, calls, "gemm"))
    monkeypatch.setattr(block_dots, "mm_float", _spy(block_dots.mm_float, calls, "float"))
    for k, path in ((160, "gemm"), (150, "float")):
        wb, _ = _weights(ftype, 33, k, seed=k)
        m = QuantMatrix(wb, qtype, k)
        x = np.random.default_rng(k).standard_normal((20, k)).astype(f32)
        calls.clear()
        batch = matmul(prepare(x, qtype), m)
        alone = matmul(prepare(x[5:6], qtype), m)
        assert calls == [path, path]
        assert np.array_equal(alone[0], batch[5])


def _spy(fn, calls: list[str], name: str):  # type: ignore[no-untyped-def]
    def wrapped(*a):  # type: ignore[no-untyped-def]
        calls.append(name)
        return fn(*a)

    return wrapped


def test_compiled_f16_rounding_equals_numerics() -> None:
    """round_to_f16 (F16C's conversions) gives numerics.round_f16's values: ties to even,
    subnormals, overflow to inf, signed zeros."""
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(f32)
    x = np.concatenate([x[~np.isnan(x)], np.array([65519.0, 65520.0, -65520.0, 2.0**-25, 3 * 2.0**-26, -0.0, np.inf, -np.inf], f32)])
    x = np.concatenate([x, (np.arange(2048, dtype=f32) + f32(0.5)) * f32(2.0**-10)])  # halfway cases
    got = float_gemm.round_to_f16(x.reshape(2, -1) if x.size % 2 == 0 else x)
    assert np.array_equal(got.reshape(-1).view(np.uint32), N.round_f16(x).view(np.uint32))
