"""core.quantize against llama.cpp's quantizer (fixtures from scripts/quantize_fixtures.py):
encoders bit-exact with libggml, whole output files byte-identical with llama-quantize's, the
type of every tensor for every file type, RMS error of the K-quants, outputs loadable by our
runtime, metadata, and the atomic output file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from llamacli.core.model.state.batch import Batch
from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.load import load_model
from llamacli.core.quantize import (
    ENCODERS,
    FILE_TYPES,
    QuantizeError,
    QuantizeOptions,
    encode,
    gguf_out,
    parse_file_type,
    parse_tensor_type,
    plan_quantization,
    quantize_model,
    try_parse_file_type,
)
from llamacli.core.quantize.cfloat import nearest_int, roundf, seqsum
from llamacli.core.quantize.rules import _use_more_bits, tensor_order
from llamacli.core.model.kernels.dequant import dequantize

from tests.test_quantize_inputs import FIXTURES, sha256_file, write_input

RUNS: list[dict[str, Any]] = json.loads((FIXTURES / "runs.json").read_text())["runs"]
K_TYPES = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}


def _run_id(r: dict[str, Any]) -> str:
    opts = "+".join(f"{k}={v}" if v is not True else k for k, v in sorted(r["options"].items()))
    return f"{r['input']}-{r['type']}" + (f"-{opts}" if opts else "")


def _options(r: dict[str, Any], n_threads: int = 2) -> QuantizeOptions:
    o = r["options"]
    return QuantizeOptions(
        parse_file_type(r["type"]),
        allow_requantize=o.get("allow_requantize", False),
        pure=o.get("pure", False),
        leave_output_tensor=o.get("leave_output_tensor", False),
        output_tensor_type=parse_tensor_type(o["output_tensor_type"], "-") if "output_tensor_type" in o else None,
        token_embedding_type=parse_tensor_type(o["token_embedding_type"], "-") if "token_embedding_type" in o else None,
        n_threads=n_threads,
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("qin")
    return {name: write_input(name, d / f"{name}.gguf") for name in {r["input"] for r in RUNS}}


# ------------------------------------------------------------------------ encoders vs libggml


@pytest.fixture(scope="module")
def kernels() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "kernels.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("qtype", [t for t in ENCODERS if t != QT.F32], ids=lambda t: t.name)
def test_encoder_bit_exact_with_libggml(qtype: QT, kernels: dict[str, np.ndarray]) -> None:
    """Edge-case super-blocks (zeros, constants, subnormals, ties, huge outliers, ...)."""
    x, expected = kernels["x"], kernels[qtype.name]
    got = encode(x, qtype).reshape(expected.shape)
    bad = np.nonzero((got != expected).any(axis=1))[0]
    assert bad.size == 0, f"{qtype.name}: rows {bad.tolist()} differ from libggml"


def test_encoders_are_row_independent(kernels: dict[str, np.ndarray]) -> None:
    # a chunked call (one row at a time) gives the same bytes as one call
    x = kernels["x"]
    for qtype in (QT.Q4_K, QT.Q3_K, QT.Q8_0):
        rows = np.concatenate([encode(x[i : i + 1], qtype) for i in range(x.shape[0])])
        np.testing.assert_array_equal(rows, encode(x, qtype))


def test_cfloat_helpers() -> None:
    v = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.49, np.nan, np.inf, 1e30], dtype=np.float32)
    # nearest_int: halves to even; NaN -> 0, inf -> -4194304, huge values wrap (the C bit trick)
    assert nearest_int(v[:6]).tolist() == [0, 2, 2, 0, -2, 3]
    assert nearest_int(v[6:8]).tolist() == [0, -4194304]
    assert -4194304 <= int(nearest_int(v[8:])[0]) < 4194304
    # roundf: halves away from zero, exactly, including just below 0.5
    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    assert roundf(np.array([0.5, -0.5, 2.5, below_half], dtype=np.float32)).tolist() == [1, -1, 3, 0]
    # seqsum adds left to right, also for one column (where NumPy's sum is pairwise)
    a = np.array([[1e8], [1.0], [-1e8], [1.0]] * 3, dtype=np.float32)
    expected = np.float32(0)
    for value in a[:, 0]:
        expected = np.float32(expected + value)
    assert seqsum(a)[0] == expected


# ------------------------------------------------------------------- whole files vs llama.cpp


@pytest.mark.parametrize("run", RUNS, ids=[_run_id(r) for r in RUNS])
def test_output_equals_llama_quantize(run: dict[str, Any], inputs: dict[str, Path], tmp_path: Path) -> None:
    src = inputs[run["input"]]
    out = tmp_path / "out.gguf"
    report = quantize_model(str(src), str(out), _options(run))
    types = [p.dst_type.name for p in report.tensors]
    names = [p.name for p in report.tensors]
    if "types" in run:
        assert types == run["types"]
    else:
        expected = run["tensors"]
        assert names == list(expected)
        assert dict(zip(names, types)) == {n: v[0] for n, v in expected.items()}
        _check_tensors(src, out, expected)
    assert out.stat().st_size == run["bytes"]
    assert sha256_file(out) == run["file_sha256"]


def _check_tensors(src: Path, out: Path, expected: dict[str, list[Any]]) -> None:
    """Per tensor: bytes (sha256 prefix) and, for converted tensors, RMS error vs the float
    input within 1% of llama.cpp's (equal when the bytes are)."""
    g, q = GGUFFile(src), GGUFFile(out)
    for name, (qtype, sha16, rms_ref) in expected.items():
        raw = np.asarray(q.raw(name))
        if rms_ref is not None:
            t, s = q.tensors[name], g.tensors[name]
            x = dequantize(g.raw(name), s.qtype, s.shape).astype(np.float64)
            y = dequantize(raw, t.qtype, t.shape).astype(np.float64)
            rms = float(np.sqrt(np.mean((y - x) ** 2)))
            assert rms <= 1.01 * rms_ref, f"{name} ({qtype}): RMS {rms:.6g} vs llama.cpp {rms_ref:.6g}"
        assert hashlib.sha256(raw.tobytes()).hexdigest()[:16] == sha16, f"{name} ({qtype}) bytes differ"


