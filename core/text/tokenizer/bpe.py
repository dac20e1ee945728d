"""Byte-pair encoding as llama.cpp's llm_tokenizer_bpe_session.

The fragment is split into words by the pre-tokenizer; each word (in GPT-2's byte-level
alphabet unless the model uses raw UTF-8) starts as one symbol per character and the
adjacent pair with the lowest merge rank (ties: leftmost) is merged until no pair has a
rank (`merge.encode_words`, all words of a fragment in one call). A final symbol that is
no token is looked up byte by byte; bytes without a token are dropped, as in llama.cpp.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.text.tokenizer.merge import (
    BPE,
    IGNORE_MERGES,
    NEWLINE_WORDS,
    FragmentCache,
    KeyTable,
    encode_words,
    split_ids,
    warm,
)
from llamacli.core.text.tokenizer.token_index import token_table
from llamacli.core.text.tokenizer.pretokenize import PreTokenizer
from llamacli.core.text.tokenizer.unicode import BYTE_TO_CHAR, decode_utf8, encode_utf8, utf8_ends
from llamacli.core.text.tokenizer.vocab import Vocab

# each byte's character in the byte-level alphabet, as UTF-8 (one or two bytes)
_ALPHABET = [c.encode("utf-8") for c in BYTE_TO_CHAR]
_ALPHA_WIDTH = np.array([len(a) for a in _ALPHABET], np.int64)
_ALPHA_FIRST = np.array([a[0] for a in _ALPHABET], np.uint8)
_ALPHA_LAST = np.array([a[-1] for a in _ALPHABET], np.uint8)


def byte_level(raw: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """unicode_byte_encoding_process on bytes with word ends: (UTF-8 of the alphabet
    spelling, the words' ends in it)."""
    width = _ALPHA_WIDTH[raw]
    offsets = np.zeros(len(raw) + 1, np.int64)
    np.cumsum(width, out=offsets[1:])
    starts = offsets[:-1]
    out = np.empty(int(offsets[-1]), np.uint8)
    out[starts] = _ALPHA_FIRST[raw]
    two = width == 2
    out[starts[two] + 1] = _ALPHA_LAST[raw[two]]
    return out, offsets[ends]


class BpeEncoder:
    """Tokenizes one raw fragment with pre-tokenization and BPE merges."""

    def __init__(self, vocab: Vocab, pre: PreTokenizer) -> None:
        self._pre = pre
        self._tokens = token_table(vocab.token_to_id, vocab.tokens)
        self._pairs = KeyTable.of_merges(vocab.merges or [])
        self._flags = BPE | (IGNORE_MERGES if vocab.ignore_merges else 0)
        self._flags |= NEWLINE_WORDS if vocab.pre_type == "GEMMA4" else 0
        self._byte_encode = pre.byte_encode
        ids = vocab.token_to_id
        # llama.cpp looks a leftover symbol's bytes up one by one, as one-byte strings
        if pre.byte_encode:
            byte_ids = [ids.get(chr(b)) if b < 0x80 else None for b in range(256)]
        else:
            byte_ids = [ids.get(f"<0x{b:02X}>") for b in range(256)]
        self._byte_ids = np.array([-1 if t is None else t for t in byte_ids], np.int32)
        self._no_order = np.zeros(0, np.uint32)
        self.work = np.zeros(2, np.int64)  # merge.encode_words' counters, summed over calls
        self._cache = FragmentCache()
        warm()  # compiled now, not at the first request

    def encode_fragments(self, fragments: list[bytes]) -> list[list[int]]:
        """The words of every fragment merged in one call; each fragment's ids apart (the
        lists are shared with the cache of recent fragments)."""
        return self._cache.encode(fragments, self._encode)

    def _encode(self, fragments: list[bytes]) -> list[list[int]]:
        parts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        last_word: list[int] = []  # per fragment, the index of its last word + 1
        base = n_words = 0
        for frag in fragments:
            text = decode_utf8(frag)
            words = self._pre.split(text)
            if words:
                units = np.frombuffer(encode_utf8(text), np.uint8)
                word_ends = utf8_ends(text, words)
                if self._byte_encode:
                    units, word_ends = byte_level(units, word_ends)
                parts.append(units)
                ends.append(word_ends + base)
                base += len(units)
                n_words += len(words)
            last_word.append(n_words)
        if not parts:
            return [[] for _ in fragments]
        ids, out_ends = encode_words(np.concatenate(parts), np.concatenate(ends), self._flags, self._tokens,
                                     self._pairs, self._no_order, self._byte_ids, self.work)
        frag_ends = np.concatenate(([0], out_ends))[last_word]
        return split_ids(ids, frag_ends)
