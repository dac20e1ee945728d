"""Reranking: POST /rerank, /reranking, /v1/rerank, /v1/reranking (llama-server's handler
post_rerank and format_response_rerank).

Jina's shape: {"query", "documents", "top_n"} -> {"model", "object": "list", "usage",
"results": [{"index", "relevance_score"}]}, best first. TEI's shape (the body has "texts"):
{"query", "texts", "return_text"} -> [{"index", "score"[, "text"]}]. The server must run with
`--rerank` (rank pooling) and the model must have a classification head.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response

from llamacli.core.text.rerank import rerank_tokens
from llamacli.core.runtime.tasks import Task
from llamacli.http import request_models as rm
from llamacli.http.context import current_state, request_json
from llamacli.http.limits import check_text
from llamacli.http.errors import bad_request, not_supported
from llamacli.http.sse import json_response

bp = Blueprint("rerank", __name__)


def rerank_results(
    scores: list[float], n_tokens: list[int], docs: list[str], top_n: int, tei: bool, return_text: bool
) -> tuple[list[dict[str, Any]], int]:
    """(results sorted by score, best first, cut to top_n; prompt tokens evaluated)."""
    label = "score" if tei else "relevance_score"
    out: list[dict[str, Any]] = []
    for i, s in enumerate(scores):
        elem: dict[str, Any] = {"index": i, label: s}
        if tei and return_text:
            elem["text"] = docs[i]
        out.append(elem)
    out.sort(key=lambda e: -e[label])  # stable: equal scores keep document order
    return out[: max(0, top_n)], sum(n_tokens)


@bp.post("/rerank")
@bp.post("/reranking")
@bp.post("/v1/rerank")
@bp.post("/v1/reranking")
async def rerank() -> Response:
    st = current_state()
    engine, model = st.require()
    if not st.config.embeddings or (st.config.pooling or model.pooling) != "rank":
        raise not_supported("This server does not support reranking. Start it with `--reranking`")
    if not model.n_cls_out:
        raise bad_request(f"this model ({model.file_name}) cannot rerank: it has no classification head (cls, cls.output)")
    body = rm.RERANK.parse(await request_json())
    if "query" not in body:
        raise bad_request('"query" must be provided')
    if not isinstance(body.raw("query"), str):
        raise bad_request('"query" must be a string')
    query: str = body.raw("query")
    tei = "texts" in body.data
    key = "documents" if "documents" in body else "texts"
    docs = body.raw(key, [])
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise bad_request('"documents" must be a non-empty string array')
    top_n = body.int("top_n", len(docs))
    return_text = body.bool("return_text", False)
    template = model.rerank_template
    check_text(len(query) * len(docs) + sum(len(d) for d in docs), st.text_limit(), "query and documents")
    token_lists = await st.blocking(lambda: [rerank_tokens(model.tokenizer, query, d, template) for d in docs])
    tasks = await st.submit([Task(toks, kind="embedding", pooling="rank") for toks in token_lists])
    finals = [f for _, f in await st.collect(tasks)]
    scores = [float(f.embedding[0]) for f in finals]
    results, n = rerank_results(scores, [len(t) for t in token_lists], docs, top_n, tei, return_text)
    if tei:
        return json_response(results)
    return json_response({
        "model": body.raw("model", st.model_id) if isinstance(body.raw("model"), str) else st.model_id,
        "object": "list",
        "usage": {"prompt_tokens": n, "total_tokens": n},
        "results": results,
    })
