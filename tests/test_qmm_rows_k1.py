"""The one-row Q4_K and Q6_K kernels of stored matrices (core/model/kernels/qmm/rows_k1.py):
chosen for one activation row, and the bits of every other path."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from numba import njit

from llamacli.core.model.kernels.qmm import QuantMatrix, matmul, prepare
from llamacli.core.model.kernels.qmm import rows
from llamacli.core.model.kernels.qmm.acts import QActs
from llamacli.core.model.kernels.qmm.matrix import _sub_sums, pack_matrix
from llamacli.core.model.kernels.qmm.weight_types import QUANT_FORMATS

QT = GGMLQuantizationType
D_AT = {QT.Q4_K: (0, 2), QT.Q6_K: (208,)}  # the blocks' fp16 scales (d, dmin)
KERNELS = {QT.Q4_K: rows.rows_q4_k, QT.Q6_K: rows.rows_q6_k}


def _random_matrix(qtype: QT, n_out: int, n_in: int, seed: int) -> QuantMatrix:
    """Random blocks (every code, 6-bit scale and min, Q6_K's int8 scales over their whole
    range), finite fp16 d and dmin of either sign; row 1 all codes and scales at their maximum."""
    qk, size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_out, n_in // qk, size), dtype=np.uint8)
    for at in D_AT[qtype]:
        d = (rng.uniform(1e-3, 1e-2, size=(n_out, n_in // qk)) * rng.choice([-1, 1], size=(n_out, n_in // qk))).astype(np.float16)
        blocks[:, :, at : at + 2] = d[..., None].view(np.uint8)
    if qtype == QT.Q4_K:
        blocks[1, :, 4:] = 0xFF  # scales and mins 63, codes 15
    else:
        blocks[1, :, :192] = 0xFF  # codes 63
        blocks[1, :, 192:208] = 0x7F  # scales 127
    return QuantMatrix(blocks.reshape(n_out, -1), qtype, n_in)


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q6_K], ids=lambda t: t.name)
def test_one_row_gives_the_packed_and_the_unpacked_bits(qtype: QT) -> None:
    """One activation row against a stored matrix of 40 rows (two 16-row groups and a tail of
    8, which decode.py unpacks row by row) gives each row the bits of the packed matrix, of
    the row in a batch of 3 (the 16-row kernels' batch path) and of the row alone."""
    k = 768
    m = _random_matrix(qtype, 40, k, seed=21)
    packed = QuantMatrix(m.data, qtype, k)
    assert pack_matrix(packed)
    x = np.random.default_rng(22).standard_normal((3, k)).astype(np.float32)
    x[0, :256] *= 100.0  # another scale per block
    x[0, 300] = -1e3  # a block whose largest value is negative
    for t in range(3):
        xa = prepare(x[t : t + 1], qtype)
        got = matmul(xa, m)
        assert np.array_equal(got.view(np.uint32), matmul(xa, packed).view(np.uint32))
        assert np.array_equal(got[0].view(np.uint32), matmul(prepare(x, qtype), m)[t].view(np.uint32))
        for i in (0, 1, 17, 31, 39):
            alone = matmul(xa, QuantMatrix(m.data[i : i + 1], qtype, k))
            assert alone[0, 0].view(np.uint32) == got[0, i].view(np.uint32)


def _direct_call(kernel):  # type: ignore[no-untyped-def]
    @njit
    def call(w, xc, xd, xb, out):  # type: ignore[no-untyped-def]
        for r0 in range(0, w.shape[0] - 15, 16):
            kernel(w, r0, xc.shape[1] // 256, xc, xd, xd, xb, out, out)

    return call


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q6_K], ids=lambda t: t.name)
def test_16_row_kernel_takes_the_one_row_code_for_one_activation_row(qtype: QT) -> None:
    """The type's 16-row kernel (rows.py), called with one activation row, runs rows_k1.py's
    code (its loop over 4 rows at a time is in the generated IR) and fills the 16 rows."""
    m = _random_matrix(qtype, 32, 512, seed=23)
    xa = prepare(np.random.default_rng(24).standard_normal((1, 512)).astype(np.float32), qtype)
    assert isinstance(xa, QActs)
    xb = _sub_sums(xa, QUANT_FORMATS[qtype])
    out = np.full((1, 32), np.nan, dtype=np.float32)
    call = _direct_call(KERNELS[qtype])
    call(m.data, xa.codes, xa.d, xb, out)
    assert "k1_row" in call.inspect_llvm(call.signatures[0])
    assert np.array_equal(out.view(np.uint32), matmul(xa, m).view(np.uint32))
