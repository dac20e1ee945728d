"""The endpoints that answer for the whole application, merged from every replica's answer
(each replica's own Quart app answered it: same fields, same errors). Pure functions over
(replica id, status, body) triples.

- /health: ok when any replica is ok (the others are loading or gone), with the count
- /props: the first replica's answer (same model, same settings), `total_slots` summed
- /slots: every replica's slots, each marked with its `replica` (slot ids stay per replica)
- /metrics: counters and load gauges summed, `n_tokens_max` the largest, the averages
  (tokens/s, busy slots per decode) averaged over the replicas; plus `llamacpp:replicas`
- /models, /v1/models: the first replica's answer

When no replica answered 200, the first answer is passed on as it is (a 401 without the API
key, a 501 without --slots, the 503 of a loading model).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    replica: str  # the replica's id
    status: int
    body: bytes
    content_type: str = "application/json"


AGGREGATED = frozenset({"/health", "/v1/health", "/props", "/slots", "/metrics", "/models", "/v1/models"})
_MAXED = frozenset({"llamacpp:n_tokens_max"})
_AVERAGED = frozenset({"llamacpp:n_busy_slots_per_decode", "llamacpp:prompt_tokens_seconds",
                       "llamacpp:predicted_tokens_seconds"})


def merge(path: str, answers: Sequence[Answer]) -> Answer:
    """The application's answer to GET `path` from its replicas' answers (at least one)."""
    ok = [a for a in answers if a.status == 200]
    if not ok:
        return answers[0]
    first = ok[0]
    if path in ("/health", "/v1/health"):
        return _json(first, {"status": "ok", "replicas": len(answers), "replicas_ok": len(ok)})
    if path == "/props":
        props = json.loads(first.body)
        props["total_slots"] = sum(json.loads(a.body).get("total_slots", 0) for a in ok)
        props["replicas"] = len(ok)
        return _json(first, props)
    if path == "/slots":
        return _json(first, [{**slot, "replica": a.replica} for a in ok for slot in json.loads(a.body)])
    if path == "/metrics":
        return Answer(first.replica, 200, merge_metrics([a.body.decode() for a in ok]).encode(), first.content_type)
    return first


def merge_metrics(texts: Sequence[str]) -> str:
    """Prometheus texts of the replicas as one (HELP/TYPE lines from the first)."""
    values: dict[str, list[float]] = {}
    lines: list[str] = []  # the first text's lines, samples as their names for now
    for i, text in enumerate(texts):
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                if i == 0:
                    lines.append(line)
                continue
            name, _, value = line.rpartition(" ")
            if name not in values and i == 0:
                lines.append(name)
            values.setdefault(name, []).append(float(value))
    out = [line if line.startswith("#") else f"{line} {_fmt(_combine(line, values[line]))}" for line in lines]
    out += ["# HELP llamacpp:replicas Replicas that answered.", "# TYPE llamacpp:replicas gauge",
            f"llamacpp:replicas {len(texts)}"]
    return "\n".join(out) + "\n"


def _combine(name: str, xs: list[float]) -> float:
    base = name.split("{")[0]
    if base in _MAXED:
        return max(xs)
    if base in _AVERAGED:
        return sum(xs) / len(xs)
    return sum(xs)


def _fmt(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


def _json(like: Answer, value: Any) -> Answer:
    return Answer(like.replica, 200, json.dumps(value).encode(), "application/json")
