"""WordPiece (BERT) tokenization as llama.cpp's llm_tokenizer_wpm_session.

Words come from llama.cpp's BertNormalizer-like preprocessing (its own NFD table, which keeps
only the first code point of a decomposition, and its lowercase table); each word, prefixed
with U+2581, is covered greedily by the longest vocabulary tokens, and a word that cannot be
covered becomes the unknown token.
"""

from __future__ import annotations

from llamacli.core.text.tokenizer import unicode as U
from llamacli.core.text.tokenizer.vocab import Vocab

_CACHE_LIMIT = 1 << 16


def _is_chinese(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B920 <= cp <= 0x2CEAF  # sic: llama.cpp follows the HF code here
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class WpmEncoder:
    def __init__(self, vocab: Vocab) -> None:
        self._ids = dict(zip(vocab.tokens, range(vocab.n_tokens)))  # looked up per word piece
        self._unk = vocab.unk
        self._max_len = max(len(t.encode("utf-8")) for t in vocab.tokens)
        self._lower = vocab.normalizer_lowercase
        self._strip = vocab.normalizer_strip_accents
        self._char_cache: dict[str, tuple[int, str]] = {}  # char -> (kind, normalized)
        self._cache: dict[str, list[int]] = {}

    def _classify(self, ch: str) -> tuple[int, str]:
        """(0 drop, 1 whitespace, 2 single-char word, 3 word char), normalized text."""
        cp = ord(ch)
        if self._strip:
            cp = U.nfd_first(cp)
        if U.is_whitespace(cp):
            return 1, ""
        cat = U.category(cp)
        if cp == 0 or cp == 0xFFFD or cat == U.CONTROL:
            return 0, ""
        if self._strip and cat == U.ACCENT_MARK:
            return 0, ""
        s = chr(U.tolower(cp) if self._lower else cp)
        if cat == U.PUNCTUATION or (cp < 0x7F and cat == U.SYMBOL) or _is_chinese(cp):
            return 2, s
        return 3, s

    def words(self, text: str) -> list[str]:
        """llm_tokenizer_wpm_session::preprocess."""
        words: list[str] = []
        cur: list[str] = []
        cache = self._char_cache
        for ch in text:
            kind_s = cache.get(ch)
            if kind_s is None:
                kind_s = cache[ch] = self._classify(ch)
            kind, s = kind_s
            if kind == 3:
                cur.append(s)
            elif kind == 2:
                if cur:
                    words.append("".join(cur))
                    cur = []
                words.append(s)
            elif kind == 1 and cur:
                words.append("".join(cur))
                cur = []
        if cur:
            words.append("".join(cur))
        return words

    def encode_fragments(self, fragments: list[bytes]) -> list[list[int]]:
        return [self.encode(U.decode_utf8(frag)) for frag in fragments]

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for word in self.words(text):
            ids = self._cache.get(word)
            if ids is None:
                ids = self._word(word)
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                self._cache[word] = ids
            out += ids
        return out

    def _word(self, word: str) -> list[int]:
        # llama.cpp works on bytes: the longest match is searched over byte lengths
        w = ("\u2581" + word).encode("utf-8")
        n = len(w)
        out: list[int] = []
        i = 0
        while i < n:
            for j in range(min(n, i + self._max_len + 1), i, -1):
                piece = w[i:j]
                try:
                    tid = self._ids.get(piece.decode("utf-8"))
                except UnicodeDecodeError:
                    tid = None
                if tid is not None:
                    out.append(tid)
                    i = j
                    break
            else:
                out = []
                break
        if not out:
            return [self._unk] if self._unk is not None else []
        return out
