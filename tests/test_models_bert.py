"""The encoder architectures (bert, nomic-bert) and rank pooling against llama.cpp's outputs
on the same tiny files (tests/fixtures/encoders, made by scripts/oracle_encoders.py with
llama-cpp-python 0.3.36), plus the engine's handling of encoders (whole prompts, no text)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.state.batch import Batch
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.errors import InvalidRequest
from llamacli.core.model.load import load_model
from llamacli.core.model.kernels.pooling import pool
from llamacli.core.text.rerank import rerank_tokens
from llamacli.core.runtime.scheduler import SlotState, schedule
from llamacli.core.runtime.tasks import Task
from llamacli.core.text.tokenizer import load_tokenizer
from tests.tiny_encoders import ENCODERS, RERANK_DOCS, RERANK_QUERY, encoder_texts, write_tiny_encoder

FIXTURES = Path(__file__).parent / "fixtures" / "encoders"
POOLING = {"bert": "mean", "bert-q8": "cls", "bert-rerank": "rank", "nomic-bert": "mean"}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("enc")
    return {n: write_tiny_encoder(n, d / f"{n}.gguf") for n in ENCODERS}


def test_writer_is_deterministic(tmp_path: Path, encoders: dict[str, Path]) -> None:
    for name, path in encoders.items():
        again = write_tiny_encoder(name, tmp_path / f"{name}.gguf")
        assert again.read_bytes() == path.read_bytes()
        z = np.load(FIXTURES / f"{name}.npz")
        assert str(z["sha256"]) == hashlib.sha256(path.read_bytes()).hexdigest(), "fixture made from another file"


@pytest.mark.parametrize("name", ENCODERS)
@pytest.mark.parametrize("numerics", ["ggml", "f32"])
def test_embeddings_match_llama_cpp(encoders: dict[str, Path], name: str, numerics: str) -> None:
    z = np.load(FIXTURES / f"{name}.npz")
    model, g, _ = load_model(encoders[name], numerics=numerics)
    tok = load_tokenizer(g.metadata)
    for i, text in enumerate(encoder_texts()):
        toks = tok.tokenize(text, True, False)
        assert toks == z[f"text{i}_tokens"].tolist()
        hidden = model.forward_hidden(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
        ref_h = z[f"text{i}_hidden"]
        assert hidden.shape == ref_h.shape
        for row, ref_row in zip(hidden, ref_h):
            assert cosine(row, ref_row) >= 0.9999
        pooled = pool(hidden, np.zeros(len(toks), dtype=np.int64), POOLING[name])
        if name == "bert-rerank":
            pooled = model.classify(pooled)
        ref_p = z[f"text{i}_pooled"]
        if ref_p.size > 1:
            assert cosine(pooled[0], ref_p) >= 0.9999
        if numerics == "ggml":  # llama.cpp's roundings too (f32 numerics skip the activation quantization)
            assert np.abs(pooled[0] - ref_p).max() < 1e-3


def test_rerank_prompts_and_scores_match_llama_cpp(encoders: dict[str, Path]) -> None:
    z = np.load(FIXTURES / "bert-rerank.npz")
    model, g, _ = load_model(encoders["bert-rerank"])
    tok = load_tokenizer(g.metadata)
    engine = Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=4, n_batch=64)).start()
    try:
        prompts = [rerank_tokens(tok, RERANK_QUERY, d) for d in RERANK_DOCS]
        for j, p in enumerate(prompts):
            assert p == z[f"rerank_tokens{j}"].tolist()  # [CLS] query [SEP] doc, as llama-server
        # all four in flight at once: they share batches (each sequence still sees only itself)
        tasks = [engine.submit(Task(p, kind="embedding", pooling="rank")) for p in prompts]
        scores = []
        for t in tasks:
            finals = [r for r in t.results if getattr(r, "embedding", None) is not None]
            scores.append(float(finals[-1].embedding[0]))
    finally:
        engine.stop()
    ref = z["rerank_scores"]
    np.testing.assert_allclose(scores, ref, atol=1e-3)
    assert np.argsort(scores).tolist() == np.argsort(ref).tolist()


def test_rerank_template_replaces_query_and_document(encoders: dict[str, Path]) -> None:
    """With a `tokenizer.chat_template.rerank`: the template with {query} and {document}
    filled in, tokenized without added specials, special tokens parsed (format_prompt_rerank)."""
    _, g, _ = load_model(encoders["bert-rerank"])
    tok = load_tokenizer(g.metadata)
    got = rerank_tokens(tok, "the sea", "a ship", "[CLS]query: {query}[SEP]doc: {document}")
    want = tok.tokenize("[CLS]query: the sea[SEP]doc: a ship", False, True)
    assert got == want and got[0] == tok.vocab.bos and tok.vocab.sep in got


def test_batched_sequences_equal_alone(encoders: dict[str, Path]) -> None:
    """Several sequences in one batch: each attends only to itself."""
    model, g, _ = load_model(encoders["bert"])
    tok = load_tokenizer(g.metadata)
    seqs = [tok.tokenize(t, True, False) for t in encoder_texts()]
    alone = [model.forward_hidden(Batch.single(s, all_logits=True), model.new_cache(1, 64)) for s in seqs]
    toks = np.concatenate([np.array(s) for s in seqs])
    ids = np.concatenate([np.full(len(s), i) for i, s in enumerate(seqs)])
    pos = np.concatenate([np.arange(len(s)) for s in seqs])
    together = model.forward_hidden(Batch(toks, ids, pos, np.ones(len(toks), bool)), model.new_cache(4, 64))
    np.testing.assert_array_equal(np.concatenate(alone), together)


def test_engine_refuses_what_an_encoder_cannot_do(encoders: dict[str, Path]) -> None:
    model, g, _ = load_model(encoders["bert"])
    engine = Engine(model, load_tokenizer(g.metadata), EngineConfig(n_ctx=256, n_parallel=1, n_batch=32))
    with pytest.raises(InvalidRequest, match="too large to process"):
        engine.submit(Task([2] * 33, kind="embedding"))
    with pytest.raises(InvalidRequest, match="encoder"):
        engine.submit(Task([2, 10, 3]))
    with pytest.raises(InvalidRequest, match="classification head"):
        engine.submit(Task([2, 10, 3], kind="embedding", pooling="rank"))
    big = Engine(model, load_tokenizer(g.metadata), EngineConfig(n_ctx=256, n_parallel=1, n_batch=128))
    with pytest.raises(InvalidRequest, match="64 positions"):
        big.submit(Task([2] * 65, kind="embedding"))


def test_schedule_never_splits_whole_prompts() -> None:
    slots = [SlotState(0, False, 30, order=1, whole=True), SlotState(1, False, 20, order=2, whole=True),
             SlotState(2, False, 5, order=3, whole=True)]
    chunks = schedule(slots, 40)
    assert [(c.slot_id, c.n_tokens) for c in chunks] == [(0, 30)]  # slot 1 does not fit: it and later ones wait
    chunks = schedule(slots[1:], 40)
    assert [(c.slot_id, c.n_tokens) for c in chunks] == [(1, 20), (2, 5)]
    # a decoder's prompt still fills what is left
    chunks = schedule([SlotState(0, False, 30, order=1, whole=True), SlotState(1, False, 100, order=2)], 40)
    assert [(c.slot_id, c.n_tokens) for c in chunks] == [(0, 30), (1, 10)]


@pytest.mark.parametrize("name", ENCODERS)
def test_encoders_have_no_one_token_step_to_compile(encoders: dict[str, Path], name: str) -> None:
    """The kernel warm-up asks every model for its one-token step; an encoder has none (it
    reads whole sequences), and asking must not fail (`llama serve --embeddings` loads it so)."""
    model, _, _ = load_model(str(encoders[name]), numerics="ggml")
    assert model.one_token_step_kind() is None
