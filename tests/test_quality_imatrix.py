"""core/quality/imatrix.py and core/quantize/imatrix_file.py: what the collector sums (checked
against the layer inputs computed by hand), llama-imatrix's rules (16 rows, which weights),
and the files (GGUF read back by gguf-py, the legacy .dat, combining)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.loaded import LoadedModel, load
from llamacli.core.quality.chunks import chunk_tokens, plan_chunks
from llamacli.core.quality.imatrix import ImatrixCollector, ImatrixError, ImatrixOutput, collect
from llamacli.core.quality.imatrix_stats import split_name, statistics
from llamacli.core.quality.perplexity import perplexity
from llamacli.core.quantize.imatrix_file import ImatrixEntry, ImatrixFileError, read_imatrix, write_imatrix_gguf
from tests.tiny_models import write_tiny_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    path = write_tiny_model("llama", "Q4_K", tmp_path_factory.mktemp("im") / "l.gguf")
    return load(path, "ggml", 2, with_template=False)


@pytest.fixture(scope="module")
def tokens(tiny: LoadedModel) -> np.ndarray:
    return np.asarray(tiny.tokenizer.tokenize((ROOT / "docs" / "numerics.md").read_text()[:4000]), dtype=np.int64)


def _collector(tmp_path: Path, process_output: bool = False, **kw: object) -> ImatrixCollector:
    return ImatrixCollector(64, ImatrixOutput(str(tmp_path / "im.gguf"), **kw), process_output)  # type: ignore[arg-type]


def test_sums_are_the_squared_layer_inputs(tiny: LoadedModel, tokens: np.ndarray, tmp_path: Path) -> None:
    plan = plan_chunks(int(tokens.shape[0]), 64, 2048, 512, 3)
    col = _collector(tmp_path)
    bos = int(tiny.tokenizer.vocab.bos)
    res = collect(tiny.model, tokens, plan, bos, col)
    assert tiny.model.precision.observer is None  # set only during the pass
    lw, a = tiny.model.layers[0], tiny.model.args
    rows = np.concatenate([chunk_tokens(tokens, plan, c, bos) for c in range(3)])
    h = K.rms_norm(tiny.model.embed(rows), lw.attn_norm, a.norm_eps)  # the input of Q, K and V in layer 0
    for w in ("attn_q", "attn_k", "attn_v"):
        e = col.entries[f"blk.0.{w}.weight"]
        assert e.counts.tolist() == [3 * 64]
        np.testing.assert_allclose(e.sums, (h.astype(np.float64) ** 2).sum(0), rtol=1e-5)
    names = {f"blk.{i}.{w}.weight" for i in range(a.n_layer)
             for w in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")}
    assert set(col.entries) == names  # no output.weight without --process-output
    assert col.entries["blk.1.ffn_down.weight"].sums.shape == (a.n_ff,)
    # the perplexity along the way is perplexity's
    assert res.ppl == pytest.approx(perplexity(tiny.model, tokens, plan, bos).ppl, rel=1e-12)


def test_process_output_and_the_16_row_rule(tiny: LoadedModel, tmp_path: Path) -> None:
    col = _collector(tmp_path, process_output=True)
    x = np.ones((15, 256), dtype=np.float32)
    col.observe("blk.0.attn_q.weight", x)  # fewer than 16 rows: ignored, as llama.cpp
    col.observe("token_embd.weight", np.ones((16, 256), dtype=np.float32))  # a tied output: never collected
    assert col.entries == {}
    col.observe("output.weight", np.full((16, 256), 2, dtype=np.float32))
    assert col.entries["output.weight"].sums[0] == 64.0 and col.entries["output.weight"].counts.tolist() == [16]
    assert not _collector(tmp_path).wants("output.weight")
    with pytest.raises(ImatrixError, match="inconsistent size for output.weight"):
        col.observe("output.weight", np.ones((16, 128), dtype=np.float32))
    with pytest.raises(ImatrixError, match="non-finite values detected in blk.1.x"):
        col.observe("blk.1.x", np.full((16, 4), np.inf, dtype=np.float32))


def test_process_output_collects_every_position(tiny: LoadedModel, tokens: np.ndarray, tmp_path: Path) -> None:
    """llama-imatrix asks for every logit: the output weight sees all rows, in the untied llama."""
    plan = plan_chunks(int(tokens.shape[0]), 64, 2048, 512, 2)
    col = _collector(tmp_path, process_output=True)
    collect(tiny.model, tokens, plan, None, col, compute_ppl=False)
    assert col.entries["output.weight"].counts.tolist() == [128]


def test_sums_add_one_row_after_another_in_float32(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((40, 8)) * rng.uniform(0.01, 100, (40, 1))).astype(np.float32)
    col = _collector(tmp_path)
    col.observe("blk.0.w", x[:20])
    col.observe("blk.0.w", x[20:])
    acc = np.zeros(8, dtype=np.float32)
    for r in x:
        acc += r * r
    np.testing.assert_array_equal(col.entries["blk.0.w"].sums, acc)


def test_saves_every_out_freq_chunks_and_keeps_copies(tmp_path: Path) -> None:
    col = _collector(tmp_path, out_freq=2, save_freq=3)
    for _ in range(6):
        col.observe("blk.0.w", np.ones((64, 4), dtype=np.float32))
    assert col.last_chunk == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["im.gguf", "im.gguf.at_3", "im.gguf.at_6"]
    assert read_imatrix(str(tmp_path / "im.gguf")).chunk_count == 6
    assert read_imatrix(str(tmp_path / "im.gguf.at_3")).entries["blk.0.w"].counts.tolist() == [192]


def test_gguf_file_as_gguf_py_reads_it(tmp_path: Path) -> None:
    entries = {"blk.1.b.weight": ImatrixEntry(np.arange(4, dtype=np.float32), np.array([7])),
               "blk.0.a.weight": ImatrixEntry(np.arange(6, dtype=np.float32) / 3, np.array([5, 9]))}
    path = tmp_path / "x.gguf"
    write_imatrix_gguf(str(path), entries, ["a.txt", "b.txt"], 3, 512)
    r = gguf.GGUFReader(str(path))
    assert r.fields["general.type"].contents() == "imatrix"
    assert r.fields["imatrix.datasets"].contents() == ["a.txt", "b.txt"]
    assert r.fields["imatrix.chunk_count"].contents() == 3 and r.fields["imatrix.chunk_size"].contents() == 512
    t = {x.name: x for x in r.tensors}
    assert [x.name for x in r.tensors] == ["blk.0.a.weight.in_sum2", "blk.0.a.weight.counts",
                                          "blk.1.b.weight.in_sum2", "blk.1.b.weight.counts"]
    assert t["blk.0.a.weight.in_sum2"].shape.tolist() == [3, 2] and t["blk.0.a.weight.counts"].shape.tolist() == [1, 2]
    assert t["blk.1.b.weight.in_sum2"].shape.tolist() == [4] and t["blk.1.b.weight.counts"].shape.tolist() == [1]
    np.testing.assert_array_equal(np.asarray(t["blk.0.a.weight.counts"].data).ravel(), [5, 9])
    back = read_imatrix(str(path))
    assert back.datasets == ["a.txt", "b.txt"] and back.chunk_size == 512 and not back.is_legacy
    np.testing.assert_array_equal(back.entries["blk.0.a.weight"].sums, entries["blk.0.a.weight"].sums)
    assert back.entries["blk.0.a.weight"].counts.tolist() == [5, 9]


def test_legacy_dat_round_trip_and_combining(tmp_path: Path) -> None:
    col = _collector(tmp_path, fmt="dat")
    col.output.path = str(tmp_path / "im.dat")
    col.output.dataset = "text.txt"
    for _ in range(3):
        col.observe("blk.0.w", np.full((64, 4), 2, dtype=np.float32))  # 3 chunks of 64: sums 768, count 192
    col.save()
    d = read_imatrix(str(tmp_path / "im.dat"))
    assert d.is_legacy and d.datasets == ["text.txt"] and d.chunk_count == 3
    # values = sum / count * ncall (ncall = 192 / 64 = 3): 4 * 3
    assert d.entries["blk.0.w"].sums.tolist() == [12.0] * 4 and d.entries["blk.0.w"].counts.tolist() == [3]
    both = _collector(tmp_path)
    both.load(str(tmp_path / "im.dat"))  # a legacy file's averages become sums again: * chunk size
    assert both.entries["blk.0.w"].sums.tolist() == [768.0] * 4 and both.entries["blk.0.w"].counts.tolist() == [192]
    col.output.fmt, col.output.path = "gguf", str(tmp_path / "g.gguf")
    col.save()
    both.load(str(tmp_path / "g.gguf"))
    assert both.entries["blk.0.w"].sums.tolist() == [1536.0] * 4 and both.last_chunk == 6
    assert both.datasets == ["text.txt", "text.txt"]


def test_bad_files(tmp_path: Path) -> None:
    empty = tmp_path / "e.dat"
    empty.write_bytes(b"\0\0\0\0")
    with pytest.raises(ImatrixFileError, match="no data in file"):
        read_imatrix(str(empty))
    with pytest.raises(ImatrixFileError, match="failed to open"):
        read_imatrix(str(tmp_path / "missing"))
    cut = tmp_path / "c.dat"
    cut.write_bytes(np.array([1, 3], "<i4").tobytes() + b"abc" + np.array([1, 4], "<i4").tobytes() + b"\0" * 8)
    with pytest.raises(ImatrixFileError, match="failed reading data for entry 0"):
        read_imatrix(str(cut))


def test_statistics_of_a_small_matrix() -> None:
    entries = {"blk.0.attn_q.weight": ImatrixEntry(np.array([4, 0, 2, 2], dtype=np.float32), np.array([2])),
               "blk.1.attn_q.weight": ImatrixEntry(np.array([4, 0, 2, 2], dtype=np.float32), np.array([2])),
               "output.weight": ImatrixEntry(np.array([1, 1], dtype=np.float32), np.array([1]))}
    tensors, layers = statistics(entries)
    assert [t.tensor for t in tensors] == ["blk.0.attn_q.weight", "blk.1.attn_q.weight", "output.weight"]
    q = tensors[0]  # activations 2, 0, 1, 1
    assert (q.total, q.minimum, q.maximum, q.mean, q.elements) == (4.0, 0.0, 2.0, 1.0, 4)
    assert q.active == 0.75 and q.stddev == pytest.approx(np.std([2, 0, 1, 1]))
    assert q.entropy == pytest.approx(-(0.5 * np.log2(0.5) + 2 * 0.25 * np.log2(0.25)))
    assert q.zd == 0.25 and tensors[1].cossim == pytest.approx(1.0) and q.cossim == 0.0
    assert [(ly.layer, ly.bias) for ly in layers] == [(0, 4.0), (1, 4.0)]
    assert split_name("blk.12.ffn_down.weight") == ("12", "ffn_down") and split_name("foo") == ("-", "foo")


def test_f32_numerics_are_observed_alike(tiny: LoadedModel, tokens: np.ndarray, tmp_path: Path) -> None:
    """The observer sits on both numerics modes' matmuls: the same weights and counts; the
    inputs of layer 0's Q, K, V (before any matmul, so alike in both modes) summed alike."""
    plan = plan_chunks(int(tokens.shape[0]), 64, 2048, 512, 2)
    a, b = _collector(tmp_path), _collector(tmp_path)
    collect(tiny.model, tokens, plan, None, a, compute_ppl=False)
    f32 = load(tiny.gguf.path, "f32", 2, with_template=False)
    collect(f32.model, tokens, plan, None, b, compute_ppl=False)
    assert sorted(a.entries) == sorted(b.entries)
    for name, e in a.entries.items():
        assert b.entries[name].counts.tolist() == e.counts.tolist() == [128]
    np.testing.assert_allclose(b.entries["blk.0.attn_q.weight"].sums, a.entries["blk.0.attn_q.weight"].sums, rtol=1e-6)
