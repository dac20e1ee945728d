"""ggml_validate_row_data: NaN or infinite values in a tensor's bytes.

llama-quantize validates every input tensor when it loads the model (and refuses the file:
"tensor '...' has invalid data") and every quantized output chunk ("quantized data validation
failed"). As ggml does, float types are checked value by value and block types through their
fp16 scale fields only (a block's values are finite when its scales are). Checks work on the raw
bits (exponent all ones), in chunks, without decoding.
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

# byte offsets of the fp16 fields (d, and dmin / m where there is one) inside each block
_F16_FIELDS: dict[QT, tuple[int, ...]] = {
    QT.Q4_0: (0,), QT.Q4_1: (0, 2), QT.Q5_0: (0,), QT.Q5_1: (0, 2), QT.Q8_0: (0,),
    QT.Q2_K: (80, 82), QT.Q3_K: (108,), QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208,),
    QT.IQ4_NL: (0,), QT.IQ4_XS: (0,),
}
_CHUNK_BYTES = 1 << 24


def _any_all_ones(words: np.ndarray, mask: int) -> bool:
    """Whether any word has all the bits of `mask` set (an fp exponent of all ones)."""
    return bool(np.any(np.bitwise_and(words, mask) == mask))


def has_invalid_values(raw: np.ndarray, qtype: QT) -> bool:
    """True if the ggml bytes `raw` (uint8) of type `qtype` hold a NaN or an infinity (for block
    types: in a scale field). Types without a check (I8..I64, other block types) pass."""
    data = np.asarray(raw).reshape(-1).view(np.uint8)
    if qtype == QT.F32:
        unit, mask, dtype = 4, 0x7F800000, "<u4"
    elif qtype == QT.F16:
        unit, mask, dtype = 2, 0x7C00, "<u2"
    elif qtype == QT.BF16:
        unit, mask, dtype = 2, 0x7F80, "<u2"
    elif qtype in _F16_FIELDS:
        size = GGML_QUANT_SIZES[qtype][1]
        step = max(1, _CHUNK_BYTES // size) * size
        for s in range(0, data.size, step):
            blocks = data[s : s + step].reshape(-1, size)
            for off in _F16_FIELDS[qtype]:
                h = np.ascontiguousarray(blocks[:, off : off + 2]).view("<u2")
                if _any_all_ones(h, 0x7C00):
                    return True
        return False
    else:
        return False
    step = _CHUNK_BYTES // unit * unit
    for s in range(0, data.size, step):
        if _any_all_ones(data[s : s + step].view(dtype), mask):
            return True
    return False
