"""llama-quantize's advanced options, proven against llama-quantize itself: `--imatrix` (GGUF and
legacy .dat) with the weighted quantizers, `--include-weights` / `--exclude-weights`,
`--tensor-type`, `--prune-layers`, `--override-kv`, COPY, Q2_K_S and its refusal without an
importance matrix. tests/fixtures/quantize/option_runs.json holds llama-quantize's output for
each run (scripts/quantize_fixtures.py --options); the weighted kernels are checked block by
block against ggml_quantize_chunk (kernels_imatrix.npz)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from typer.testing import CliRunner

from llamacli.cli import app, register_all
from llamacli.core.errors import InvalidRequest
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.quantize.overrides import (
    LayerRemap,
    parse_kv_override,
    parse_prune_layers,
    parse_tensor_type_override,
)
from llamacli.core.quantize.weighted import WEIGHTED_TYPES, encode_weighted

from tests.test_quantize_inputs import FIXTURES, sha256_file, write_imatrix, write_input

RUNS: list[dict[str, Any]] = json.loads((FIXTURES / "option_runs.json").read_text())["runs"]


def _id(run: dict[str, Any]) -> str:
    return f"{run['input']}-{run['type']}-{' '.join(run['args'])}"


def _quantize(work: Path, args: list[str], type_name: str, src: str = "in.gguf") -> Any:
    register_all()
    return CliRunner().invoke(app, ["quantize", *args, src, "out.gguf", type_name, "2"], catch_exceptions=False)


@pytest.mark.parametrize("run", RUNS, ids=[_id(r) for r in RUNS])
def test_option_run_equals_llama_quantize(run: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_input(run["input"], tmp_path / "in.gguf")
    write_imatrix(src, tmp_path / "imatrix.gguf")
    write_imatrix(src, tmp_path / "imatrix.dat", legacy=True)
    monkeypatch.chdir(tmp_path)
    r = _quantize(tmp_path, run["args"], run["type"], src.name)
    outs = sorted(tmp_path.glob("out*.gguf"))
    if run.get("refused"):
        assert r.exit_code != 0 and not outs
        assert "importance matrix" in r.output
        return
    assert r.exit_code == 0, r.output
    got = GGUFFile(outs[0])
    assert [[n, t.qtype.name] for n, t in got.tensors.items()] == run["types"]
    assert {o.name: sha256_file(o) for o in outs} == run["files"]


def test_option_runs_cover_the_new_file_types() -> None:
    assert {"Q2_K_S", "COPY", "TQ1_0", "TQ2_0", "MXFP4_MOE", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M",
            "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "IQ1_S", "IQ1_M"} <= {r["type"] for r in RUNS if not r.get("refused")}
    written = {t for r in RUNS for _, t in r.get("types", [])}
    assert {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL"} <= written
    assert {r["type"] for r in RUNS if r.get("refused")} >= {"Q2_K_S", "IQ2_XXS", "IQ1_M", "IQ3_XXS"}
    moe = {t for r in RUNS if r["input"] == "qwen3moe-f32" for _, t in r.get("types", [])}
    assert "MXFP4" in moe  # the experts of the MoE input


@pytest.fixture(scope="module")
def kernels() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "kernels_imatrix.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("qtype", sorted(WEIGHTED_TYPES), ids=lambda t: t.name)
@pytest.mark.parametrize("weights", ["pos", "zeros"])
def test_weighted_encoder_bit_exact_with_libggml(qtype: QT, weights: str, kernels: dict[str, np.ndarray]) -> None:
    x, qw = kernels["x"], kernels[f"qw_{weights}"]
    want = kernels[f"{qtype.name}_{weights}"]
    got = encode_weighted(x, qw, qtype).reshape(want.shape)
    bad = np.nonzero((got != want).any(axis=1))[0]
    assert bad.size == 0, f"rows {bad.tolist()} differ"


def test_weights_change_the_bytes(kernels: dict[str, np.ndarray]) -> None:
    """The weighted path is not the plain one: the two weight rows give different Q4_K bytes."""
    x = kernels["x"]
    assert not np.array_equal(encode_weighted(x, kernels["qw_pos"], QT.Q4_K), encode_weighted(x, kernels["qw_zeros"], QT.Q4_K))


@pytest.mark.parametrize(("text", "kind", "value"), [
    ("a.b=int:-12", "int", -12), ("a.b=int:7x", "int", 7), ("k=float:0.25", "float", 0.25),
    ("k=bool:false", "bool", False), ("k=str:hello world", "str", "hello world"), ("k=str:", "str", ""),
])
def test_parse_kv_override(text: str, kind: str, value: object) -> None:
    o = parse_kv_override(text)
    assert (o.kind, o.value) == (kind, value)


@pytest.mark.parametrize("text", ["novalue", "k=bool:yes", "k=list:1", "k=str:" + "x" * 128, "k" * 128 + "=int:1"])
def test_bad_kv_override_refused(text: str) -> None:
    with pytest.raises(InvalidRequest, match="--override-kv"):
        parse_kv_override(text)


def test_tensor_type_override_parsing() -> None:
    assert parse_tensor_type_override("ATTN_Q=Q8_0") == ("attn_q", QT.Q8_0)
    for bad, why in [("attn_q", "malformed"), ("=q8_0", "missing tensor name"), ("attn_q=", "missing quantization type"),
                     ("attn_q=q9_9", "invalid quantization type"), ("(=q8_0", "invalid regular expression")]:
        with pytest.raises(InvalidRequest, match=why):
            parse_tensor_type_override(bad)


def test_prune_layer_parsing_and_renumbering() -> None:
    assert parse_prune_layers("7,3,3") == (3, 7)
    with pytest.raises(InvalidRequest, match="invalid layer id"):
        parse_prune_layers("1,-2")
    remap = LayerRemap((1, 3))
    got = [remap.rename(f"blk.{i}.attn_q.weight") for i in range(5)]
    assert got == ["blk.0.attn_q.weight", "", "blk.1.attn_q.weight", "", "blk.2.attn_q.weight"]
    assert remap.rename("output.weight") == "output.weight"


def test_cli_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_input("llama-f32", tmp_path / "in.gguf")
    monkeypatch.chdir(tmp_path)
    for args, needle in [
        (["--include-weights", "a", "--exclude-weights", "b"], "cannot be used together"),
        (["--imatrix", "missing.gguf"], "missing.gguf"),
        (["--tensor-type", "attn_q"], "malformed tensor type"),
        (["--override-kv", "x=int"], "invalid type"),
    ]:
        r = _quantize(tmp_path, args, "Q4_K_M")
        assert r.exit_code != 0, args
        errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and needle in errors[0], r.output
        assert not (tmp_path / "out.gguf").exists()


def test_dry_run_writes_nothing_and_reports_the_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_input("llama-f32", tmp_path / "in.gguf")
    monkeypatch.chdir(tmp_path)
    r = _quantize(tmp_path, ["--dry-run"], "Q2_K_S")
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "out.gguf").exists()
    assert "dry run" in r.output and "will require an importance matrix" in r.output
    size = next(x["bytes"] for x in json.loads((FIXTURES / "runs.json").read_text())["runs"]
                if x["input"] == "llama-f32" and x["type"] == "Q4_K_M" and not x["options"])
    r = _quantize(tmp_path, ["--dry-run"], "Q4_K_M")
    assert f"{size / 1024 / 1024:.2f} MiB; nothing written" in r.output
