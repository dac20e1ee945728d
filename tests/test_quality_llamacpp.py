"""`llama perplexity` and `llama imatrix` against llama.cpp's own tools, from the figures and files
scripts/perplexity_fixtures.py made with llama-perplexity, llama-imatrix and llama-quantize
(tests/fixtures/quality/).

How close is close enough: our ggml numerics follow llama.cpp's attention path without flash
attention, so we compare with its `-fa off` runs, and judge the distance by llama.cpp's own
noise on the same figure (docs/numerics.md): the distance between its `-fa on` and `-fa off`
runs, or, for the statistics of a KL-divergence run, the uncertainty llama.cpp prints for each.
What depends on a file alone (the base distributions' PPL read back from a base file, the
bytes of an imatrix file) must agree exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llamacli import quality_report as R
from llamacli.core.model.loaded import LoadedModel, load
from llamacli.core.quality import choices, task_files
from llamacli.core.quality import kld as K
from llamacli.core.quality.choices import ChoiceRunner, TaskScore
from llamacli.core.quality.chunks import plan_chunks
from llamacli.core.quality.imatrix import ImatrixCollector, ImatrixOutput, collect
from llamacli.core.quality.imatrix_stats import statistics
from llamacli.core.quality.kld_file import LogitsFile
from llamacli.core.quality.perplexity import PerplexityResult, kl_divergence, perplexity, perplexity_strided
from llamacli.core.quantize import QuantizeOptions, parse_file_type, quantize_model
from llamacli.core.quantize.imatrix_file import read_imatrix, write_imatrix_gguf
from tests.tiny_models import write_tiny_model

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "quality"
DATA = json.loads((FIX / "llamacpp.json").read_text())
RUNS: dict[str, Any] = DATA["runs"]
TEXT = "tests/fixtures/quality/text.txt"  # as the fixtures' imatrix files record it


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _quantized(src: Path, dst: Path, type_name: str, sha_key: str) -> Path:
    quantize_model(str(src), str(dst), QuantizeOptions(parse_file_type(type_name), allow_requantize=True))
    assert _sha(dst) == DATA["meta"][sha_key]  # the very file llama.cpp measured
    return dst


class Setup:
    """A model, its quantization and the text's tokens, with the run settings of the fixtures."""

    def __init__(self, model: LoadedModel, quant: LoadedModel, n_ctx: int, n_chunks: int) -> None:
        self.model, self.quant = model, quant
        text = (ROOT / TEXT).read_bytes()
        self.tokens = np.asarray(model.tokenizer.tokenize(text[:-1] if text.endswith(b"\n") else text), dtype=np.int64)
        self.plan = plan_chunks(int(self.tokens.shape[0]), n_ctx, 2048, 512, n_chunks)
        v = model.tokenizer.vocab
        self.bos = int(v.bos) if v.add_bos and v.bos is not None and v.bos >= 0 else None  # llama_vocab_get_add_bos

    def perplexity(self, base: Path | None = None) -> PerplexityResult:
        return perplexity(self.model.model, self.tokens, self.plan, self.bos, base_path=None if base is None else str(base))

    def imatrix(self, process_output: bool) -> ImatrixCollector:
        col = ImatrixCollector(self.plan.n_ctx, ImatrixOutput(dataset=TEXT), process_output)
        collect(self.model.model, self.tokens, self.plan, self.bos, col)
        return col


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    d = tmp_path_factory.mktemp("tiny")
    f32 = write_tiny_model("llama", "F32", d / "tiny-f32.gguf")
    assert _sha(f32) == DATA["meta"]["tiny_f32_sha256"]
    q = _quantized(f32, d / "tiny-q4_k_m.gguf", "Q4_K_M", "tiny_q4_k_m_sha256")
    return Setup(load(f32, "ggml", 2, with_template=False), load(q, "ggml", 2, with_template=False), 64, 4)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_model: str) -> Setup:
    assert _sha(Path(demo_model)) == DATA["meta"]["demo_sha256"]
    q = _quantized(Path(demo_model), tmp_path_factory.mktemp("demo") / "demo-q4_0.gguf", "Q4_0", "demo_q4_0_sha256")
    return Setup(load(demo_model, "ggml", 2, with_template=False), load(q, "ggml", 2, with_template=False), 128, 4)


def _ln_gap(a: float, b: float) -> float:
    return abs(math.log(a / b))


def _stat(run: str, name: str) -> tuple[float, float]:
    value, unc = RUNS[run]["summary"][name]
    return value, unc