def test_fixture_runs_cover_every_type_and_fallbacks() -> None:
    # aliases; Q2_K_S (needs an imatrix), COPY, the ternary, MXFP4 and IQ types: test_quantize_options.py
    names = {f.name for f in FILE_TYPES if not f.name.startswith("IQ")} - {
        "Q3_K", "Q4_K", "Q5_K", "Q2_K_S", "COPY", "TQ1_0", "TQ2_0", "MXFP4_MOE"}
    for inp in ("llama-f32", "gemma3-640", "rules-llama32", "rules-gemma18"):
        assert {r["type"] for r in RUNS if r["input"] == inp and not r["options"]} == names
    # the 640-wide model: K-quants fall back (Q4_K -> Q5_0, Q6_K -> Q8_0, ...), 1-D stay F32
    run = next(r for r in RUNS if r["input"] == "gemma3-640" and r["type"] == "Q4_K_M" and not r["options"])
    t = {n: v[0] for n, v in run["tensors"].items()}
    assert t["blk.0.attn_q.weight"] == "Q5_0" and t["token_embd.weight"] == "Q8_0"
    assert t["blk.1.attn_v.weight"] == "Q8_0" and t["blk.1.ffn_down.weight"] == "Q6_K"
    assert t["blk.0.attn_norm.weight"] == "F32"
    assert all(r["loads"] for r in RUNS if "loads" in r)


def test_metadata_copied_with_file_type(inputs: dict[str, Path], tmp_path: Path) -> None:
    src = inputs["llama-f32"]
    out = tmp_path / "q.gguf"
    quantize_model(str(src), str(out), QuantizeOptions(parse_file_type("q5_k_s")))
    a, b = GGUFFile(src).metadata, GGUFFile(out).metadata
    assert b["general.file_type"] == 16 and b["general.quantization_version"] == 2
    # same keys, the two set ones moved to the end (as gguf_set_val_u32 does)
    assert list(b)[-2:] == ["general.quantization_version", "general.file_type"]
    assert [k for k in b if k not in list(b)[-2:]] == [k for k in a if k in b and k not in list(b)[-2:]]
    for k, v in a.items():
        if k not in ("general.file_type", "general.quantization_version"):
            assert np.array_equal(np.asarray(b[k]), np.asarray(v)), k


# ------------------------------------------------------------------------------- rules, types


