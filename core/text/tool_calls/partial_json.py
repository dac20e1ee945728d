"""A JSON reader for text that is still being generated.

`parse_partial(text, pos)` reads one JSON value from ``text[pos:]`` as far as it goes and
returns a tree of `Node`s with their offsets. It never raises: a value cut off by the end of
the text is marked ``complete=False``; a syntax error stops the reading there (``error`` on
the root) exactly as the end of the text would, so reading a prefix of the text never
disagrees with reading all of it. Strings carry their decoded text up to the last complete
character (a half-written escape or surrogate pair is not decoded yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WS = " \t\n\r"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_LITERALS = {"true": True, "false": False, "null": None}
_NUM_CHARS = frozenset("-+0123456789.eE")


@dataclass
class Node:
    kind: str  # "object", "array", "string", "number", "literal"
    start: int
    end: int = -1  # offset just past what was read
    complete: bool = False
    value: Any = None  # string: decoded text so far; number/literal: the value once complete
    items: list[Any] = field(default_factory=list)  # array: [Node]; object: [(key Node, value Node | None)]

    def get(self, key: str) -> Node | None:
        """An object member's value by its (complete) key."""
        for k, v in self.items:
            if k.complete and k.value == key:
                return v
        return None

    def first_key(self) -> str | None:
        if self.items and self.items[0][0].complete:
            return str(self.items[0][0].value)
        return None


class _Stop(Exception):
    """The text ended (or turned invalid) inside a value."""


@dataclass
class Result:
    node: Node | None  # None: no value started (only whitespace, or not JSON at all)
    error: bool  # reading stopped at a syntax error (not at the end of the text)
    end: int  # where reading stopped


