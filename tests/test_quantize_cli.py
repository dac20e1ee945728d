"""`llama quantize` as a user runs it (a subprocess): argument forms, the summary, one-line
errors with exit codes, and no output file left behind by a failed run."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_quantize_inputs import FIXTURES, sha256_file, write_input

ROOT = Path(__file__).resolve().parent.parent


def llama(*args: str, fsize_limit: int | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # RLIMIT_FSIZE: writes past the limit fail with EFBIG (Python ignores SIGXFSZ)
        if fsize_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "llamacli", "quantize", *args], check=False, capture_output=True, text=True,
        timeout=timeout, env=env, cwd=ROOT, preexec_fn=limit,
    )


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_input("llama-f32", tmp_path_factory.mktemp("qcli") / "tiny.gguf")


def _run_sha(input_name: str, type_name: str) -> str:
    runs = json.loads((FIXTURES / "runs.json").read_text())["runs"]
    return next(r["file_sha256"] for r in runs if r["input"] == input_name and r["type"] == type_name and not r["options"])


def _one_error_line(r: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert r.returncode == code, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in r.stderr


def test_quantize_writes_llama_cpp_identical_file(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.gguf"
    r = llama(str(model), str(out), "q4_k_m", "2")
    assert r.returncode == 0, r.stderr
    assert "model size" in r.stderr and "quant size" in r.stderr and "4.91 BPW" in r.stderr
    assert sha256_file(out) == _run_sha("llama-f32", "Q4_K_M")
    assert [p.name for p in tmp_path.iterdir()] == ["q.gguf"]


def test_type_as_number_and_default_output_name(model: Path) -> None:
    # llama-quantize's short form: INPUT TYPE [NTHREADS] writes INPUT's folder/ggml-model-TYPE.gguf
    r = llama(str(model), "7", "1")
    out = model.parent / "ggml-model-Q8_0.gguf"
    assert r.returncode == 0, r.stderr
    assert sha256_file(out) == _run_sha("llama-f32", "Q8_0")
    out.unlink()


def test_options_pass_through(model: Path, tmp_path: Path) -> None:
    runs = json.loads((FIXTURES / "runs.json").read_text())["runs"]
    want = next(r for r in runs if r["input"] == "llama-f32" and r["options"].get("token_embedding_type") == "q4_0")
    out = tmp_path / "o.gguf"
    r = llama(str(model), str(out), "Q4_K_M", "--output-tensor-type", "Q8_0", "--token-embedding-type", "q4_0")
    assert r.returncode == 0, r.stderr
    assert sha256_file(out) == want["file_sha256"]


def test_unknown_type_lists_valid_types(model: Path, tmp_path: Path) -> None:
    r = llama(str(model), str(tmp_path / "o.gguf"), "Q4_K_Z")
    _one_error_line(r, 1, "unknown quantization type 'Q4_K_Z'", "Q4_K_M", "Q8_0", "F16")
    r = llama(str(model), str(tmp_path / "o.gguf"), "Q8_0", "--output-tensor-type", "q9")
    _one_error_line(r, 1, "--output-tensor-type", "q6_k")
    assert list(tmp_path.iterdir()) == []


def test_missing_type_and_bad_threads(model: Path, tmp_path: Path) -> None:
    _one_error_line(llama(str(model), str(tmp_path / "o.gguf")), 1, "missing TYPE")
    _one_error_line(llama(str(model), str(tmp_path / "o.gguf"), "Q8_0", "many"), 1, "NTHREADS")


def test_requantize_refused_without_flag(tmp_path: Path) -> None:
    src = write_input("llama-q8_0", tmp_path / "q8.gguf")
    out = tmp_path / "o.gguf"
    _one_error_line(llama(str(src), str(out), "Q4_0"), 1, "already quantized", "--allow-requantize")
    assert not out.exists()
    r = llama(str(src), str(out), "Q4_0", "--allow-requantize")
    assert r.returncode == 0, r.stderr


def test_output_same_as_input_refused(model: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.gguf"
    link.symlink_to(model)
    before = sha256_file(model)
    for out in (model, link):
        _one_error_line(llama(str(model), str(out), "Q8_0"), 1, "same file")
    assert sha256_file(model) == before


@pytest.mark.parametrize("kind", ["missing", "not-gguf", "directory", "truncated"])
def test_unreadable_input_exit_2(kind: str, model: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.gguf"
    if kind == "not-gguf":
        src.write_text("hello, this is not a model" * 10)
    elif kind == "directory":
        src.mkdir()
    elif kind == "truncated":
        src.write_bytes(model.read_bytes()[:100_000])
    need = {"missing": "no such file", "not-gguf": "not a GGUF file", "directory": "is a directory",
            "truncated": "truncated"}[kind]
    out = tmp_path / "o.gguf"
    _one_error_line(llama(str(src), str(out), "Q8_0"), 2, str(src), need)
    assert not out.exists()


def test_output_directory_missing(model: Path, tmp_path: Path) -> None:
    _one_error_line(llama(str(model), str(tmp_path / "no" / "o.gguf"), "Q8_0"), 1, "does not exist")
    _one_error_line(llama(str(model), str(tmp_path), "Q8_0"), 1, "is a directory")


def test_write_error_leaves_nothing_behind(model: Path, tmp_path: Path) -> None:
    """A file-size limit makes the write fail half-way, as a full disk does."""
    out = tmp_path / "o.gguf"
    r = llama(str(model), str(out), "Q8_0", fsize_limit=300_000)
    _one_error_line(r, 1, f"cannot write {out}", "File too large", "no output file")
    assert list(tmp_path.iterdir()) == []


def test_row_length_not_fitting_forced_type(tmp_path: Path) -> None:
    src = write_input("gemma3-640", tmp_path / "g.gguf")
    out = tmp_path / "o.gguf"
    _one_error_line(llama(str(src), str(out), "Q8_0", "--token-embedding-type", "q4_k"), 1, "640", "Q4_K")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_K_M"])
def test_demo_model_requantized_like_llama_cpp(type_name: str, demo_model: str, tmp_path: Path) -> None:
    demo = json.loads((FIXTURES / "demo.json").read_text())
    want = next(r for r in demo["runs"] if r["type"] == type_name)
    out = tmp_path / "d.gguf"
    r = llama(demo_model, str(out), type_name, "2", "--allow-requantize")
    assert r.returncode == 0, r.stderr
    assert sha256_file(out) == want["file_sha256"]


def test_help_lists_every_type() -> None:
    from llamacli.core.quantize import FILE_TYPES
    from llamacli.core.quantize.ftypes import WRITABLE_TYPES

    from llamacli.cli import app, register_all

    register_all()
    cmd = next(c for c in app.registered_commands if c.callback is not None and c.callback.__name__ == "quantize")
    epilog = cmd.epilog or ""
    assert all(f.name in epilog for f in FILE_TYPES)
    assert all(t.name.lower() in epilog for t in WRITABLE_TYPES)