def _within_uncertainty(ours: K.KldSummary, run: str) -> None:
    """Each figure of our summary within the uncertainty llama.cpp printed for it."""
    figures = {"Mean PPL(Q)": ours.ppl.value, "Mean ln(PPL(Q)/PPL(base))": ours.log_ppl_ratio.value,
               "Mean    KLD": ours.kld.value, "RMS Δp": 100 * ours.p_diff_rms.value,
               "Same top p": 100 * ours.same_top.value, "Mean    Δp": 100 * ours.p_diff.value}
    for name, v in figures.items():
        ref, unc = _stat(run, name)
        assert abs(v - ref) <= unc, (name, v, ref, unc)


# ---- the tiny model: our numerics are llama.cpp's up to the last bits -----------------------

def test_tiny_perplexity_within_llama_cpp_noise(tiny: Setup) -> None:
    res = tiny.perplexity()
    off, on = RUNS["tiny-ppl-fa-off"], RUNS["tiny-ppl-fa-on"]
    for ours, a, b in zip([*res.chunk_ppl, res.ppl], [*off["chunks"], off["ppl"]], [*on["chunks"], on["ppl"]]):
        assert _ln_gap(ours, a) <= _ln_gap(b, a), (ours, a, b)
    assert res.uncertainty == pytest.approx(off["ppl_unc"], rel=abs(on["ppl_unc"] / off["ppl_unc"] - 1))


def test_tiny_strided_perplexity_within_llama_cpp_noise(tiny: Setup) -> None:
    """--ppl-stride 32 with -c 64 -b 64: llama.cpp's windows (256 tokens once it pads its context)."""
    res = perplexity_strided(tiny.model.model, tiny.tokens, 64, 64, 512, 32, 3)
    assert res.plan.n_ctx == 256
    off, on = RUNS["tiny-ppl-stride-fa-off"]["chunks"], RUNS["tiny-ppl-stride-fa-on"]["chunks"]
    for ours, a, b in zip(res.chunk_ppl, off, on, strict=True):
        assert _ln_gap(ours, a) <= _ln_gap(b, a), (ours, a, b)


def test_we_read_llama_cpp_base_files(tiny: Setup) -> None:
    """llama.cpp's base file of the F32 model, our Q4_K_M against it: the base's PPL is the
    file's alone (equal to the digit), the rest within llama.cpp's uncertainty of its own run."""
    base = LogitsFile.open(str(FIX / "tiny-base.kld"))
    assert (base.n_ctx, base.n_chunk) == (64, 4) and base.tokens.tolist() == tiny.tokens[:256].tolist()
    s = kl_divergence(tiny.quant.model, base, 2048, 512, tiny.bos).summary
    assert s is not None
    assert round(s.ppl_base.value, 6) == _stat("tiny-kld-q-fa-off", "Mean PPL(base)")[0]
    assert round(s.ppl_base.uncertainty, 6) == _stat("tiny-kld-q-fa-off", "Mean PPL(base)")[1]
    _within_uncertainty(s, "tiny-kld-q-fa-off")


def test_llama_cpp_reads_our_base_files(tiny: Setup, tmp_path: Path) -> None:
    """Our base file has llama.cpp's layout (llama.cpp read one in the fixtures: its figures
    on it are ours within its noise); the distributions in it are llama.cpp's within noise."""
    path = tmp_path / "ours.kld"
    tiny.perplexity(path)
    ours, theirs = LogitsFile.open(str(path)), LogitsFile.open(str(FIX / "tiny-base.kld"))
    assert path.stat().st_size == (FIX / "tiny-base.kld").stat().st_size
    assert (ours.n_ctx, ours.n_vocab, ours.n_chunk) == (theirs.n_ctx, theirs.n_vocab, theirs.n_chunk)
    assert ours.tokens.tolist() == theirs.tokens.tolist()
    s = kl_divergence(tiny.quant.model, ours, 2048, 512, tiny.bos).summary
    assert s is not None
    run = "tiny-kld-q-our-base"  # llama.cpp's Q4_K_M against the base file we wrote then
    noise = _ln_gap(_stat("tiny-kld-q-fa-on", "Mean PPL(base)")[0], _stat("tiny-kld-q-fa-off", "Mean PPL(base)")[0])
    assert _ln_gap(s.ppl_base.value, _stat(run, "Mean PPL(base)")[0]) <= noise
    _within_uncertainty(s, run)


def test_tiny_imatrix_as_llama_imatrix(tiny: Setup) -> None:
    """Same weights, rows and counts; the inputs of layer 0's Q, K and V (the normed embeddings:
    no matmul before them) summed to the same bits; the rest as close as the numerics
    (whose parity tests/test_parity_tiny.py checks)."""
    col = tiny.imatrix(process_output=True)
    ref = read_imatrix(str(FIX / "tiny-imatrix.gguf"))
    assert sorted(col.entries) == sorted(ref.entries) and "output.weight" in ref.entries
    assert (col.last_chunk, col.chunk_size) == (ref.chunk_count, ref.chunk_size) == (4, 64)
    for name, e in ref.entries.items():
        assert col.entries[name].counts.tolist() == e.counts.tolist() == [256]
        if name.startswith("blk.0.attn_") and name[11] in "qkv":
            np.testing.assert_array_equal(col.entries[name].sums, e.sums)
        np.testing.assert_allclose(col.entries[name].sums, e.sums, rtol=1e-3)


