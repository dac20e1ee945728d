"""logit_bias: the sampler step (llama_sampler_logit_bias) and the request parser that turns
llama-server's JSON forms (pairs or an object; ids or strings; false bans) into pairs."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np
from llamacli.core.errors import InvalidRequest
from llamacli.core.sampling.candidates import F32, Candidates
from llamacli.core.sampling.limits import DEFAULT_SAMPLING_LIMITS, SamplingLimits
from llamacli.core.sampling.step import Stateless

_STRTOL_INT = re.compile(r"\s*[+-]?[0-9]+")



class Tokenize(Protocol):
    def tokenize(
        self, text: str, add_special: bool = ..., parse_special: bool = ...
    ) -> list[int]: ...


class LogitBias(Stateless):
    """Add each (token, bias) to that token's logit; entries for one token add up."""

    def __init__(self, biases: Iterable[tuple[int, float]]) -> None:
        pairs = [(int(t), float(b)) for t, b in biases]
        self.tokens = np.array([t for t, _ in pairs], dtype=np.int64)
        self.biases = np.array([b for _, b in pairs], dtype=F32)

    def apply(self, c: Candidates) -> None:
        """As llama.cpp: entries whose token still sits at index == id are added in order
        (so repeats add up); the others are searched for, first entry per token only."""
        if self.tokens.shape[0] == 0:
            return
        n = len(c)
        lg = c.logits
        toks = self.tokens
        inside = (toks >= 0) & (toks < n)
        direct = np.zeros(toks.shape[0], dtype=bool)
        direct[inside] = c.ids[toks[inside]] == toks[inside]
        for i in np.flatnonzero(direct):
            t = toks[i]
            lg[t] = F32(lg[t] + self.biases[i])
        rest = np.flatnonzero(~direct)
        if rest.shape[0] == 0:
            return
        uniq, first = np.unique(toks[rest], return_index=True)
        pos, which = c.positions(uniq)
        lg[pos] = lg[pos] + self.biases[rest[first[which]]]


def _bias_value(v: Any) -> float | None:
    """A number, or false for a ban; anything else (true, strings, null) is skipped."""
    if isinstance(v, bool):
        return None if v else -math.inf
    if isinstance(v, (int, float)):
        return float(v)
    return None


def resolve_logit_bias(
    raw: Any, tokenizer: Tokenize, n_vocab: int, limits: SamplingLimits = DEFAULT_SAMPLING_LIMITS
) -> list[tuple[int, float]]:
    """llama-server's `logit_bias` handler: `[[token, bias], ...]` or `{"token": bias}`, a
    token being an id or a string (every token of its tokenization, without BOS); a bias of
    false bans. Ids outside the vocabulary and malformed entries are skipped, as llama-server.
    More than `limits.max_logit_bias` entries (or pairs) or `limits.max_logit_bias_chars`
    characters of string keys is an `InvalidRequest`."""
    out: list[tuple[int, float]] = []
    max_items, max_chars = limits.max_logit_bias, limits.max_logit_bias_chars
    if isinstance(raw, (dict, list, tuple)) and len(raw) > max_items:
        raise InvalidRequest(f"logit_bias has {len(raw)} entries; at most {max_items} are accepted")
    chars = 0

    def add(key: Any, value: Any) -> None:
        nonlocal chars
        bias = _bias_value(value)
        if bias is None:
            return
        if isinstance(key, int) and not isinstance(key, bool):
            if 0 <= key < n_vocab:
                out.append((key, bias))
        elif isinstance(key, str):
            chars += len(key)
            if chars > max_chars:
                raise InvalidRequest(f"the string keys of logit_bias hold more than {max_chars} characters in all")
            for tok in tokenizer.tokenize(key, add_special=False, parse_special=False):
                out.append((tok, bias))
            if len(out) > max_items:
                raise InvalidRequest(f"logit_bias comes to more than {max_items} tokens; at most that many are accepted")

    if isinstance(raw, dict):
        for key, value in raw.items():
            k = str(key)
            # llama-server reads the key with strtol: a whole-key integer is an id
            if k == "":
                add(0, value)
            elif _STRTOL_INT.fullmatch(k):
                add(int(k), value)
            else:
                add(k, value)
    elif isinstance(raw, Sequence) and not isinstance(raw, (str, bytes)):
        for el in raw:
            if (
                isinstance(el, Sequence)
                and not isinstance(el, (str, bytes))
                and len(el) == 2
            ):
                add(el[0], el[1])
    elif raw is not None:
        raise InvalidRequest(
            "logit_bias must be an array of [token, bias] pairs or an object"
        )
    return out
