"""DRY ("Don't Repeat Yourself"), ported from llama.cpp's llama_sampler_dry (itself from
Koboldcpp): penalise the token that would extend a repeat of the recent context, by
multiplier * base ^ (repeat length - allowed length); sequence breakers restart the scan.

Breakers are strings, so they need the vocabulary: `DryVocab` holds each token's text and a
tokenize function; a breaker list becomes a `BreakerMap`, which resolves a token against the
breakers when DRY first meets that token (no pass over the vocabulary per request).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from llamacli.core.sampling.candidates import F32, Candidates

Breakers = Mapping[int, list[tuple[int, ...]]]  # head token -> tails (empty tail: one token)
_MAX_CHAR_LEN = 40
_MAX_SEQ_LEN = 20
_CACHE_SIZE = 16
_FLOAT_MAX_LOG = F32(88.7228391)


class TokenizerLike(Protocol):
    @property
    def n_vocab(self) -> int: ...

    def tokenize(
        self, text: str | bytes, add_special: bool = ..., parse_special: bool = ...
    ) -> list[int]: ...

    def detokenize_bytes(
        self,
        ids: Sequence[int],
        remove_special: bool = ...,
        unparse_special: bool = ...,
    ) -> bytes: ...


def overlapping_sequences(
    word: bytes, breakers: Sequence[bytes], tail: Callable[[bytes, int], tuple[int, ...]]
) -> list[tuple[int, ...]]:
    """get_overlapping_token_sequences for one token text: an empty tail for each breaker the
    text contains, else for each place where the text ends with a prefix of a breaker, the
    rest of that breaker tokenized (``tail(breaker, len(prefix))``), without repeats."""
    seqs: list[tuple[int, ...]] = []
    for b in breakers:
        if b in word:
            seqs.append(())
            continue
        first = b[:1]
        pos = word.find(first)
        while pos != -1:
            rest = word[pos:]
            if b.startswith(rest):
                seq = tail(b, len(rest))
                if seq not in seqs:
                    seqs.append(seq)
            pos = word.find(first, pos + 1)
    return seqs


class BreakerMap(Mapping[int, list[tuple[int, ...]]]):
    """llama.cpp's processed breakers (head token -> tails) for one breaker list, resolved
    per token when the DRY step first looks that token up: a request's breakers cost work
    for the tokens it generates, never a pass over the vocabulary. Iterating it (tests,
    debugging) does visit every token."""

    def __init__(self, breakers: Sequence[bytes], vocab: DryVocab) -> None:
        self.breakers = tuple(breakers)
        self.vocab = vocab
        self._by_first: dict[int, list[int]] = {}  # first byte -> breaker indices
        for i, b in enumerate(self.breakers):
            self._by_first.setdefault(b[0], []).append(i)
        self._tails: dict[tuple[bytes, int], tuple[int, ...]] = {}
        self._memo: dict[int, list[tuple[int, ...]]] = {}

    def _tail(self, breaker: bytes, n_matched: int) -> tuple[int, ...]:
        key = (breaker, n_matched)
        seq = self._tails.get(key)
        if seq is None:
            seq = self._tails[key] = tuple(self.vocab.tokenize(breaker[n_matched:])[:_MAX_SEQ_LEN])
        return seq

    def _resolve(self, token: int) -> list[tuple[int, ...]]:
        seqs = self._memo.get(token)
        if seqs is None:
            word = self.vocab.piece(token)
            which = sorted(i for c in set(word) for i in self._by_first.get(c, ()))
            seqs = overlapping_sequences(word, [self.breakers[i] for i in which], self._tail) if which else []
            self._memo[token] = seqs
        return seqs

    def __getitem__(self, token: int) -> list[tuple[int, ...]]:
        seqs = self._resolve(token)
        if not seqs:
            raise KeyError(token)
        return seqs

    def get(self, token: int, default: Any = None) -> Any:
        return self._resolve(token) or default

    def __contains__(self, token: object) -> bool:
        return isinstance(token, int) and bool(self._resolve(token))

    def __iter__(self) -> Iterator[int]:
        return (t for t in self.vocab.token_ids() if self._resolve(t))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def process_breakers(strings: Sequence[str], vocab: DryVocab) -> BreakerMap:
    """llama_sampler_init_dry's breaker processing: UTF-8, empty ones skipped, 40 bytes max
    (one that repeats another after the cut counts once)."""
    raw = (b.encode("utf-8")[:_MAX_CHAR_LEN] for b in strings)
    return BreakerMap([b for b in dict.fromkeys(raw) if b], vocab)


class DryVocab:
    """A vocabulary as DRY needs it: each token's text (llama.cpp's `detokenize({id},
    special=true)`; a sequence or mapping of texts, or a function of the id) and
    tokenize(bytes) without BOS or special-token parsing. The processed breakers of the
    last `_CACHE_SIZE` lists are kept, with the tokens they have resolved."""

    def __init__(
        self,
        token_pieces: Sequence[bytes] | Mapping[int, bytes] | Callable[[int], bytes],
        tokenize: Callable[[bytes], list[int]],
        n_vocab: int | None = None,
    ) -> None:
        self._pieces = token_pieces
        self.tokenize = tokenize
        self.n_vocab = n_vocab
        self._cache: OrderedDict[tuple[str, ...], BreakerMap] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_tokenizer(cls, tok: TokenizerLike) -> DryVocab:
        """Token texts read from the tokenizer as DRY looks tokens up. The closures hold the
        tokenizer weakly: the sampler caches DryVocabs in a WeakKeyDictionary keyed by the
        tokenizer, and a strong reference from the value would keep every tokenizer (and its
        model's caches) alive."""
        tok = weakref.proxy(tok)
        return cls(
            lambda i: tok.detokenize_bytes([i], False, True),
            lambda text: tok.tokenize(text, add_special=False, parse_special=False),
            tok.n_vocab,
        )

    def piece(self, token: int) -> bytes:
        """The text of one token (b"" for one the vocabulary does not list)."""
        p = self._pieces
        if callable(p):
            return p(token) if self.n_vocab is None or 0 <= token < self.n_vocab else b""
        if isinstance(p, Mapping):
            return p.get(token, b"")
        return p[token] if 0 <= token < len(p) else b""

    def token_ids(self) -> Iterable[int]:
        p = self._pieces
        if isinstance(p, Mapping):
            return iter(p)
        return range(len(p) if not callable(p) else self.n_vocab or 0)

    def breakers(self, strings: Sequence[str]) -> BreakerMap:
        key = tuple(strings)
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                hit = self._cache[key] = process_breakers(key, self)
                while len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(key)
            return hit


class Dry:
    """The DRY step; `last_n` None means unbounded history."""

    def __init__(
        self,
        multiplier: float,
        base: float,
        allowed_length: int,
        last_n: int | None,
        breakers: Breakers | None = None,
    ) -> None:
        self.multiplier = F32(multiplier)
        self.base = F32(base)
        self.allowed_length = int(allowed_length)
        self.last_n = last_n
        self.breakers: Breakers = breakers if breakers is not None else {}
        self.history: deque[int] = deque(maxlen=last_n)

    @property
    def disabled(self) -> bool:
        return self.multiplier == 0 or self.base < 1 or self.last_n == 0

    def accept(self, token: int) -> None:
        if not self.disabled:
            self.history.append(int(token))

    def reset(self) -> None:
        self.history.clear()

    def _rep_limit(self, last: list[int], n: int) -> int:
        """Step 1: the nearest restart sequence bounds the repeat length."""
        for i in range(n):
            seqs = self.breakers.get(last[i])
            if seqs is None:
                continue
            longest = -1
            for seq in seqs:
                k = len(seq)
                if longest < k <= i and all(
                    seq[o] == last[i - o - 1] for o in range(k)
                ):
                    longest = k
            if longest >= 0:
                return i - longest
        return n

    def repeat_lengths(self) -> dict[int, int] | None:
        """Steps 1-3: for each token that would extend a repeat, the longest such repeat
        (None where llama.cpp returns early, leaving the candidates untouched)."""
        n = len(self.history)
        if self.last_n is not None:
            n = min(n, self.last_n)
        if n <= self.allowed_length:
            return None
        last = list(self.history)[::-1][
            :n
        ]  # last[i]: i places from the end (ring_buffer.rat)
        rep_limit = self._rep_limit(last, n)
        if rep_limit < self.allowed_length:
            return None
        # Step 2: reverse Z-algorithm, lengths capped at rep_limit (llama.cpp's exact loop)
        counts = [0] * n
        end = n - 1
        lt = rt = 0
        for k in range(1, n):
            if k > rt:
                m = 0
                while m + k < n and last[m] == last[m + k]:
                    m += 1
                counts[end - k] = min(m, rep_limit)
                if m > 0:
                    lt, rt = k, k + m - 1
            else:
                p = k - lt
                right = rt - k + 1
                if counts[end - p] < right:
                    counts[end - k] = min(counts[end - p], rep_limit)
                else:
                    i = rt + 1
                    while i < n and last[i] == last[i - k]:
                        i += 1
                    counts[end - k] = min(i - k, rep_limit)
                    lt, rt = k, i - 1
        # Step 3: the token after each repeat would extend it
        best: dict[int, int] = {}
        for i in range(n - 1):
            length = counts[i]
            if length >= self.allowed_length:
                tok = last[n - 2 - i]
                if best.get(tok, -1) < length:
                    best[tok] = length
        return best

    def apply(self, c: Candidates) -> None:
        if self.disabled:
            return
        best = self.repeat_lengths()
        if best is None:
            return
        max_exp = 0
        if self.base > F32(1.000001):
            max_exp = int(F32(_FLOAT_MAX_LOG / F32(math.log(self.base))))
        toks = [
            t for t in best if not any(len(s) == 0 for s in self.breakers.get(t, ()))
        ]
        if toks:
            tokens = np.array(toks, dtype=np.int64)
            pos, which = c.positions(tokens)
            pen = np.empty(len(toks), dtype=F32)
            for j, t in enumerate(toks):
                e = best[t] - self.allowed_length
                if max_exp > 0 and e > max_exp:
                    e = max_exp
                pen[j] = F32(float(self.multiplier) * float(self.base) ** e)
            c.logits[pos] = c.logits[pos] - pen[which]
        c.sorted = False
