"""Split text around special tokens before the model tokenizes it (llama.cpp
tokenizer_st_partition).

llama.cpp takes the special tokens longest first and, for each, cuts every remaining text
fragment at the token's leftmost non-overlapping occurrences, optionally stripping the
whitespace (C isspace) left of an LSTRIP token and right of an RSTRIP token. Control and
unknown tokens only take part when `parse_special` is set; user-defined tokens always do.

Rather than a list of fragments, we keep one byte mask over the text (0 = still raw text,
1 = consumed by a token or stripped); a fragment is then a maximal run of zeros, and an
occurrence lies inside one fragment exactly when its bytes are all zero. Scanning with
bytes.find and the mask gives the same cuts as llama.cpp's per-fragment loop. Only the
special tokens that occur in the text at all are tried, found with a prefix tree walk.
"""

from __future__ import annotations

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

    def _trie(self, ids: list[int]) -> _Trie:
        root = _Trie()
        for tid in ids:
            node = root
            for b in self._text[tid]:
                node = node.children.setdefault(b, _Trie())
            node.ids.append(tid)
        return root

    def _present(self, text: bytes, root: _Trie) -> list[int]:
        """Special tokens occurring anywhere in `text`, in llama.cpp's processing order."""
        found: list[int] = []
        stack: list[tuple[bytes, _Trie]] = [(b"", root)]
        while stack:
            prefix, node = stack.pop()
            for b, child in node.children.items():
                p = prefix + bytes((b,))
                if p in text:
                    found.extend(child.ids)
                    stack.append((p, child))
        found.sort(key=self._order.__getitem__)
        return found

    def split(self, text: bytes, parse_special: bool) -> list[Fragment]:
        if not text:
            return []
        present = self._present(text, self._tries[parse_special])
        if not present:
            return [text]
        n = len(text)
        mask = bytearray(n)
        spans: list[tuple[int, int, int]] = []  # (start, end, id)
        for tid in present:
            tok = self._text[tid]
            size = len(tok)
            lstrip, rstrip = tid in self._lstrip, tid in self._rstrip
            pos = 0
            while True:
                p = text.find(tok, pos)
                if p < 0:
                    break
                blocked = mask.find(1, p, p + size)
                if blocked >= 0:
                    pos = mask.find(0, blocked)
                    if pos < 0:
                        break
                    continue
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
