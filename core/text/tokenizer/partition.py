"""Split text around special tokens before the model tokenizes it (llama.cpp
tokenizer_st_partition).

llama.cpp takes the special tokens longest first and, for each, cuts every remaining text
fragment at the token's leftmost non-overlapping occurrences, optionally stripping the
whitespace (C isspace) left of an LSTRIP token and right of an RSTRIP token. Control and
unknown tokens only take part when `parse_special` is set; user-defined tokens always do.

Rather than a list of fragments, we keep one byte mask over the text (0 = still raw text,
1 = consumed by a token or stripped); a fragment is then a maximal run of zeros, and an
occurrence lies inside one fragment exactly when its bytes are all zero. Taking each token's
occurrences in order, skipping those that touch the mask, gives the same cuts as llama.cpp's
per-fragment loop (which finds the leftmost occurrence at or after a position, as we do).

Every occurrence of every special token is listed in one pass over the text: a regular
expression shaped as the tokens' prefix tree, inside a lookahead, matches at each position the
longest token starting there (the branches of a node start with distinct bytes, so the walk is
one path; `re` tries a branch's first byte before entering it), and the tokens starting there
are the prefixes of that match that are tokens. The pass is linear in the text (times the
longest token), and the cuts cost one step per occurrence, however many distinct special
tokens the text holds (searching the text once per token cost 3.4 s a MB for a text holding
all of Gemma 3's 6414).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llamacli.core.text.tokenizer.vocab import ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_UNKNOWN, Vocab

_SPACE = frozenset(b" \t\n\v\f\r")

Fragment = bytes | int  # raw text or a token id


@dataclass
class _Trie:
    children: dict[int, _Trie] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)  # tokens that end here


class SpecialPartitioner:
    """Cuts text into raw fragments and special token ids for one vocabulary."""

    def __init__(self, vocab: Vocab) -> None:
        self._order: dict[int, int] = {tid: rank for rank, tid in enumerate(vocab.special_ids)}
        self._text: dict[int, bytes] = {tid: vocab.tokens[tid].encode("utf-8") for tid in vocab.special_ids}
        self._lstrip = {tid for tid in vocab.special_ids if vocab.attrs[tid] & ATTR_LSTRIP}
        self._rstrip = {tid for tid in vocab.special_ids if vocab.attrs[tid] & ATTR_RSTRIP}
        parse_only = {tid for tid in vocab.special_ids if vocab.attrs[tid] & (ATTR_CONTROL | ATTR_UNKNOWN)}
        self._tries = (self._trie([t for t in vocab.special_ids if t not in parse_only]), self._trie(vocab.special_ids))
        self._scanners: list[re.Pattern[bytes] | None] = [None, None]  # compiled at first use (`_occurrences`)

    def _trie(self, ids: list[int]) -> _Trie:
        root = _Trie()
        for tid in ids:
            node = root
            for b in self._text[tid]:
                node = node.children.setdefault(b, _Trie())
            node.ids.append(tid)
        return root

    @staticmethod
    def _pattern(node: _Trie) -> bytes:
        """The regex of the subtree under `node`: its longest token first (greedy)."""
        alts = [re.escape(bytes((b,))) + SpecialPartitioner._pattern(c) for b, c in sorted(node.children.items())]
        if not alts:
            return b""
        if len(alts) == 1 and not node.ids:
            return alts[0]  # a chain of single bytes needs no group
        return b"(?:" + b"|".join(alts) + (b"|)" if node.ids else b")")

    def _occurrences(self, text: bytes, parse_special: bool) -> dict[int, list[int]]:
        """Start positions (ascending, overlapping ones too) of each special token in `text`."""
        scanner = self._scanners[parse_special]
        if scanner is None:
            root = self._tries[parse_special]
            scanner = re.compile(b"(?=(" + self._pattern(root) + b"))") if root.children else re.compile(b"(?!)")
            self._scanners[parse_special] = scanner
        found: dict[int, list[int]] = {}
        starting: dict[bytes, list[int]] = {}  # longest match -> the tokens that start with it
        for m in scanner.finditer(text):
            s = m.group(1)
            ids = starting.get(s)
            if ids is None:
                ids = starting[s] = self._prefix_ids(s, self._tries[parse_special])
            p = m.start()
            for tid in ids:
                found.setdefault(tid, []).append(p)
        return found

    @staticmethod
    def _prefix_ids(s: bytes, root: _Trie) -> list[int]:
        """The tokens that are prefixes of `s` (s is one: the walk ends on a token's node)."""
        ids: list[int] = []
        node = root
        for b in s:
            node = node.children[b]
            ids.extend(node.ids)
        return ids

    def split(self, text: bytes, parse_special: bool) -> list[Fragment]:
        if not text:
            return []
        occurrences = self._occurrences(text, parse_special)
        if not occurrences:
            return [text]
        n = len(text)
        mask = bytearray(n)
        spans: list[tuple[int, int, int]] = []  # (start, end, id)
        for tid in sorted(occurrences, key=self._order.__getitem__):  # llama.cpp's order
            size = len(self._text[tid])
            lstrip, rstrip = tid in self._lstrip, tid in self._rstrip
            pos = 0
            for p in occurrences[tid]:
                if p < pos or mask.find(1, p, p + size) >= 0:
                    continue  # overlaps the previous cut, or a cut of a token before it
                mask[p : p + size] = b"\x01" * size
                spans.append((p, p + size, tid))
                if lstrip:
                    q = p - 1
                    while q >= 0 and not mask[q] and text[q] in _SPACE:
                        mask[q] = 1
                        q -= 1
                end = p + size
                if rstrip:
                    while end < n and not mask[end] and text[end] in _SPACE:
                        mask[end] = 1
                        end += 1
                pos = end
        spans.sort()
        out: list[Fragment] = []
        cursor = 0
        for start, end, tid in spans:
            self._raw(text, mask, cursor, start, out)
            out.append(tid)
            cursor = end
        self._raw(text, mask, cursor, n, out)
        return out

    @staticmethod
    def _raw(text: bytes, mask: bytearray, start: int, end: int, out: list[Fragment]) -> None:
        """Append the unmasked runs of text[start:end] (stripped whitespace is masked)."""
        while start < end:
            a = mask.find(0, start, end)
            if a < 0:
                return
            b = mask.find(1, a, end)
            b = end if b < 0 else b
            out.append(text[a:b])
            start = b
