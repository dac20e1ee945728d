"""core/quality: chunking, the perplexity, strided and KL-divergence passes and the base file,
on a tiny model, against the same quantities computed the plain way (one chunk at a time,
every logit, float64 log-softmax)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.loaded import LoadedModel, load
from llamacli.core.model.state.batch import Batch
from llamacli.core.quality.chunks import ChunkPlan, ChunkRunner, chunk_tokens, logit_blocks, plan_chunks
from llamacli.core.quality.kld_file import MAGIC, BaseFileError, LogitsFile, scored_per_chunk
from llamacli.core.quality.logprobs import row_width
from llamacli.core.quality.perplexity import (
    Progress,
    kl_divergence,
    perplexity,
    perplexity_strided,
    strided_context,
)
from tests.tiny_models import write_tiny_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    path = write_tiny_model("gemma3", "Q8_0", tmp_path_factory.mktemp("ppl") / "g.gguf")
    return load(path, "ggml", 2, with_template=False)


@pytest.fixture(scope="module")
def tokens(tiny: LoadedModel) -> np.ndarray:
    text = (ROOT / "docs" / "numerics.md").read_text()[:6000]
    return np.asarray(tiny.tokenizer.tokenize(text), dtype=np.int64)


def _bos(m: LoadedModel) -> int:
    assert m.tokenizer.vocab.add_bos
    return int(m.tokenizer.vocab.bos)


def _chunk_nll(m: LoadedModel, seq: np.ndarray, lo: int, hi: int, targets: np.ndarray) -> np.ndarray:
    """-log p(targets) at positions [lo, hi) of one sequence run alone, float64."""
    cache = m.model.new_cache(1, len(seq))
    lg = m.model.forward(Batch.single(seq, all_logits=True), cache)[lo:hi].astype(np.float64)
    lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
    return lse - lg[np.arange(hi - lo), targets]


def _reference_ppl(m: LoadedModel, tokens: np.ndarray, n_ctx: int, n_chunk: int) -> tuple[float, float]:
    nll = []
    for c in range(n_chunk):
        seq = tokens[c * n_ctx : (c + 1) * n_ctx].copy()
        seq[0] = _bos(m)
        first = n_ctx // 2
        nll.append(_chunk_nll(m, seq, first, n_ctx - 1, tokens[c * n_ctx + first + 1 : (c + 1) * n_ctx]))
    v = np.concatenate(nll)
    ppl = math.exp(v.mean())
    return ppl, ppl * math.sqrt((np.mean(v * v) - v.mean() ** 2) / (v.size - 1))


def test_plan_follows_llama_perplexity() -> None:
    p = plan_chunks(5000, 512, 2048, 512, -1)
    assert (p.n_seq, p.n_batch, p.n_ubatch, p.n_chunk, p.first) == (4, 2048, 512, 9, 256)
    p = plan_chunks(5000, 512, 768, 512, 3)  # one chunk per batch: the batch is clamped to it
    assert (p.n_seq, p.n_batch, p.n_chunk) == (1, 512, 3)
    p = plan_chunks(5000, 512, 128, 512, -1)  # several batches per chunk, forward passes no larger
    assert (p.n_seq, p.n_batch, p.n_ubatch, p.n_batches()) == (1, 128, 128, 4)
    with pytest.raises(InvalidRequest, match="you need at least 1024 tokens .* only 1000 tokens"):
        plan_chunks(1000, 512, 2048, 512, -1)
    with pytest.raises(InvalidRequest, match="--chunks 0"):
        plan_chunks(5000, 512, 2048, 512, 0)


def test_chunk_tokens_put_bos_first_and_keep_the_text() -> None:
    toks = np.arange(100, 140)
    p = ChunkPlan.of(10, 20, 20, 4)
    assert chunk_tokens(toks, p, 2, 1).tolist() == [1, *range(121, 130)]
    assert chunk_tokens(toks, p, 2, None).tolist() == list(range(120, 130))
    assert toks[20] == 120


def test_logit_blocks_keep_16_rows_when_there_are_16() -> None:
    for n in (1, 15, 16, 17, 33, 100, 512, 1000):
        blocks = logit_blocks(n, 262144)
        sizes = [b.stop - b.start for b in blocks]
        assert sum(sizes) == n and blocks[0].start == 0 and blocks[-1].stop == n
        assert min(sizes) >= 16 or n < 16
        assert max(sizes) <= 64


@pytest.mark.parametrize("n_batch", [16, 64, 256])
def test_runner_rows_do_not_depend_on_the_batching(tiny: LoadedModel, tokens: np.ndarray, n_batch: int) -> None:
    """One sequence's hidden states are the same bits alone, in several batches, or beside others."""
    plan = ChunkPlan.of(32, n_batch, 512, 6)
    runner = ChunkRunner(tiny.model, plan, 0, 32)
    got: dict[int, list[np.ndarray]] = {}
    for c0 in range(0, 6, plan.n_seq):
        for piece in runner.run(tokens, c0, 7):
            got.setdefault(piece.chunk, []).append(piece.hidden)
    for c in range(6):
        seq = chunk_tokens(tokens, plan, c, 7)
        alone = tiny.model.forward(Batch.single(seq, all_logits=True), tiny.model.new_cache(1, 32), return_hidden=True)
        np.testing.assert_array_equal(np.concatenate(got[c]), alone)