def test_tensor_order_is_llama_cpp_loader_order() -> None:
    names = ["blk.10.attn_q.weight", "output.weight", "blk.2.ffn_up.weight", "blk.2.attn_k.weight", "token_embd.weight"]
    assert tensor_order(names) == [
        "output.weight", "token_embd.weight", "blk.2.attn_k.weight", "blk.2.ffn_up.weight", "blk.10.attn_q.weight",
    ]


def test_use_more_bits_matches_c_integer_maths() -> None:
    # i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2, C division and remainder
    assert [i for i in range(18) if _use_more_bits(i, 18)] == [0, 1, 4, 7, 10, 13, 15, 16, 17]
    assert [i for i in range(4) if _use_more_bits(i, 4)] == [2, 3]


@pytest.mark.parametrize(
    "text,name,ftype_id",
    [("Q4_K_M", "Q4_K_M", 15), ("q4_k_m", "Q4_K_M", 15), ("Q4_K", "Q4_K", 15), ("15", "Q4_K", 15),
     ("7", "Q8_0", 7), ("bf16", "BF16", 32), ("0", "F32", 0), ("12", "Q3_K", 12), ("q3_k_l", "Q3_K_L", 13)],
)
def test_parse_file_type(text: str, name: str, ftype_id: int) -> None:
    f = try_parse_file_type(text)
    assert f is not None and (f.name, f.id) == (name, ftype_id)


def test_unknown_file_type_lists_valid_ones() -> None:
    assert try_parse_file_type("Q4_Z") is None and try_parse_file_type("99") is None
    with pytest.raises(InvalidRequest, match="Q4_K_M.*Q8_0"):
        parse_file_type("Q1_0")  # llama-quantize has it; we do not
    with pytest.raises(InvalidRequest, match="--output-tensor-type.*q6_k"):
        parse_tensor_type("q7_k", "--output-tensor-type")


