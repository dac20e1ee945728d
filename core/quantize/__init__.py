"""`llama quantize`: GGUF -> GGUF in another ggml type, with llama-quantize's rules and
bit-exact ggml reference quantizers (legacy Q4_0..Q8_0, F16/BF16 and the K-quants Q2_K..Q6_K).

Modules: cfloat (C float32 semantics), legacy and kquants (encoders), convert (dispatch),
rules (which tensor gets which type), ftypes (file type names), validate (NaN/inf checks),
gguf_out (header, atomic output), model (the whole-file driver).
"""

from __future__ import annotations

from .convert import ENCODERS, encode
from .ftypes import (
    FILE_TYPES,
    FileType,
    parse_file_type,
    parse_tensor_type,
    try_parse_file_type,
    valid_names,
)
from .job import (
    QuantizeError,
    QuantizeJob,
    QuantizeOptions,
    QuantizeReport,
    TensorPlan,
    plan_quantization,
    quantize_model,
)

__all__ = [
    "ENCODERS", "FILE_TYPES", "FileType", "QuantizeError", "QuantizeJob", "QuantizeOptions", "QuantizeReport",
    "TensorPlan", "encode", "parse_file_type", "parse_tensor_type", "plan_quantization",
    "quantize_model", "try_parse_file_type", "valid_names",
]
