"""Translate llama.cpp's pre-tokenizer regexes into Python `re` patterns with the same matches.

llama.cpp runs regexes it has no hand-written splitter for through std::regex, on a rewritten
text (src/unicode.cpp, unicode_regex_split):

* "collapsed" mode, when the regex uses `\\p{..}`: every code point >= 128 is replaced by one
  byte standing for its class (whitespace -> \\v, number -> 0xD1, letter -> 0xD2, punctuation
  -> 0xD3, mark -> 0xD4, symbol -> 0xD5, anything else -> 0xD0) and `\\p{X}` becomes
  `[<class byte><ASCII members>]`; ASCII is left as is.
* "wide" mode otherwise: std::wregex on the code points, with non-ASCII whitespace replaced
  by \\v.

In both modes std::regex's `\\s` is C-locale ASCII whitespace and `\\d` is 0-9. A match
against the rewritten text at some position is the same as a match against the original text
where each class is replaced by its preimage: the code points whose rewritten form is in the
class. We compute those preimages as explicit code point ranges, so the Python pattern runs
on the original text and needs no rewriting pass.
"""

from __future__ import annotations

from llamacli.core.errors import TokenizerError
from llamacli.core.text.tokenizer import unicode as U

_ASCII_SPACE: U.Ranges = [(0x09, 0x0D), (0x20, 0x20)]  # C isspace
_ASCII_DIGIT: U.Ranges = [(0x30, 0x39)]
_ASCII_WORD: U.Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]

_UCAT_FLAG = {
    "N": U.NUMBER,
    "L": U.LETTER,
    "P": U.PUNCTUATION,
    "M": U.ACCENT_MARK,
    "S": U.SYMBOL,
    "Lu": U.LETTER,
    "Ll": U.LETTER,
    "Lt": U.LETTER,
    "Lm": U.LETTER,
    "Lo": U.LETTER,
}
_UCAT_BYTE = {U.NUMBER: 0xD1, U.LETTER: 0xD2, U.PUNCTUATION: 0xD3, U.ACCENT_MARK: 0xD4, U.SYMBOL: 0xD5}
# k_ucat_map: the ASCII members of each class in collapsed regexes
_UCAT_ASCII: dict[int, U.Ranges] = {
    U.NUMBER: [(0x30, 0x39)],
    U.LETTER: [(0x41, 0x5A), (0x61, 0x7A)],
    U.PUNCTUATION: [(0x21, 0x23), (0x25, 0x2A), (0x2C, 0x2F), (0x3A, 0x3B), (0x3F, 0x40),
                    (0x5B, 0x5D), (0x5F, 0x5F), (0x7B, 0x7B), (0x7D, 0x7D)],
    U.ACCENT_MARK: [],
    U.SYMBOL: [(0x24, 0x24), (0x2B, 0x2B), (0x3C, 0x3E), (0x5E, 0x5E), (0x60, 0x60),
               (0x7C, 0x7C), (0x7E, 0x7E)],
}

_NON_ASCII: U.Ranges = [(0x80, U.MAX_CODEPOINT - 1)]


def _non_ascii_whitespace() -> U.Ranges:
    return U.intersect(U.whitespace_ranges(), _NON_ASCII)


def _collapse_group(byte: int) -> U.Ranges:
    """Non-ASCII code points that collapse to `byte`."""
    nws_non_ascii = U.subtract(_NON_ASCII, _non_ascii_whitespace())
    if byte == 0x0B:
        return _non_ascii_whitespace()
    for flag, b in _UCAT_BYTE.items():
        if b == byte:
            return U.intersect(nws_non_ascii, list(U.category_ranges(flag)))
    if byte == 0xD0:
        known = 0
        for flag in _UCAT_BYTE:
            known |= flag
        return U.subtract(nws_non_ascii, list(U.category_ranges(known)))
    return []


def preimage(rewritten: U.Ranges, collapsed: bool) -> U.Ranges:
    """Original code points whose rewritten form lies in `rewritten`."""
    rewritten = U.normalize(rewritten)
    naws = _non_ascii_whitespace()
    if collapsed:
        out = U.intersect(rewritten, [(0, 0x7F)])
        for byte in (0x0B, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5):
            if U.contains(rewritten, byte):
                out += _collapse_group(byte)
        return U.normalize(out)
    out = U.subtract(rewritten, naws)
    if U.contains(rewritten, 0x0B):
        out += naws
    return U.normalize(out)


