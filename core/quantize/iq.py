"""The IQ1, IQ2 and IQ3 quantizers (iq1.py, iq2.py, iq3.py) behind one entry point.

    encode_iq(rows (n, n_per_row) float32, qw (n_per_row,) or None, qtype) -> flat uint8 bytes

bit-exact with ggml_quantize_chunk(qtype, ..., imatrix=qw). IQ2_XXS, IQ2_XS and IQ1_S need the
importance weights (NEEDS_WEIGHTS: ggml aborts without them); the others fall back to weights
from the values themselves (their block encoders are in convert.ENCODERS).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT
from numba import njit

from .iq1 import row_iq1_m, row_iq1_s
from .iq2 import row_iq2_xs_s, row_iq2_xxs
from .iq3 import row_iq3
from .iqgrid import iq_grid

# type -> (kernel number in _rows, its grid in iqgrid)
_KIND = {QT.IQ2_XXS: (0, "iq2_xxs"), QT.IQ2_XS: (1, "iq2_xs"), QT.IQ2_S: (2, "iq2_s"),
         QT.IQ3_XXS: (3, "iq3_xxs"), QT.IQ3_S: (4, "iq3_s"), QT.IQ1_S: (5, "iq1"), QT.IQ1_M: (6, "iq1")}
IQ_TYPES = frozenset(_KIND)
NEEDS_WEIGHTS = frozenset({QT.IQ2_XXS, QT.IQ2_XS, QT.IQ1_S})


@njit(cache=True, nogil=True)
def _rows(kind, x, qw, has_w, out, grid, kmap, nbrs):  # type: ignore[no-untyped-def]
    """Every row of x (n, n_per_row) into out (n, row bytes) with the kernel `kind`."""
    for r in range(x.shape[0]):
        if kind == 0:
            row_iq2_xxs(x[r], qw, out[r], grid, kmap, nbrs)
        elif kind == 1:
            row_iq2_xs_s(x[r], qw, has_w, out[r], grid, kmap, nbrs, False)
        elif kind == 2:
            row_iq2_xs_s(x[r], qw, has_w, out[r], grid, kmap, nbrs, True)
        elif kind == 3:
            row_iq3(x[r], qw, has_w, out[r], grid, kmap, nbrs, False)
        elif kind == 4:
            row_iq3(x[r], qw, has_w, out[r], grid, kmap, nbrs, True)
        elif kind == 5:
            row_iq1_s(x[r], qw, out[r], grid, kmap, nbrs)
        else:
            row_iq1_m(x[r], qw, has_w, out[r], grid, kmap, nbrs)


def encode_iq(rows: np.ndarray, qw: np.ndarray | None, qtype: QT) -> np.ndarray:
    """rows (n, n_per_row) float32, n_per_row a multiple of 256, with importance weights qw
    (n_per_row,) or None -> flat uint8 ggml bytes."""
    if qw is None and qtype in NEEDS_WEIGHTS:
        raise ValueError(f"{qtype.name} needs importance weights")
    kind, grid_name = _KIND[qtype]
    g = iq_grid(grid_name)
    block, size = GGML_QUANT_SIZES[qtype]
    x = np.ascontiguousarray(rows, dtype=np.float32)
    out = np.empty((x.shape[0], x.shape[1] // block * size), dtype=np.uint8)
    w = np.empty(1, np.float32) if qw is None else np.ascontiguousarray(qw, dtype=np.float32)
    _rows(kind, x, w, qw is not None, out, g.grid, g.kmap, g.neighbours)
    return out.reshape(-1)


def _plain(qtype: QT) -> Callable[[np.ndarray], np.ndarray]:
    """The encoder of super-blocks (n, 256) without weights, for convert.ENCODERS."""

    def enc(blocks: np.ndarray) -> np.ndarray:
        return encode_iq(blocks, None, qtype)

    return enc


quantize_iq2_s = _plain(QT.IQ2_S)
quantize_iq3_xxs = _plain(QT.IQ3_XXS)
quantize_iq3_s = _plain(QT.IQ3_S)
quantize_iq1_m = _plain(QT.IQ1_M)
