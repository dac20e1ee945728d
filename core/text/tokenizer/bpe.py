"""Byte-pair encoding as llama.cpp's llm_tokenizer_bpe_session.

The fragment is split into words by the pre-tokenizer; each word (in GPT-2's byte-level
alphabet unless the model uses raw UTF-8) starts as one symbol per character and the
adjacent pair with the lowest merge rank (ties: leftmost) is merged until no pair has a
rank. llama.cpp's queue with stale-entry checks performs exactly this sequence: a stale
entry is recognised by its text, and symbols only grow, so the valid pairs are always the
current neighbours. Words are independent, so their ids are cached.
"""

from __future__ import annotations

import heapq

from llamacli.core.text.tokenizer.pretokenize import PreTokenizer
from llamacli.core.text.tokenizer.unicode import BYTE_ENCODE_TABLE, encode_utf8
from llamacli.core.text.tokenizer.vocab import Vocab

_CACHE_LIMIT = 1 << 17
_HEAP_FROM = 24  # words at least this long use the heap instead of rescanning


def merge_ranks(merges: list[str]) -> dict[str, int]:
    """'left right' -> rank; the first occurrence of a duplicate pair wins (std::map emplace).

    llama.cpp splits each merge at its first space after position 0; a pair whose parts hold
    spaces can never be looked up (symbols never contain a space), so keying by the raw
    merge string is equivalent.
    """
    n = len(merges)
    return dict(zip(reversed(merges), range(n - 1, -1, -1)))


class BpeEncoder:
    """Tokenizes one raw fragment with pre-tokenization and BPE merges."""

    def __init__(self, vocab: Vocab, pre: PreTokenizer) -> None:
        self._pre = pre
        self._ids = vocab.token_to_id
        self._ranks = merge_ranks(vocab.merges or [])
        self._ignore_merges = vocab.ignore_merges
        self._gemma4 = vocab.pre_type == "GEMMA4"
        self._byte_encode = pre.byte_encode
        self._cache: dict[str, list[int]] = {}
        if pre.byte_encode:
            self._byte_ids = [self._ids.get(chr(b)) if b < 0x80 else None for b in range(256)]
        else:
            self._byte_ids = [self._ids.get(f"<0x{b:02X}>") for b in range(256)]

    def encode(self, text: str) -> list[int]:
        cache = self._cache
        out: list[int] = []
        for word in self._pre.split(text):
            ids = cache.get(word)
            if ids is None:
                if not word:
                    continue
                ids = self._word(word)
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[word] = ids
            out += ids
        return out

    def _word(self, word: str) -> list[int]:
        if self._byte_encode:
            word = encode_utf8(word).decode("latin-1").translate(BYTE_ENCODE_TABLE)
        tid = self._ids.get(word)
        if tid is not None and (self._ignore_merges or (self._gemma4 and word.strip("\n") == "")):
            return [tid]
        symbols = list(word)
        if len(symbols) > 1:
            symbols = self._merge_heap(symbols) if len(symbols) >= _HEAP_FROM else self._merge_scan(symbols)
        out: list[int] = []
        for s in symbols:
            tid = self._ids.get(s)
            if tid is not None:
                out.append(tid)
                continue
            for b in encode_utf8(s):  # llama.cpp looks up each byte; unknown ones are dropped
                bid = self._byte_ids[b]
                if bid is not None:
                    out.append(bid)
        return out

    def _merge_scan(self, sym: list[str]) -> list[str]:
        ranks = self._ranks
        while len(sym) > 1:
            best = -1
            best_rank = 1 << 62
            for i in range(len(sym) - 1):
                r = ranks.get(sym[i] + " " + sym[i + 1])
                if r is not None and r < best_rank:
                    best_rank, best = r, i
            if best < 0:
                break
            sym[best : best + 2] = [sym[best] + sym[best + 1]]
        return sym

    def _merge_heap(self, sym: list[str]) -> list[str]:
        ranks = self._ranks
        n = len(sym)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        heap: list[tuple[int, int, int, str]] = []
        for i in range(n - 1):
            r = ranks.get(sym[i] + " " + sym[i + 1])
            if r is not None:
                heap.append((r, i, i + 1, sym[i] + sym[i + 1]))
        heapq.heapify(heap)
        while heap:
            _, left, right, text = heapq.heappop(heap)
            sl, sr = sym[left], sym[right]
            if not sl or not sr or sl + sr != text:
                continue
            sym[left] = text
            sym[right] = ""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prev[after] = left
            before = prev[left]
            if before >= 0:
                r = ranks.get(sym[before] + " " + text)
                if r is not None:
                    heapq.heappush(heap, (r, before, left, sym[before] + text))
            if after >= 0:
                r = ranks.get(text + " " + sym[after])
                if r is not None:
                    heapq.heappush(heap, (r, left, after, text + sym[after]))
        return [s for s in sym if s]
