"""SentencePiece-style tokenization as llama.cpp's llm_tokenizer_spm_session.

The text (spaces already escaped to U+2581) is split into UTF-8 characters; adjacent
symbols whose concatenation is a vocabulary token are merged, highest token score first
(ties: leftmost), until no pair forms a token. A final symbol that is not a token is spelled
with byte tokens (<0xXX>).

Chunking: llama.cpp runs the merge over the whole fragment. Merges only ever join symbols
into vocabulary tokens, so if no token contains the two characters on either side of some
boundary, no merge crosses it; the merges on each side then happen in the same relative
order as they would alone (the queue orders them by score and position, and merges on one
side never create or remove candidates on the other). So cutting the text at such
boundaries and tokenizing the pieces separately gives identical ids. We cut before each
U+2581 whose left neighbour is neither U+2581 nor a character that precedes U+2581 inside
some token, and cache the ids of each piece (a word with its leading spaces).
"""

from __future__ import annotations

import heapq
import re

from llamacli.core.errors import TokenizerError
from llamacli.core.text.tokenizer.unicode import utf8_len
from llamacli.core.text.tokenizer.vocab import Vocab

SPACE = "\u2581"
_CACHE_LIMIT = 1 << 17


def _byte_token_ids(vocab: Vocab) -> list[int | None]:
    """llama_vocab::byte_to_token for SPM: <0xXX>, else the single-byte text."""
    out: list[int | None] = []
    for b in range(256):
        tid = vocab.token_to_id.get(f"<0x{b:02X}>")
        if tid is None and b < 0x80:
            tid = vocab.token_to_id.get(chr(b))
        out.append(tid)
    return out


def _chunk_pattern(tokens: list[str]) -> re.Pattern[str]:
    """Matches one cacheable piece: see the module docstring."""
    joined = "\x00".join(tokens)
    before = set(re.findall(f"([^{SPACE}\x00]){SPACE}", joined))
    if joined.count("\x00") >= len(tokens) and any("\x00" + SPACE in t for t in tokens):
        before.add("\x00")  # some token holds a NUL, the separator above
    if not before:
        return re.compile(f"{SPACE}*[^{SPACE}]*")
    cls = "[" + "".join(re.escape(c) for c in sorted(before)) + "]"
    return re.compile(f"{SPACE}*[^{SPACE}]*(?:(?<={cls}){SPACE}+[^{SPACE}]*)*")


class SpmEncoder:
    """Tokenizes one raw fragment (already space-escaped) with the SPM merge."""

    def __init__(self, vocab: Vocab) -> None:
        self._ids = vocab.token_to_id
        self._scores: list[float] = vocab.scores.tolist()
        self._byte_ids = _byte_token_ids(vocab)
        self._chunks = _chunk_pattern(vocab.tokens)
        self._cache: dict[str, list[int]] = {}
        self._bytes_ids: dict[bytes, int] | None = None
        self._tokens = vocab.tokens

    def encode(self, text: str) -> list[int]:
        cache = self._cache
        out: list[int] = []
        for chunk in self._chunks.findall(text):
            ids = cache.get(chunk)
            if ids is None:
                if not chunk:
                    continue
                ids = self._merge(list(chunk), self._ids)
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[chunk] = ids
            out += ids
        return out

    def encode_bytes(self, text: bytes) -> list[int]:
        """The same on text that is not valid UTF-8: symbols follow llama.cpp's lead-byte rule."""
        if self._bytes_ids is None:
            self._bytes_ids = {t.encode("utf-8"): i for i, t in enumerate(self._tokens)}
        symbols: list[bytes] = []
        i, n = 0, len(text)
        while i < n:
            size = min(utf8_len(text[i]), n - i)
            symbols.append(text[i : i + size])
            i += size
        return self._merge(symbols, self._bytes_ids)

    def _merge(self, sym: list, lookup: dict) -> list[int]:  # type: ignore[type-arg]
        n = len(sym)
        scores = self._scores
        heap: list[tuple[float, int, int, int]] = []
        for i in range(n - 1):
            tid = lookup.get(sym[i] + sym[i + 1])
            if tid is not None:
                heap.append((-scores[tid], i, i + 1, len(sym[i]) + len(sym[i + 1])))
        if heap:
            heapq.heapify(heap)
            prev = list(range(-1, n - 1))
            nxt = list(range(1, n + 1))
            nxt[-1] = -1
            pop, push = heapq.heappop, heapq.heappush
            while heap:
                _, left, right, size = pop(heap)
                sl, sr = sym[left], sym[right]
                if not sl or not sr or len(sl) + len(sr) != size:
                    continue
                merged = sl + sr
                sym[left] = merged
                sym[right] = sr[:0]
                after = nxt[right]
                nxt[left] = after
                if after >= 0:
                    prev[after] = left
                    tid = lookup.get(merged + sym[after])
                    if tid is not None:
                        push(heap, (-scores[tid], left, after, size + len(sym[after])))
                before = prev[left]
                if before >= 0:
                    tid = lookup.get(sym[before] + merged)
                    if tid is not None:
                        push(heap, (-scores[tid], before, left, len(sym[before]) + size))
        out: list[int] = []
        for s in sym:
            if not s:
                continue
            tid = lookup.get(s)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._byte_fallback(s))
        return out

    def _byte_fallback(self, s: str | bytes) -> list[int]:
        data = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
        out: list[int] = []
        for b in data:
            tid = self._byte_ids[b]
            if tid is None:
                raise TokenizerError(f"the vocabulary has no byte token for 0x{b:02X}")
            out.append(tid)
        return out
