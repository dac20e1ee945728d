"""llama.cpp file types (`llama_ftype`) that `llama quantize` can produce, and how their names and
numbers are parsed (tools/quantize/quantize.cpp `QUANT_OPTIONS` and `try_parse_ftype`)."""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGMLQuantizationType as QT

from llamacli.core.errors import InvalidRequest


@dataclass(frozen=True)
class FileType:
    """One `llama_ftype`: its name as llama-quantize prints it, its id (general.file_type) and
    the tensor type most weights get (llama_ftype_get_default_type)."""

    name: str
    id: int
    default_type: QT
    description: str


# In llama-quantize's order: a number resolves to the first entry with that id, so 15 is "Q4_K"
# (the alias listed before Q4_K_M), as in llama-quantize.
FILE_TYPES: tuple[FileType, ...] = (
    FileType("Q4_0", 2, QT.Q4_0, " 4.34G, +0.4685 ppl @ Llama-3-8B"),
    FileType("Q4_1", 3, QT.Q4_1, " 4.78G, +0.4511 ppl @ Llama-3-8B"),
    FileType("MXFP4_MOE", 38, QT.MXFP4, " MXFP4 MoE"),
    FileType("Q5_0", 8, QT.Q5_0, " 5.21G, +0.1316 ppl @ Llama-3-8B"),
    FileType("Q5_1", 9, QT.Q5_1, " 5.65G, +0.1062 ppl @ Llama-3-8B"),
    FileType("IQ2_XXS", 19, QT.IQ2_XXS, " 2.06 bpw quantization"),
    FileType("IQ2_XS", 20, QT.IQ2_XS, " 2.31 bpw quantization"),
    FileType("IQ2_S", 28, QT.IQ2_XS, " 2.5  bpw quantization"),
    FileType("IQ2_M", 29, QT.IQ2_S, " 2.7  bpw quantization"),
    FileType("IQ1_S", 24, QT.IQ1_S, " 1.56 bpw quantization"),
    FileType("IQ1_M", 31, QT.IQ1_M, " 1.75 bpw quantization"),
    FileType("TQ1_0", 36, QT.TQ1_0, " 1.69 bpw ternarization"),
    FileType("TQ2_0", 37, QT.TQ2_0, " 2.06 bpw ternarization"),
    FileType("Q2_K", 10, QT.Q2_K, " 2.96G, +3.5199 ppl @ Llama-3-8B"),
    FileType("Q2_K_S", 21, QT.Q2_K, " 2.96G, +3.1836 ppl @ Llama-3-8B"),
    FileType("IQ3_XXS", 23, QT.IQ3_XXS, " 3.06 bpw quantization"),
    FileType("IQ3_S", 26, QT.IQ3_S, " 3.44 bpw quantization"),
    FileType("IQ3_M", 27, QT.IQ3_S, " 3.66 bpw quantization mix"),
    FileType("Q3_K", 12, QT.Q3_K, "alias for Q3_K_M"),
    FileType("IQ3_XS", 22, QT.IQ3_S, " 3.3 bpw quantization"),
    FileType("Q3_K_S", 11, QT.Q3_K, " 3.41G, +1.6321 ppl @ Llama-3-8B"),
    FileType("Q3_K_M", 12, QT.Q3_K, " 3.74G, +0.6569 ppl @ Llama-3-8B"),
    FileType("Q3_K_L", 13, QT.Q3_K, " 4.03G, +0.5562 ppl @ Llama-3-8B"),
    FileType("IQ4_NL", 25, QT.IQ4_NL, " 4.50 bpw non-linear quantization"),
    FileType("IQ4_XS", 30, QT.IQ4_XS, " 4.25 bpw non-linear quantization"),
    FileType("Q4_K", 15, QT.Q4_K, "alias for Q4_K_M"),
    FileType("Q4_K_S", 14, QT.Q4_K, " 4.37G, +0.2689 ppl @ Llama-3-8B"),
    FileType("Q4_K_M", 15, QT.Q4_K, " 4.58G, +0.1754 ppl @ Llama-3-8B"),
    FileType("Q5_K", 17, QT.Q5_K, "alias for Q5_K_M"),
    FileType("Q5_K_S", 16, QT.Q5_K, " 5.21G, +0.1049 ppl @ Llama-3-8B"),
    FileType("Q5_K_M", 17, QT.Q5_K, " 5.33G, +0.0569 ppl @ Llama-3-8B"),
    FileType("Q6_K", 18, QT.Q6_K, " 6.14G, +0.0217 ppl @ Llama-3-8B"),
    FileType("Q8_0", 7, QT.Q8_0, " 7.96G, +0.0026 ppl @ Llama-3-8B"),
    FileType("F16", 1, QT.F16, "14.00G, +0.0020 ppl @ Mistral-7B"),
    FileType("BF16", 32, QT.BF16, "14.00G, -0.0050 ppl @ Mistral-7B"),
    FileType("F32", 0, QT.F32, "26.00G              @ 7B"),
    # after F32, so that 0 means F32; COPY keeps every tensor and the input's file type
    FileType("COPY", 0, QT.F32, "only copy tensors, no quantizing"),
)

# ftype ids by name, for the mixture rules (llama.h LLAMA_FTYPE_MOSTLY_*)
Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M = 10, 11, 12, 13, 14, 15, 16, 17
Q2_K_S = 21
TQ1_0, TQ2_0, MXFP4_MOE = 36, 37, 38
IQ4_NL, IQ4_XS = 25, 30
IQ2_XXS, IQ2_XS, IQ3_XS, IQ3_XXS, IQ1_S, IQ3_S, IQ3_M, IQ2_S, IQ2_M, IQ1_M = 19, 20, 22, 23, 24, 26, 27, 28, 29, 31
Q4_0, Q5_0 = 2, 8

# Tensor types we can write (for --output-tensor-type / --token-embedding-type).
WRITABLE_TYPES: tuple[QT, ...] = (
    QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0,
    QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.TQ1_0, QT.TQ2_0, QT.MXFP4, QT.IQ4_NL,
    QT.IQ4_XS, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S, QT.IQ1_M,
)


def valid_names() -> str:
    """The accepted file type names, for error messages and --help."""
    return ", ".join(f.name for f in FILE_TYPES)


def _leading_int(s: str) -> int | None:
    """std::stoi: optional whitespace and sign, then digits; the rest is ignored."""
    t = s.lstrip()
    i = 1 if t[:1] in ("+", "-") else 0
    j = i
    while j < len(t) and t[j].isdigit():
        j += 1
    return int(t[:j]) if j > i else None


def try_parse_file_type(text: str) -> FileType | None:
    """A name (any case) or a numeric id, as llama-quantize's try_parse_ftype; None if neither."""
    up = text.upper()
    for f in FILE_TYPES:
        if f.name == up:
            return f
    n = _leading_int(text)
    if n is not None:
        for f in FILE_TYPES:
            if f.id == n:
                return f
    return None


def parse_file_type(text: str) -> FileType:
    """try_parse_file_type, raising InvalidRequest that lists the valid types."""
    f = try_parse_file_type(text)
    if f is None:
        raise InvalidRequest(f"unknown quantization type {text!r} (valid: {valid_names()}, or their numeric ids)")
    return f


def parse_tensor_type(text: str, option: str) -> QT:
    """A ggml type name (any case) for --output-tensor-type / --token-embedding-type."""
    up = text.upper()
    for t in WRITABLE_TYPES:
        if t.name == up:
            return t
    names = ", ".join(t.name.lower() for t in WRITABLE_TYPES)
    raise InvalidRequest(f"{option}: unknown tensor type {text!r} (valid: {names})")
