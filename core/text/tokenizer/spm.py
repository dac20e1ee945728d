"""SentencePiece-style tokenization as llama.cpp's llm_tokenizer_spm_session.

The text (spaces already escaped to U+2581) is split into UTF-8 characters; adjacent
symbols whose concatenation is a vocabulary token are merged, highest token score first
(ties: leftmost), until no pair forms a token. A final symbol that is not a token is spelled
with byte tokens (<0xXX>). As in llama.cpp, the merge runs over the whole fragment, on its
bytes (text that is not valid UTF-8 included: llama.cpp's lead-byte rule makes the symbols);
the loop itself is `merge.encode_words`.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.errors import TokenizerError
from llamacli.core.text.tokenizer.merge import (
    SPM,
    FragmentCache,
    KeyTable,
    encode_words,
    split_ids,
    spm_order,
    warm,
)
from llamacli.core.text.tokenizer.token_index import token_table
from llamacli.core.text.tokenizer.vocab import Vocab

SPACE = "\u2581"


def _byte_token_ids(vocab: Vocab) -> np.ndarray:
    """llama_vocab::byte_to_token for SPM: <0xXX>, else the single-byte text; -1 if neither."""
    out = np.full(256, -1, np.int32)
    for b in range(256):
        tid = vocab.token_to_id.get(f"<0x{b:02X}>")
        if tid is None and b < 0x80:
            tid = vocab.token_to_id.get(chr(b))
        if tid is not None:
            out[b] = tid
    return out


class SpmEncoder:
    """Tokenizes one raw fragment (already space-escaped UTF-8) with the SPM merge."""

    def __init__(self, vocab: Vocab) -> None:
        self._tokens = token_table(vocab.token_to_id, vocab.tokens)
        self._no_pairs = KeyTable.of_merges([])
        self._order = spm_order(vocab.scores)
        self._byte_ids = _byte_token_ids(vocab)
        self.work = np.zeros(2, np.int64)  # merge.encode_words' counters, summed over calls
        self._cache = FragmentCache()
        warm()  # compiled now, not at the first request

    def encode_fragments(self, fragments: list[bytes]) -> list[list[int]]:
        """Each fragment merged on its own (llama.cpp runs one session per fragment); the
        lists are shared with the cache of recent fragments."""
        return self._cache.encode(fragments, self._encode)

    def _encode(self, fragments: list[bytes]) -> list[list[int]]:
        units = np.frombuffer(b"".join(fragments), np.uint8)
        ends = np.cumsum(np.fromiter(map(len, fragments), np.int64, len(fragments)))
        ids, out_ends = encode_words(units, ends, SPM, self._tokens, self._no_pairs, self._order, self._byte_ids,
                                     self.work)
        missing = ids < 0
        if missing.any():
            raise TokenizerError(f"the vocabulary has no byte token for 0x{-1 - int(ids[missing][0]):02X}")
        return split_ids(ids, out_ends)