def test_perplexity_equals_the_plain_computation(tiny: LoadedModel, tokens: np.ndarray) -> None:
    plan = plan_chunks(int(tokens.shape[0]), 64, 2048, 512, 5)
    seen: list[tuple[int, float]] = []
    res = perplexity(tiny.model, tokens, plan, _bos(tiny), Progress(on_chunk=lambda i, r: seen.append((i, r.ppl))))
    ppl, unc = _reference_ppl(tiny, tokens, 64, 5)
    assert res.count == 5 * 31
    assert res.ppl == pytest.approx(ppl, rel=1e-6) and res.uncertainty == pytest.approx(unc, rel=1e-5)
    assert [i for i, _ in seen] == [1, 2, 3, 4, 5] and seen[-1][1] == res.ppl == res.chunk_ppl[-1]
    assert seen[0][1] == pytest.approx(_reference_ppl(tiny, tokens, 64, 1)[0], rel=1e-6)


def test_base_file_layout_and_self_divergence(tiny: LoadedModel, tokens: np.ndarray, tmp_path: Path) -> None:
    plan = plan_chunks(int(tokens.shape[0]), 64, 128, 512, 3)  # 2 chunks per group, then 1
    path = tmp_path / "base.kld"
    res = perplexity(tiny.model, tokens, plan, _bos(tiny), base_path=str(path))
    n_vocab = tiny.model.args.n_vocab
    raw = path.read_bytes()
    assert raw[:8] == MAGIC
    assert np.frombuffer(raw, "<i4", 3, 8).tolist() == [64, n_vocab, 3]
    assert np.frombuffer(raw, "<i4", 3 * 64, 20).tolist() == tokens[: 3 * 64].tolist()  # no BOS in the file
    assert len(raw) == 20 + 4 * 3 * 64 + 2 * 3 * scored_per_chunk(64) * row_width(n_vocab)
    assert res.ppl == pytest.approx(_reference_ppl(tiny, tokens, 64, 3)[0], rel=1e-5)
    base = LogitsFile.open(str(path))
    kres = kl_divergence(tiny.model, base, 2048, 512, _bos(tiny))
    st = kres.statuses[-1]
    assert len(kres.statuses) == 3 and st.chunk == 3
    assert st.same_top.value == 1.0 and abs(st.kld.value) < 1e-4
    assert st.ppl.value == pytest.approx(res.ppl, rel=1e-5)
    assert kres.sums.count == 93 and kres.summary is None  # fewer than 100 positions: no summary


def test_base_file_errors(tmp_path: Path, tiny: LoadedModel) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"not a logits file at all")
    with pytest.raises(BaseFileError, match="does not look like a file containing log-probabilities"):
        LogitsFile.open(str(bad))
    short = tmp_path / "short"
    short.write_bytes(MAGIC + np.array([64, 353, 2], "<i4").tobytes() + np.zeros(128, "<i4").tobytes() + b"\0" * 100)
    with pytest.raises(BaseFileError, match="truncated: it holds the log-probabilities of 0 of its 2 chunks"):
        LogitsFile.open(str(short))
    other = tmp_path / "other"
    rows = np.zeros(2 * scored_per_chunk(64) * row_width(50), "<u2")
    other.write_bytes(MAGIC + np.array([64, 50, 2], "<i4").tobytes() + np.zeros(128, "<i4").tobytes() + rows.tobytes())
    with pytest.raises(InvalidRequest, match=r"inconsistent vocabulary \(50 vs 353"):
        kl_divergence(tiny.model, LogitsFile.open(str(other)), 2048, 512, None)


def test_strided_windows_as_llama_cpp(tiny: LoadedModel, tokens: np.ndarray) -> None:
    # llama.cpp's window: n_seq * n_ctx + stride/2, padded to 256 per sequence
    assert strided_context(512, 2048, 256) == 3072  # 2176 -> 2304 -> 576 per sequence -> 768 each
    assert strided_context(512, 512, 256) == 768
    assert strided_context(128, 2048, 64) == 4096
    assert strided_context(64, 64, 32) == 256
    window = strided_context(64, 64, 32)
    res = perplexity_strided(tiny.model, tokens, 64, 64, 512, 32, 2)
    assert res.plan.n_ctx == window and res.count == 2 * 32
    nll = []
    for i in range(2):
        seq = tokens[i * 32 : i * 32 + window]  # no BOS: llama.cpp puts it in after the decode
        nll.append(_chunk_nll(tiny, seq, window - 33, window - 1, seq[window - 32 :]))
    assert res.ppl == pytest.approx(math.exp(np.concatenate(nll).mean()), rel=1e-5)
    with pytest.raises(InvalidRequest, match="stride is 0"):
        perplexity_strided(tiny.model, tokens, 64, 64, 512, 0, 2)