class _Parser:
    """Recursive-descent over the ECMAScript subset that llama.cpp's regexes use."""

    def __init__(self, pattern: str, collapsed: bool) -> None:
        self.p = pattern
        self.i = 0
        self.collapsed = collapsed

    def fail(self, why: str) -> TokenizerError:
        return TokenizerError(f"cannot translate pre-tokenizer regex {self.p!r}: {why}")

    def _ucat(self) -> U.Ranges:
        # at "\p{"; returns the rewritten-domain set of the class
        end = self.p.index("}", self.i)
        name = self.p[self.i + 3 : end]
        self.i = end + 1
        if name not in _UCAT_FLAG:
            raise self.fail(f"unsupported class \\p{{{name}}}")
        if not self.collapsed:
            raise self.fail("\\p{} in wide mode")
        flag = _UCAT_FLAG[name]
        return [(_UCAT_BYTE[flag], _UCAT_BYTE[flag])] + _UCAT_ASCII[flag]

    def _escape(self) -> tuple[U.Ranges, bool]:
        """At a backslash: (rewritten set, is_class_escape)."""
        c = self.p[self.i + 1]
        if c == "p" and self.p[self.i + 2 : self.i + 3] == "{":
            return self._ucat(), True
        self.i += 2
        simple = {"s": _ASCII_SPACE, "d": _ASCII_DIGIT, "w": _ASCII_WORD}
        if c in simple:
            return simple[c], True
        if c.lower() in simple:
            return U.complement(simple[c.lower()]), True
        named = {"r": 0x0D, "n": 0x0A, "t": 0x09, "f": 0x0C, "v": 0x0B, "0": 0}
        if c in named:
            return [(named[c], named[c])], False
        if c.isalnum():
            raise self.fail(f"unsupported escape \\{c}")
        return [(ord(c), ord(c))], False

    def _char_class(self) -> str:
        # at "["
        self.i += 1
        negate = self.p[self.i] == "^"
        if negate:
            self.i += 1
        items: U.Ranges = []
        first = True
        while True:
            if self.i >= len(self.p):
                raise self.fail("unterminated [")
            c = self.p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if c == "\\":
                lo_set, is_class = self._escape()
            else:
                lo_set, is_class = [(ord(c), ord(c))], False
                self.i += 1
            if not is_class and self.p[self.i] == "-" and self.p[self.i + 1] != "]":
                self.i += 1
                if self.p[self.i] == "\\":
                    hi_set, hi_class = self._escape()
                    if hi_class:
                        raise self.fail("class escape as range end")
                else:
                    hi_set = [(ord(self.p[self.i]), ord(self.p[self.i]))]
                    self.i += 1
                items.append((lo_set[0][0], hi_set[0][0]))
            else:
                items.extend(lo_set)
        ranges = preimage(items, self.collapsed)
        if negate:
            ranges = U.complement(ranges)
        return U.ranges_to_class(ranges)

    def translate(self) -> str:
        out: list[str] = []
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == "[":
                out.append(self._char_class())
            elif c == "\\":
                ranges, _ = self._escape()
                out.append(U.ranges_to_class(preimage(ranges, self.collapsed)))
            elif c == "(":
                if p.startswith("(?:", self.i) or p.startswith("(?=", self.i) or p.startswith("(?!", self.i):
                    out.append(p[self.i : self.i + 3])
                    self.i += 3
                elif p.startswith("(?", self.i):
                    raise self.fail("unsupported group syntax")
                else:
                    out.append("(?:")
                    self.i += 1
            elif c in ")|*+?":
                out.append(c)
                self.i += 1
            elif c == "{":
                end = p.index("}", self.i)
                out.append(p[self.i : end + 1])
                self.i = end + 1
            elif c == "$":
                out.append("\\Z")
                self.i += 1
            elif c == "^":
                out.append("\\A")
                self.i += 1
            elif c == ".":
                raise self.fail("'.' is not supported")
            else:
                cp = ord(c)
                if self.collapsed and cp >= 0x80:
                    raise self.fail("non-ASCII literal next to unicode classes")
                pre = preimage([(cp, cp)], self.collapsed)
                out.append(U.ranges_to_class(pre) if pre != [(cp, cp)] else _literal(c))
                self.i += 1
        return "".join(out)


def _literal(c: str) -> str:
    return U.ranges_to_class([(ord(c), ord(c))]) if not (c.isalnum() or c in " '_") else c


def translate(pattern: str) -> str:
    """Python `re` source equivalent to llama.cpp's treatment of `pattern`."""
    collapsed = any(f"\\p{{{name}}}" in pattern for name in _UCAT_FLAG)
    return _Parser(pattern, collapsed).translate()
