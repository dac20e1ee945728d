"""Unigram (T5-style, `tokenizer.ggml.model` = t5) tokenization as llama.cpp's
llm_tokenizer_ugm_session.

The text is normalized with SentencePiece's precompiled character map (a XOR-compressed
double array, walked byte by byte for the longest match), spaces become U+2581 and are
merged or prefixed as the vocabulary asks, then a Viterbi pass picks the tokenization with
the highest total score (user-defined tokens score 0; a character no token covers costs the
lowest normal score minus 10 and becomes the unknown token, consecutive unknowns merging).
"""

from __future__ import annotations

import struct

from llamacli.core.errors import TokenizerError
from llamacli.core.text.tokenizer.unicode import utf8_len
from llamacli.core.text.tokenizer.vocab import ATTR_NORMAL, ATTR_UNUSED, ATTR_USER_DEFINED, Vocab

_REPLACEMENT = "\ufffd".encode()
_CACHE_LIMIT = 1 << 15


class _Xcda:
    """Read-only view of the XOR-compressed compact double array."""

    def __init__(self, blob: bytes) -> None:
        self.nodes = struct.unpack(f"<{len(blob) // 4}I", blob[: len(blob) // 4 * 4])

    def _node(self, i: int) -> int:
        if i >= len(self.nodes):
            raise ValueError("index out of bounds in the precompiled charsmap")
        return self.nodes[i]

    def base(self, i: int) -> int:
        n = self._node(i)
        return (n >> 10) << ((n & (1 << 9)) >> 6)

    def lcheck(self, i: int) -> int:
        return self._node(i) & ((1 << 31) | 0xFF)

    def leaf(self, i: int) -> bool:
        return bool((self._node(i) >> 8) & 1)

    def value(self, i: int) -> int:
        return self._node(i) & ((1 << 31) - 1)


class UgmEncoder:
    def __init__(self, vocab: Vocab) -> None:
        self._vocab = vocab
        charsmap = vocab.precompiled_charsmap
        self._xcda: _Xcda | None = None
        self._replacements = b""
        if charsmap:
            (size,) = struct.unpack_from("<I", charsmap, 0)
            self._xcda = _Xcda(charsmap[4 : 4 + size])
            self._replacements = charsmap[4 + size :]
        attrs = vocab.attrs
        scores = vocab.scores
        self._ids: dict[bytes, int] = {}
        user: set[bytes] = set()
        self._score: dict[int, float] = {}
        self._reach: dict[bytes, int] = {}  # first two bytes -> longest token starting with them
        min_score = float("inf")
        for tid, text in enumerate(vocab.tokens):
            attr = int(attrs[tid])
            if attr & ATTR_NORMAL:
                min_score = min(min_score, float(scores[tid]))
            if attr & (ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED):
                raw = text.encode("utf-8")
                self._ids[raw] = tid
                self._score[tid] = 0.0 if attr & ATTR_USER_DEFINED else float(scores[tid])
                key = raw[:2]
                self._reach[key] = max(self._reach.get(key, 0), len(raw))
            if attr & ATTR_USER_DEFINED:
                user.add(text.encode("utf-8"))
        # llama.cpp's naive_trie::get_longest_prefix follows the trie as far as the input
        # matches, whether or not a whole user-defined token ends there
        self._user_prefixes = {u[:i] for u in user for i in range(1, len(u) + 1)}
        self._unknown_score = min_score - 10.0
        if vocab.unk is None:
            raise TokenizerError("a UGM vocabulary needs an unknown token (tokenizer.ggml.unknown_token_id)")
        self._unk: int = vocab.unk
        self._cache: dict[bytes, list[int]] = {}

    # -- normalization --------------------------------------------------------------------

    def _prefix(self, text: bytes, pos: int) -> tuple[bytes, int]:
        """(normalized bytes, input bytes consumed) at `pos` (normalize_prefix)."""
        n = 0
        while pos + n < len(text) and text[pos : pos + n + 1] in self._user_prefixes:
            n += 1
        if n:
            return text[pos : pos + n], n
        best_len, best_off = 0, 0
        if self._xcda is not None:
            x = self._xcda
            node = x.base(0)
            for i in range(pos, len(text)):
                c = text[i]
                if c == 0:
                    break
                node ^= c
                if x.lcheck(node) != c:
                    break
                is_leaf = x.leaf(node)
                node ^= x.base(node)
                if is_leaf:
                    best_len = i - pos + 1
                    best_off = x.value(node)
        if best_len:
            if best_off >= len(self._replacements):
                raise ValueError("index out of bounds in the precompiled charsmap")
            end = self._replacements.find(b"\x00", best_off)
            if end < 0:
                raise ValueError("unterminated string in the precompiled charsmap")
            return self._replacements[best_off:end], best_len
        size = _valid_utf8_len(text, pos)
        return (text[pos : pos + size], size) if size else (_REPLACEMENT, 1)

    def normalize(self, text: bytes) -> bytes:
        v = self._vocab
        space = "\u2581".encode() if v.escape_whitespaces else b" "
        prepend = not v.treat_whitespace_as_suffix and v.add_space_prefix
        append = v.treat_whitespace_as_suffix and v.add_space_prefix
        merge = v.remove_extra_whitespaces
        out = bytearray()
        prepended = False
        in_word = False
        pos = 0
        while pos < len(text):
            norm, used = self._prefix(text, pos)
            for c in norm:
                if c != 0x20:
                    if not in_word:
                        in_word = True
                        if (prepend and not prepended) or merge:
                            out += space
                            prepended = True
                    out.append(c)
                else:
                    in_word = False
                    if not merge:
                        out += space
            pos += used
        if append:
            out += space
        return bytes(out)

    # -- Viterbi --------------------------------------------------------------------------

    def encode_fragments(self, fragments: list[bytes]) -> list[list[int]]:
        return [self.encode_bytes(frag) for frag in fragments]

    def encode_bytes(self, raw: bytes) -> list[int]:
        ids = self._cache.get(raw)
        if ids is None:
            ids = self._viterbi(self.normalize(raw))
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[raw] = ids
        return list(ids)

    def _viterbi(self, norm: bytes) -> list[int]:
        n = len(norm)
        if n == 0:
            return []
        unk = self._unk
        best_id = [unk] * (n + 1)
        best_from = [0] * (n + 1)
        best_score = [float("-inf")] * (n + 1)
        best_score[0] = 0.0
        ids, scores, reach = self._ids, self._score, self._reach
        pos = 0
        while pos < n:
            units = min(utf8_len(norm[pos]), n - pos)
            here = best_score[pos]
            single = False
            longest = min(n - pos, max(reach.get(norm[pos : pos + 2], 0), reach.get(norm[pos : pos + 1], 0)))
            for length in range(1, longest + 1):
                tid = ids.get(norm[pos : pos + length])
                if tid is None:
                    continue
                if length == units:
                    single = True
                score = here + scores[tid]
                end = pos + length
                if score > best_score[end]:
                    best_id[end], best_from[end], best_score[end] = tid, pos, score
            if not single:
                end = pos + units
                score = here + self._unknown_score
                if score > best_score[end]:
                    best_id[end], best_from[end], best_score[end] = unk, pos, score
            pos += units
        out: list[int] = []
        prev_unknown = False
        at = n
        while True:
            tid = best_id[at]
            is_unknown = tid == unk
            if not (prev_unknown and is_unknown):
                out.append(tid)
            if best_from[at] == 0:
                break
            prev_unknown = is_unknown
            at = best_from[at]
        out.reverse()
        return out


def _valid_utf8_len(data: bytes, pos: int) -> int:
    """Length of the sequence llama.cpp's lenient decoder accepts at `pos`, 0 if invalid."""
    b = data[pos]
    if b < 0x80:
        return 1
    if not b & 0x40:
        return 0
    size = 2 if not b & 0x20 else 3 if not b & 0x10 else 4 if not b & 0x08 else 0
    if not size or pos + size > len(data):
        return 0
    if any(data[pos + k] & 0xC0 != 0x80 for k in range(1, size)):
        return 0
    return size
