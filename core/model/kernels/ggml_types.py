"""ggml weight types newer than the `gguf` package: registered into its enum and block sizes.

The vendored ggml (llama.cpp) defines GGML_TYPE_Q2_0 = 42 (QK2_0 = 64 values: fp16 d | 16 bytes
of 2-bit codes, 18 bytes); gguf-py's GGMLQuantizationType stops at Q1_0 = 41. Every module that
names the type imports this one first, so that `GGMLQuantizationType(42)` (a file's tensor
type), `GGMLQuantizationType.Q2_0` and `GGML_QUANT_SIZES[...]` answer as for the others.
"""

from __future__ import annotations

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

# (name, ggml type id, values per block, bytes per block) of each type gguf-py lacks
_EXTRA = (("Q2_0", 42, 64, 18),)


def _register(name: str, value: int, qk: int, size: int) -> None:
    """Add member `name` = value to GGMLQuantizationType (an IntEnum) and its block size."""
    qt = GGMLQuantizationType
    if value not in qt._value2member_map_:
        member = int.__new__(qt, value)
        member._name_, member._value_ = name, value
        type.__setattr__(qt, name, member)  # (EnumType.__setattr__ refuses members' names)
        qt._member_map_[name] = member
        qt._member_names_.append(name)
        qt._value2member_map_[value] = member
    GGML_QUANT_SIZES.setdefault(qt(value), (qk, size))


for _extra in _EXTRA:
    _register(*_extra)

# the added members, typed for the code that names them (mypy knows only gguf-py's)
Q2_0: GGMLQuantizationType = GGMLQuantizationType(42)
