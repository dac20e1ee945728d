"""Per-request limits (`llama serve --max-prompts`, `--max-embd-inputs`, `--max-stop-strings`,
`--max-stop-length`, and bounds where llama-server has none): a request over one is a 400
before any work is queued. The body size limit is Quart's MAX_CONTENT_LENGTH (app.py);
grammars and schemas are bounded where they compile (core/text/grammar/limits.py), sampling
parameters where they are checked (core/sampling/limits.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llamacli.http.errors import bad_request


@dataclass(frozen=True)
class StopLimits:
    """Stop strings are searched for after every token: how many and how long."""

    max_strings: int = 1000
    max_chars: int = 1000


DEFAULT_STOP_LIMITS = StopLimits()


def check_count(n: int, limit: int, what: str, flag: str) -> None:
    """400 when a request asks for more than `limit` of `what` (limit <= 0: no limit)."""
    if 0 < limit < n:
        raise bad_request(f"the request has {n} {what}; this server takes at most {limit} per request ({flag})")


def check_stop_strings(stops: Sequence[str], limits: StopLimits = DEFAULT_STOP_LIMITS, what: str = "stop") -> None:
    """400 for more stop strings than the limits allow, or one longer."""
    check_strings(stops, what, limits.max_strings, limits.max_chars)


def check_strings(values: Sequence[str], what: str, max_items: int | None, max_len: int | None) -> None:
    """400 for more than ``max_items`` strings or one longer than ``max_len`` (None: no bound)."""
    if max_items is not None and len(values) > max_items:
        raise bad_request(f"'{what}' has {len(values)} strings; at most {max_items} are accepted")
    longest = max((len(s) for s in values), default=0)
    if max_len is not None and longest > max_len:
        raise bad_request(f"'{what}' holds a string of {longest} characters; at most {max_len} are accepted")


def text_limit(n_ctx: int, tokenizer: Any) -> int:
    """The most characters of text one request may have tokenized: what the server's whole
    context could hold at the vocabulary's longest token. Past this no prompt could fit, and
    tokenizing costs time in proportion to the text (about 0.5 us a character)."""
    return n_ctx * max(1, int(getattr(tokenizer, "max_token_chars", 1)))


def check_text(n_chars: int, limit: int, what: str) -> None:
    """400 when a text to tokenize is longer than ``limit`` characters."""
    if n_chars > limit:
        raise bad_request(f"the {what} is {n_chars} characters; this server tokenizes at most {limit} "
                          "per request (its context size times its longest token)")
