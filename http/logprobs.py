"""Token probabilities as the APIs report them: llama-server's `completion_probabilities`,
OpenAI chat's `logprobs.content` and the legacy completions `logprobs`. Pure functions over
the engine's Partials (each generated token, its probability and its top candidates)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from llamacli.core.runtime.tasks import Final, Partial

NEG_INF_LOGPROB = -9999.0  # what OpenAI reports for a token of probability 0


def piece(tokenizer: Any, token: int) -> tuple[str, list[int]]:
    """A token's text (U+FFFD for an incomplete UTF-8 sequence) and its bytes; a control
    token's (an end-of-generation token's) is empty, as llama-server renders it (special off)."""
    b = tokenizer.token_to_piece(int(token), False)
    return b.decode("utf-8", "replace"), list(b)


def token_json(tokenizer: Any, token: int) -> dict[str, Any]:
    text, b = piece(tokenizer, token)
    return {"id": int(token), "token": text, "bytes": b}


def _pairs(items: Iterable[Any]) -> list[tuple[int, float]]:
    out = []
    for it in items:
        if isinstance(it, (tuple, list)):
            out.append((int(it[0]), float(it[1])))
        else:  # TokenProb
            out.append((int(it.id), float(it.prob)))
    return out


def logprob(p: float) -> float:
    return math.log(p) if p > 0 else NEG_INF_LOGPROB


def reported(tokenizer: Any, parts: Sequence[Partial], final: Final) -> list[Partial]:
    """The Partials whose probabilities a whole (non-streamed) answer reports: after a stop
    string, llama-server drops as many entries from the end as the string has tokens
    (tokenized alone), so the tokens that spelled it carry none."""
    if final.stop_type != "word":
        return list(parts)
    n_drop = len(tokenizer.tokenize(final.stopping_word, add_special=False))
    with_probs = [i for i, p in enumerate(parts) if p.probs]  # one token per Partial
    dropped = set(with_probs[len(with_probs) - min(n_drop, len(with_probs)):])
    return [p for i, p in enumerate(parts) if i not in dropped]


def token_probs(parts: Sequence[Partial]) -> list[tuple[int, float, list[tuple[int, float]]]]:
    """(token, its probability, top candidates) per generated token that carries probs."""
    out = []
    for p in parts:
        for j, tok in enumerate(p.tokens):
            if j < len(p.probs):
                chosen = p.chosen_probs[j] if j < len(p.chosen_probs) else 0.0
                out.append((int(tok), float(chosen), _pairs(p.probs[j])))
    return out


def probs_json(tokenizer: Any, parts: Sequence[Partial], post_sampling: bool) -> list[dict[str, Any]]:
    """llama-server's completion_probabilities (logprob/top_logprobs, or prob/top_probs)."""
    key = "prob" if post_sampling else "logprob"

    def value(q: float) -> float:
        return q if post_sampling else logprob(q)

    out = []
    for tok, p, top in token_probs(parts):
        item = {**token_json(tokenizer, tok), key: value(p)}
        item["top_probs" if post_sampling else "top_logprobs"] = [
            {**token_json(tokenizer, t), key: value(q)} for t, q in top
        ]
        out.append(item)
    return out


def chat_logprobs(tokenizer: Any, parts: Sequence[Partial], n_top: int) -> dict[str, Any]:
    """OpenAI's choice.logprobs for chat: {"content": [{id, token, bytes, logprob, top_logprobs}]}."""
    content = []
    for tok, p, top in token_probs(parts):
        item = {**token_json(tokenizer, tok), "logprob": logprob(p)}
        item["top_logprobs"] = [{**token_json(tokenizer, t), "logprob": logprob(q)} for t, q in top[:n_top]]
        content.append(item)
    return {"content": content}


def completion_logprobs(tokenizer: Any, parts: Sequence[Partial], n_top: int, offset: int = 0) -> dict[str, Any]:
    """OpenAI's legacy completions logprobs (tokens, token_logprobs, top_logprobs, text_offset),
    plus llama-server's chat-style `content` list. `offset`: where the text starts (after an
    echoed prompt)."""
    tokens, lps, tops, offsets = [], [], [], []
    pos = offset
    for tok, p, top in token_probs(parts):
        text, _ = piece(tokenizer, tok)
        tokens.append(text)
        lps.append(logprob(p))
        tops.append({piece(tokenizer, t)[0]: logprob(q) for t, q in top[:n_top]})
        offsets.append(pos)
        pos += len(text)
    d = chat_logprobs(tokenizer, parts, n_top)
    d.update({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
    return d