def test_moe_imatrix_per_expert_as_llama_imatrix(tmp_path: Path) -> None:
    """A mixture-of-experts model: llama-imatrix's statistics per expert (ggml's MUL_MAT_ID,
    every batch): the same entries, the same number of rows routed to each expert; layer 0's
    Q, K, V inputs summed to the same bits, the other dense sums as in the dense test. An
    expert's sums cover only its rows (6 to 137 here), so they are compared per matrix, as the
    relative L2 error (measured: at most 4e-4, the FFN activations' float noise)."""
    moe = write_tiny_model("qwen3moe", "F32", tmp_path / "tiny-moe-f32.gguf")
    setup = Setup(load(moe, "ggml", 2, with_template=False), load(moe, "ggml", 2, with_template=False), 64, 4)
    col = setup.imatrix(process_output=False)
    ref = read_imatrix(str(FIX / "tiny-moe-imatrix.gguf"))
    assert sorted(col.entries) == sorted(ref.entries)
    experts = [n for n in ref.entries if "_exps." in n]
    assert experts and all(ref.entries[n].n_mat == 8 for n in experts)
    for name, e in ref.entries.items():
        got = col.entries[name]
        assert got.counts.tolist() == e.counts.tolist(), name
        if name.startswith("blk.0.attn_") and name[11] in "qkv":
            np.testing.assert_array_equal(got.sums, e.sums)
        if name in experts:
            a, b = got.sums.reshape(e.n_mat, -1), e.sums.reshape(e.n_mat, -1)
            for i in range(e.n_mat):
                assert np.linalg.norm(a[i] - b[i]) <= 1e-3 * np.linalg.norm(b[i]), (name, i)
        else:
            np.testing.assert_allclose(got.sums, e.sums, rtol=1e-3, err_msg=name)


def test_imatrix_files_byte_for_byte(tmp_path: Path) -> None:
    """llama.cpp's imatrix files written again by us: the same bytes (GGUF, and the legacy .dat
    that llama-imatrix made by combining the GGUF file)."""
    ref = read_imatrix(str(FIX / "tiny-imatrix.gguf"))
    out = tmp_path / "again.gguf"
    write_imatrix_gguf(str(out), ref.entries, ref.datasets, ref.chunk_count, ref.chunk_size)
    assert out.read_bytes() == (FIX / "tiny-imatrix.gguf").read_bytes()
    col = ImatrixCollector(64, ImatrixOutput(str(tmp_path / "again.dat"), fmt="dat"))
    col.load(str(FIX / "tiny-imatrix.gguf"))
    col.save()
    assert (tmp_path / "again.dat").read_bytes() == (FIX / "tiny-imatrix.dat").read_bytes()
    dat = read_imatrix(str(FIX / "tiny-imatrix.dat"))
    assert dat.is_legacy and dat.datasets == [TEXT] and dat.chunk_count == 4


# ---- the demo model ---------------------------------------------------------------------------

def test_demo_perplexity_within_llama_cpp_noise(demo: Setup) -> None:
    """The final estimate within the uncertainty llama.cpp gives the ratio of its own two
    attention paths' perplexities (its FA-on logits against its FA-off base file)."""
    res = demo.perplexity()
    assert res.count == 4 * 63
    tol = _stat("demo-kld-self-fa-on", "Mean ln(PPL(Q)/PPL(base))")[1]
    assert _ln_gap(res.ppl, RUNS["demo-ppl-fa-off"]["ppl"]) <= tol
    assert _ln_gap(res.uncertainty or 0.0, RUNS["demo-ppl-fa-off"]["ppl_unc"]) <= tol


def test_demo_kl_divergence_of_q4_0_as_llama_cpp(demo: Setup, tmp_path: Path) -> None:
    """Our base (the demo) and our Q4_0 logits: every statistic within llama.cpp's uncertainty."""
    path = tmp_path / "demo.kld"
    demo.perplexity(path)
    res = kl_divergence(demo.quant.model, LogitsFile.open(str(path)), 2048, 512, demo.bos)
    s = res.summary
    assert s is not None and s.count == 252 and len(res.statuses) == 4
    _within_uncertainty(s, "demo-kld-q-fa-off")