def test_requantizing_needs_permission(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.gguf"
    with pytest.raises(QuantizeError, match="already quantized.*--allow-requantize"):
        quantize_model(str(inputs["llama-q8_0"]), str(out), QuantizeOptions(parse_file_type("Q4_0")))
    assert not out.exists()
    # Q8_0 -> Q8_0 copies every tensor: nothing is requantized, so no permission is needed
    report = quantize_model(str(inputs["llama-q8_0"]), str(out), QuantizeOptions(parse_file_type("Q8_0")))
    assert not any(p.converts for p in report.tensors)
    a, b = GGUFFile(inputs["llama-q8_0"]), GGUFFile(out)
    for name in a.tensors:
        assert np.array_equal(np.asarray(a.raw(name)), np.asarray(b.raw(name))), name


def test_forced_type_must_fit_the_row_length(inputs: dict[str, Path], tmp_path: Path) -> None:
    # llama.cpp asserts here; we explain
    opts = QuantizeOptions(parse_file_type("Q8_0"), token_embedding_type=QT.Q6_K)
    with pytest.raises(QuantizeError, match="token_embd.weight.*640.*Q6_K"):
        plan_quantization(GGUFFile(inputs["gemma3-640"]), opts)
    assert not (tmp_path / "x.gguf").exists()


def test_same_input_and_output_refused(inputs: dict[str, Path], tmp_path: Path) -> None:
    src = tmp_path / "m.gguf"
    src.write_bytes(inputs["llama-f32"].read_bytes())
    link = tmp_path / "link.gguf"
    link.symlink_to(src)
    hard = tmp_path / "hard.gguf"
    hard.hardlink_to(src)
    for out in (src, link, hard):
        with pytest.raises(QuantizeError, match="same file"):
            quantize_model(str(src), str(out), QuantizeOptions(parse_file_type("Q8_0")))
    assert sha256_file(src) == sha256_file(inputs["llama-f32"])


# ---------------------------------------------------------------------------- atomic output


def test_failure_leaves_no_output(inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.gguf"
    out.write_bytes(b"previous contents")
    calls = {"n": 0}
    real = gguf_out.AtomicOutput.write

    def failing_write(self: gguf_out.AtomicOutput, data: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device")
        real(self, data)

    monkeypatch.setattr(gguf_out.AtomicOutput, "write", failing_write)
    with pytest.raises(QuantizeError, match="No space left on device.*disk full"):
        quantize_model(str(inputs["llama-f32"]), str(out), QuantizeOptions(parse_file_type("Q4_0")))
    assert out.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf"]


def test_interrupt_leaves_no_temp_file(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.gguf"

    def stop(i: int, n: int, plan: Any) -> None:
        if i == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        quantize_model(str(inputs["llama-f32"]), str(out), QuantizeOptions(parse_file_type("Q8_0")), stop)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------- our runtime loads it


@pytest.mark.parametrize("ftype", ["Q8_0", "Q4_K_M", "Q5_1"])
def test_runtime_loads_quantized_model(ftype: str, inputs: dict[str, Path], tmp_path: Path) -> None:
    """Our runtime runs our output; its logits follow the float model's (correlation)."""
    out = tmp_path / "q.gguf"
    quantize_model(str(inputs["llama-f32"]), str(out), QuantizeOptions(parse_file_type(ftype)))
    toks = [1, 20, 31, 47, 52, 60, 75, 88]
    ref_model, _, _ = load_model(inputs["llama-f32"], numerics="f32")
    model, g, _ = load_model(out, numerics="f32")
    assert g.metadata["general.file_type"] == parse_file_type(ftype).id
    ref = ref_model.forward(Batch.single(toks, all_logits=True), ref_model.new_cache(1, 16))
    got = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 16))
    assert np.isfinite(got).all()
    corr = np.corrcoef(got.ravel(), ref.ravel())[0, 1]
    assert corr > {"Q8_0": 0.999, "Q5_1": 0.98, "Q4_K_M": 0.96}[ftype]


def test_runtime_loads_wide_fallback_model(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "g.gguf"
    report = quantize_model(str(inputs["gemma3-640"]), str(out), QuantizeOptions(parse_file_type("Q4_K_M")))
    assert report.n_fallback > 0
    model, _, _ = load_model(out, numerics="f32")
    logits = model.forward(Batch.single([2, 10, 20, 30], all_logits=True), model.new_cache(1, 8))
    assert np.isfinite(logits).all()


def _poke(src: Path, dst: Path, name: str, value: float) -> Path:
    """A copy of src with the first float32 value of tensor `name` replaced."""
    data = bytearray(src.read_bytes())
    t = GGUFFile(src).tensors[name]
    data[t.offset : t.offset + 4] = np.array([value], dtype="<f4").tobytes()
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize("value", [np.inf, np.nan])
@pytest.mark.parametrize("name", ["blk.0.attn_norm.weight", "blk.1.ffn_up.weight"])  # copied, converted
def test_invalid_input_data_refused(name: str, value: float, inputs: dict[str, Path], tmp_path: Path) -> None:
    # llama.cpp: "tensor 'blk.0.attn_q.weight' has invalid data"
    bad = _poke(inputs["llama-f32"], tmp_path / "bad.gguf", name, value)
    with pytest.raises(ModelLoadError, match=f"{name}.*invalid data"):
        quantize_model(str(bad), str(tmp_path / "o.gguf"), QuantizeOptions(parse_file_type("Q4_0")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.gguf"]


def test_scale_overflow_refused(inputs: dict[str, Path], tmp_path: Path) -> None:
    # 1e30 is a valid float32 but its F16 (or Q8_0 scale) is inf: llama.cpp's "quantized data
    # validation failed"
    big = _poke(inputs["llama-f32"], tmp_path / "big.gguf", "blk.0.attn_q.weight", 1e30)
    for t in ("F16", "Q8_0"):
        with pytest.raises(QuantizeError, match="blk.0.attn_q.weight.*validation failed"):
            quantize_model(str(big), str(tmp_path / "o.gguf"), QuantizeOptions(parse_file_type(t)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.gguf"]


def test_guessed_file_type_of_ggml_types_40_to_42() -> None:
    """llama_model_loader's guess names NVFP4, Q1_0 and Q2_0 files (llama.h ftypes 39-41)."""
    from llamacli.core.model.kernels.ggml_types import Q2_0
    from llamacli.core.quantize.job import guess_file_type

    assert [guess_file_type([t, t, QT.F32]) for t in (QT.NVFP4, QT.Q1_0, Q2_0)] == [39, 40, 41]
    assert guess_file_type([QT.Q8_1]) == 0
