"""`llama perplexity` and `llama imatrix` as a user runs them (subprocesses on a tiny model):
llama.cpp's output lines, --json, the files, one-line errors with exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamacli.core.quantize.imatrix_file import read_imatrix
from tests.tiny_models import write_tiny_model

ROOT = Path(__file__).resolve().parent.parent
TEXT = ROOT / "docs" / "numerics.md"


def llama(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "llamacli", *args], check=False, capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tiny_model("gemma3", "Q8_0", tmp_path_factory.mktemp("qcli") / "g.gguf"))


def _error(r: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert r.returncode == code, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_perplexity_prints_chunks_and_the_final_estimate(model: str) -> None:
    r = llama("perplexity", "-m", model, "-f", str(TEXT), "-c", "64", "--chunks", "3", "-t", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert re.fullmatch(r"\[1\]\d+\.\d{4},\[2\]\d+\.\d{4},\[3\](\d+\.\d{4}),", out[0]), out
    last = re.fullmatch(r"\[1\]\d+\.\d{4},\[2\]\d+\.\d{4},\[3\](\d+\.\d{4}),", out[0]).group(1)  # type: ignore[union-attr]
    assert re.fullmatch(rf"Final estimate: PPL = {last} \+/- \d+\.\d{{5}}", out[1]), out
    assert "perplexity: calculating perplexity over 3 chunks, n_ctx=64, batch_size=2048, n_seq=32" in r.stderr
    assert "seconds per pass - ETA" in r.stderr


def test_json_and_output_type_1(model: str) -> None:
    r = llama("perplexity", "-m", model, "-f", str(TEXT), "-c", "64", "-b", "128", "--chunks", "3", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert (j["n_ctx"], j["n_seq"], j["n_batch"], j["n_chunk"], j["n_scored"]) == (64, 2, 128, 3, 93)
    assert len(j["chunks"]) == 3 and j["chunks"][-1] == j["ppl"] and j["ppl_uncertainty"] > 0
    r = llama("perplexity", "-m", model, "-f", str(TEXT), "-c", "64", "-b", "128", "--chunks", "3", "--ppl-output-type", "1")
    lines = r.stdout.splitlines()
    # the start token of the chunk's group (llama.cpp prints i*n_ctx for both chunks of a group)
    assert [ln.split()[0] for ln in lines[:3]] == ["0", "0", "128"]
    assert lines[2].split()[1] == f"{j['ppl']:.4f}"


def test_kl_divergence_against_a_base_file(model: str, tmp_path: Path) -> None:
    base = tmp_path / "base.kld"
    r = llama("perplexity", "-m", model, "-f", str(TEXT), "-c", "64", "--chunks", "4", "--kl-divergence-base", str(base))
    assert r.returncode == 0, r.stderr
    ppl = re.search(r"Final estimate: PPL = (\S+)", r.stdout).group(1)  # type: ignore[union-attr]
    r = llama("perplexity", "-m", model, "--kl-divergence-base", str(base), "--kl-divergence")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    head = out.index("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                     "Δp RMS            Same top p")
    rows = out[head + 1 : head + 5]
    assert [row.split()[0] for row in rows] == ["1", "2", "3", "4"]
    assert rows[-1].split()[1] == ppl and rows[-1].endswith("100.000 ±  0.000 %")
    assert "====== Perplexity statistics ======" in out and "====== KL divergence statistics ======" in out
    assert any(re.fullmatch(r"Mean    KLD: +-?0\.0000\d\d ± +0\.\d{6}", ln) for ln in out), out
    assert "Same top p: 100.000 ± 0.000 %" in out
    assert re.search(r"^Median  KLD: ", r.stdout, re.M) and re.search(r"^ 0\.1%   Δp: ", r.stdout, re.M)


def test_perplexity_errors(model: str, tmp_path: Path) -> None:
    _error(llama("perplexity", "-m", model, "--kl-divergence"), 1, "you must provide a name of a file")
    _error(llama("perplexity", "-m", model, "-c", "64"), 1, "no text: pass -f FILE")
    _error(llama("perplexity", "-m", model, "-p", "too short", "-c", "64"), 1, "you need at least 128 tokens")
    _error(llama("perplexity", "-m", str(tmp_path / "none.gguf"), "-p", "x"), 2, "none.gguf")
    junk = tmp_path / "junk"
    junk.write_bytes(b"junk" * 10)
    _error(llama("perplexity", "-m", model, "--kl-divergence-base", str(junk), "--kl-divergence"), 1,
           "does not look like a file containing log-probabilities")


def test_imatrix_writes_combines_and_shows_statistics(model: str, tmp_path: Path) -> None:
    out = tmp_path / "im.gguf"
    r = llama("imatrix", "-m", model, "-f", str(TEXT), "-c", "64", "-b", "64", "--chunks", "2", "-o", str(out),
              "-ofreq", "1", "--save-frequency", "1")  # one chunk per batch: a copy after each
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"\[1\]\d+\.\d{4},\[2\]\d+\.\d{4},", r.stdout.splitlines()[0])
    assert "Final estimate: PPL = " in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["im.gguf", "im.gguf.at_1", "im.gguf.at_2"]
    im = read_imatrix(str(out))
    assert im.chunk_count == 2 and im.chunk_size == 64 and im.datasets == [str(TEXT)]
    assert im.entries["blk.0.attn_q.weight"].counts.tolist() == [128]
    dat = tmp_path / "im.dat"
    r = llama("imatrix", "--in-file", f"{out},{out}", "-o", str(dat), "--output-format", "dat", "-c", "64")
    assert r.returncode == 0 and "combining precomputed matrices only" in r.stderr, r.stderr
    assert read_imatrix(str(dat)).entries["blk.0.attn_q.weight"].counts.tolist() == [4]  # 256 rows / 64
    r = llama("imatrix", "--in-file", str(out), "--show-statistics")
    assert r.returncode == 0, r.stderr
    assert f"Computing statistics for {out} (42 tensors)" in r.stdout
    assert re.search(r"^    0\tattn_k              \t", r.stdout, re.M)
    assert "Computing weighted average statistics per layer (6 layers)" in r.stdout
    _error(llama("imatrix", "--show-statistics"), 1, "a single imatrix file is required")
    _error(llama("imatrix", "-c", "64"), 1, "No prompt provided and no precomputed matrices")


def test_benchmarks_print_llama_perplexity_lines(model: str, tmp_path: Path) -> None:
    fix = ROOT / "tests" / "fixtures" / "quality"
    r = llama("perplexity", "-m", model, "--winogrande", "-f", str(fix / "winogrande.csv"))
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln]
    assert len(rows) == 10 and all(re.fullmatch(r"\d+\t\d+\.\d{4}\t +-?\d+\.\d{6}  +-?\d+\.\d{6}  [12]  [12]", x) for x in rows)
    assert "load_winogrande_from_csv: no _ in <sentence>" in r.stderr
    r = llama("perplexity", "-m", model, "--multiple-choice", "-np", "5", "-bf", str(fix / "mc.bin"), "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["mode"] == "multiple-choice" and j["n_tasks"] == 8 and len(j["tasks"]) == 8
    assert [len(t["scores"]) for t in j["tasks"]] == [2 + i % 4 for i in range(8)]
    _error(llama("perplexity", "-m", model, "--multiple-choice", "-bf", str(fix / "mc.bin")), 1, "requires a higher -np")
    _error(llama("perplexity", "-m", model, "--hellaswag", "--winogrande", "-f", str(TEXT)), 1, "choose one of")
    seven = tmp_path / "seven.txt"  # 7 lines: not whole HellaSwag tasks (6 lines each)
    seven.write_text("".join(f"line {i}\n" for i in range(7)))
    _error(llama("perplexity", "-m", model, "--hellaswag", "-f", str(seven)), 1, "not a multiple of 6")
