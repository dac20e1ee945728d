"""Embedding models and reranking over HTTP: a real `llama serve` on the tiny encoders
(tests/tiny_encoders.py); scores and vectors against llama.cpp's (tests/fixtures/encoders)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openai
import pytest

from llamacli.core.model.kernels.pooling import normalize
from tests.http_server import LlamaServer
from tests.tiny_encoders import RERANK_DOCS, RERANK_QUERY, encoder_texts, write_tiny_encoder

FIXTURES = Path(__file__).parent / "fixtures" / "encoders"
ENDPOINTS = ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking")


def test_rerank_endpoints(tmp_path: Path) -> None:
    path = write_tiny_encoder("bert-rerank", tmp_path / "r.gguf")
    ref = np.load(FIXTURES / "bert-rerank.npz")["rerank_scores"]
    best_first = np.argsort(-ref, kind="stable").tolist()
    with LlamaServer("-m", str(path), "--rerank", "-np", "2", "-c", "256", "-a", "tiny-rerank") as srv:
        for ep in ENDPOINTS:
            status, body = srv.post(ep, {"query": RERANK_QUERY, "documents": RERANK_DOCS})
            assert status == 200, body
            assert body["object"] == "list" and body["model"] == "tiny-rerank"
            assert [r["index"] for r in body["results"]] == best_first
            got = {r["index"]: r["relevance_score"] for r in body["results"]}
            np.testing.assert_allclose([got[i] for i in range(len(RERANK_DOCS))], ref, atol=1e-3)
            assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 4 * 8

        status, body = srv.post("/v1/rerank", {"query": RERANK_QUERY, "documents": RERANK_DOCS, "top_n": 2,
                                               "model": "other", "return_text": True})
        assert status == 200 and [r["index"] for r in body["results"]] == best_first[:2]
        assert body["model"] == "other" and "text" not in body["results"][0]  # return_text: TEI only

        # TEI's shape: "texts" in, a bare array of {index, score, text} out
        status, body = srv.post("/rerank", {"query": RERANK_QUERY, "texts": RERANK_DOCS, "return_text": True})
        assert status == 200 and isinstance(body, list)
        assert [r["index"] for r in body] == best_first
        assert [r["text"] for r in body] == [RERANK_DOCS[i] for i in best_first]
        assert set(body[0]) == {"index", "score", "text"}

        for bad, msg in (({"documents": ["a"]}, '"query" must be provided'),
                         ({"query": 1, "documents": ["a"]}, '"query" must be a string'),
                         ({"query": "q", "documents": []}, "non-empty string array"),
                         ({"query": "q", "documents": [1]}, "non-empty string array")):
            status, body = srv.post("/rerank", bad)
            assert status == 400 and msg in body["error"]["message"]
        status, body = srv.post("/completion", {"prompt": "hello", "n_predict": 2})
        assert status == 400 and "encoder" in body["error"]["message"]


def test_rerank_needs_the_flag_and_a_head(tmp_path: Path) -> None:
    rr = write_tiny_encoder("bert-rerank", tmp_path / "r.gguf")
    plain = write_tiny_encoder("bert", tmp_path / "b.gguf")
    with LlamaServer("-m", str(rr), "--embedding", "--pooling", "mean", "-np", "1") as srv:
        status, body = srv.post("/rerank", {"query": "q", "documents": ["d"]})
        assert status == 501 and "--reranking" in body["error"]["message"]
    with LlamaServer("-m", str(plain), "--reranking", "-np", "1") as srv:
        status, body = srv.post("/v1/rerank", {"query": "q", "documents": ["d"]})
        assert status == 400 and "classification head" in body["error"]["message"]


def test_embedding_model_over_openai_client(tmp_path: Path) -> None:
    z = np.load(FIXTURES / "bert.npz")
    path = write_tiny_encoder("bert", tmp_path / "b.gguf")
    texts = encoder_texts()
    with LlamaServer("-m", str(path), "--embedding", "-np", "2", "-c", "256") as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
        res = client.embeddings.create(model="any", input=texts)
        for i, d in enumerate(res.data):
            want = normalize(z[f"text{i}_pooled"][None])[0]  # mean pooling (the GGUF's), L2-normalized
            got = np.array(d.embedding)
            assert got @ want / np.linalg.norm(got) / np.linalg.norm(want) >= 0.9999
        assert res.usage.prompt_tokens == sum(len(z[f"text{i}_tokens"]) for i in range(len(texts)))
        # pooling none through /embedding: one vector per token, as llama.cpp's hidden states
    with LlamaServer("-m", str(path), "--embedding", "--pooling", "none", "-np", "1", "-c", "512") as srv:
        status, body = srv.post("/embedding", {"content": texts[0]})
        assert status == 200
        rows = np.array(body[0]["embedding"])
        ref = z["text0_hidden"]
        assert rows.shape == ref.shape
        cos = (rows * ref).sum(1) / np.linalg.norm(rows, axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.min() >= 0.9999
        status, body = srv.post("/embedding", {"content": "word " * 70})
        assert status == 400 and "64 positions" in body["error"]["message"]


@pytest.mark.parametrize("name", ["nomic-bert"])
def test_nomic_bert_serves_embeddings(tmp_path: Path, name: str) -> None:
    z = np.load(FIXTURES / f"{name}.npz")
    path = write_tiny_encoder(name, tmp_path / "n.gguf")
    with LlamaServer("-m", str(path), "--embedding", "-np", "1") as srv:
        status, body = srv.post("/v1/embeddings", {"input": encoder_texts()[2]})
        assert status == 200
        got = np.array(body["data"][0]["embedding"])
        want = normalize(z["text2_pooled"][None])[0]
        assert got @ want / np.linalg.norm(got) >= 0.9999