def test_demo_imatrix_within_llama_cpp_noise(demo: Setup) -> None:
    """Each weight's total within llama.cpp's largest FA-on/off difference over all weights."""
    col = demo.imatrix(process_output=False)
    off, on = RUNS["demo-imatrix-fa-off"]["entries"], RUNS["demo-imatrix-fa-on"]["entries"]
    assert sorted(col.entries) == sorted(off)  # 18 layers x 7; the tied output is not collected
    noise = max(abs(on[n][0] / off[n][0] - 1) for n in off)
    for name, (total, counts) in off.items():
        e = col.entries[name]
        assert e.counts.tolist() == counts
        assert abs(float(e.sums.astype(np.float64).sum()) / total - 1) <= noise, name


# ---- the benchmarks on the demo model ---------------------------------------------------------

def _bench(demo: Setup, kind: str, n_tasks: int, n_parallel: int = 1) -> list[TaskScore]:
    """Our run of a benchmark with llama-perplexity's defaults (-c 512, -b 2048)."""
    name = {"hellaswag": "hellaswag.txt", "winogrande": "winogrande.csv", "multiple-choice": "mc.bin"}[kind]
    data = (FIX / name).read_bytes()
    if kind != "multiple-choice":
        data = data[:-1] if data.endswith(b"\n") else data  # -f drops one trailing newline
    runner = ChoiceRunner.for_benchmark(demo.model.model, kind, 512, 2048, n_parallel)

    def tok(text: str) -> list[int]:
        return demo.model.tokenizer.tokenize(text, add_special=True, parse_special=False)

    if kind == "hellaswag":
        return list(choices.hellaswag(runner, task_files.read_hellaswag(data, n_tasks), tok))
    if kind == "winogrande":
        return list(choices.winogrande(runner, task_files.read_winogrande(data, n_tasks, []), tok))
    return list(choices.multiple_choice(runner, task_files.read_multiple_choice(data, n_tasks)[0], tok))


@pytest.mark.parametrize(("kind", "run", "n_tasks", "n_par"), [
    ("hellaswag", "hellaswag", 8, 1), ("multiple-choice", "multiple-choice", 0, 5),
    ("multiple-choice", "multiple-choice-3", 3, 5)])
def test_demo_benchmark_lines_as_llama_cpp(demo: Setup, kind: str, run: str, n_tasks: int, n_par: int) -> None:
    """The same tasks picked, the same choices right: every line llama-perplexity printed (both
    of its attention paths print the same lines here)."""
    off, on = RUNS[f"demo-{run}-fa-off"], RUNS[f"demo-{run}-fa-on"]
    assert off["tasks"] == on["tasks"]
    scores = _bench(demo, kind, n_tasks, n_par)
    assert [R.task_line(kind, s).rstrip("\n").split("\t") for s in scores] == off["tasks"]
    n_answers = sum(len(s.scores) for s in scores)
    assert [ln for ln in R.bench_final(kind, scores[-1], n_answers).splitlines() if ln] == off["final"]


@pytest.mark.parametrize(("run", "n_tasks"), [("winogrande", 0), ("winogrande-5", 5)])
def test_demo_winogrande_scores_within_llama_cpp_noise(demo: Setup, run: str, n_tasks: int) -> None:
    """The same tasks (the 5 picked at random too), each score within llama.cpp's largest
    FA-on/off difference over the run's scores."""
    off = [[float(v) for v in t[2].split()[:2]] for t in RUNS[f"demo-{run}-fa-off"]["tasks"]]
    on = [[float(v) for v in t[2].split()[:2]] for t in RUNS[f"demo-{run}-fa-on"]["tasks"]]
    noise = max(abs(a - b) for x, y in zip(off, on) for a, b in zip(x, y))
    ours = _bench(demo, "winogrande", n_tasks)
    assert len(ours) == len(off)
    for s, ref, row in zip(ours, off, RUNS[f"demo-{run}-fa-off"]["tasks"]):
        assert abs(s.scores[0] - ref[0]) <= noise and abs(s.scores[1] - ref[1]) <= noise, (s.scores, ref, noise)
        assert s.answer == int(row[2].split()[3])


def test_imatrix_statistics_as_llama_imatrix() -> None:
    """--show-statistics on llama.cpp's tiny imatrix: llama-imatrix's lines, character for character."""
    ref = read_imatrix(str(FIX / "tiny-imatrix.gguf"))
    tensors, layers = statistics(ref.entries)
    ours = [ln for ln in R.imatrix_stats_lines("tests/fixtures/quality/tiny-imatrix.gguf", tensors, layers) if ln]
    assert ours == RUNS["tiny-imatrix-statistics"]["lines"]
    # its percentages are float32 products: 4 of 640 columns print as 0.62%, not float64's 0.63%
    assert f"{R._pct32(float(np.float32(4) / np.float32(640))):.2f}" == "0.62"