def skip_ws(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in WS:
        pos += 1
    return pos


def parse_partial(text: str, pos: int = 0, final: bool = False) -> Result:
    """Read one JSON value at ``pos`` (after whitespace). ``final``: the text will not grow,
    so a number at its very end is complete."""
    r = _Reader(text, final)
    pos = skip_ws(text, pos)
    if pos >= len(text):
        return Result(None, False, pos)
    if text[pos] not in '{["-0123456789tfn':
        return Result(None, True, pos)
    root = r.new_node(pos)
    try:
        r.value(root)
    except _Stop:
        pass
    return Result(root, r.error, r.pos)


class _Reader:
    def __init__(self, text: str, final: bool) -> None:
        self.text = text
        self.n = len(text)
        self.final = final
        self.pos = 0
        self.error = False

    def new_node(self, pos: int) -> Node:
        self.pos = pos
        c = self.text[pos]
        kind = {"{": "object", "[": "array", '"': "string"}.get(c)
        if kind is None:
            kind = "number" if c in "-0123456789" else "literal"
        return Node(kind, pos, pos)

    def stop(self, node: Node, error: bool = False) -> None:
        node.end = self.pos
        if error:
            self.error = True
        raise _Stop

    def ws(self) -> None:
        self.pos = skip_ws(self.text, self.pos)

    def value(self, node: Node) -> None:
        {"object": self.obj, "array": self.arr, "string": self.string, "number": self.number, "literal": self.literal}[
            node.kind
        ](node)

    def child(self, parent: Node) -> Node:
        self.ws()
        if self.pos >= self.n:
            self.stop(parent)
        if self.text[self.pos] not in '{["-0123456789tfn':
            self.stop(parent, error=True)
        return self.new_node(self.pos)

    def obj(self, node: Node) -> None:
        self.pos += 1  # {
        self.ws()
        if self.pos < self.n and self.text[self.pos] == "}":
            self.pos += 1
            node.end, node.complete = self.pos, True
            return
        while True:
            self.ws()
            if self.pos >= self.n:
                self.stop(node)
            if self.text[self.pos] != '"':
                self.stop(node, error=True)
            key = Node("string", self.pos)
            entry: list[Any] = [key, None]
            node.items.append(entry)
            try:
                self.string(key)
            except _Stop:
                node.end = self.pos
                raise
            self.ws()
            if self.pos >= self.n:
                self.stop(node)
            if self.text[self.pos] != ":":
                self.stop(node, error=True)
            self.pos += 1
            val = self.child(node)
            entry[1] = val
            try:
                self.value(val)
            except _Stop:
                node.end = self.pos
                raise
            self.ws()
            if self.pos >= self.n:
                self.stop(node)
            c = self.text[self.pos]
            self.pos += 1
            if c == "}":
                node.end, node.complete = self.pos, True
                node.items = [tuple(e) for e in node.items]
                return
            if c != ",":
                self.pos -= 1
                self.stop(node, error=True)

    def arr(self, node: Node) -> None:
        self.pos += 1  # [
        self.ws()
        if self.pos < self.n and self.text[self.pos] == "]":
            self.pos += 1
            node.end, node.complete = self.pos, True
            return
        while True:
            val = self.child(node)
            node.items.append(val)
            try:
                self.value(val)
            except _Stop:
                node.end = self.pos
                raise
            self.ws()
            if self.pos >= self.n:
                self.stop(node)
            c = self.text[self.pos]
            self.pos += 1
            if c == "]":
                node.end, node.complete = self.pos, True
                return
            if c != ",":
                self.pos -= 1
                self.stop(node, error=True)

    def string(self, node: Node) -> None:
        t, n = self.text, self.n
        i = self.pos + 1  # past the opening quote
        out: list[str] = []
        while True:
            j = i
            while j < n and t[j] != '"' and t[j] != "\\":
                j += 1
            out.append(t[i:j])
            i = j
            if i >= n:
                break
            if t[i] == '"':
                node.value = "".join(out)
                self.pos = node.end = i + 1
                node.complete = True
                return
            # an escape
            if i + 1 >= n:
                break
            e = t[i + 1]
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
                i += 2
                continue
            if e != "u":
                node.value = "".join(out)
                self.pos = i
                self.stop(node, error=True)
            code = _hex4(t, i + 2)
            if code is None:
                if i + 6 > n and all(c in "0123456789abcdefABCDEF" for c in t[i + 2 : n]):
                    break  # cut off inside the escape
                node.value = "".join(out)
                self.pos = i
                self.stop(node, error=True)
            assert code is not None
            if 0xD800 <= code < 0xDC00:  # a high surrogate wants its low half
                low_at = i + 6
                if low_at + 6 > n and _could_be_escape(t[low_at:n]):
                    break  # cut off before the low half arrived
                low = _hex4(t, low_at + 2) if t[low_at : low_at + 2] == "\\u" else None
                if low is not None and 0xDC00 <= low < 0xE000:
                    out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i += 12
                    continue
                out.append("\ufffd")
                i += 6
                continue
            out.append(chr(code))
            i += 6
        node.value = "".join(out)
        self.pos = min(n, i)
        node.end = self.pos
        raise _Stop

    def number(self, node: Node) -> None:
        t, n = self.text, self.n
        j = self.pos
        while j < n and t[j] in _NUM_CHARS:
            j += 1
        raw = t[self.pos : j]
        self.pos = j
        if j >= n and not self.final:
            self.stop(node)
        try:
            node.value = float(raw) if any(c in raw for c in ".eE") else int(raw)
        except ValueError:
            self.pos = node.start
            self.stop(node, error=True)
        node.end, node.complete = j, True

    def literal(self, node: Node) -> None:
        t = self.text
        for word, val in _LITERALS.items():
            have = t[self.pos : self.pos + len(word)]
            if word.startswith(have):
                if len(have) < len(word):
                    if self.pos + len(have) >= self.n:
                        self.pos = self.n
                        self.stop(node)
                    continue
                self.pos += len(word)
                node.value, node.end, node.complete = val, self.pos, True
                return
        self.stop(node, error=True)


def _could_be_escape(s: str) -> bool:
    """``s`` (shorter than 6) may still grow into a \\uXXXX escape."""
    return "\\u0000"[: len(s)][:2] == s[:2] and all(c in "0123456789abcdefABCDEF" for c in s[2:])


def _hex4(t: str, i: int) -> int | None:
    s = t[i : i + 4]
    if len(s) == 4 and all(c in "0123456789abcdefABCDEF" for c in s):
        return int(s, 16)
    return None
