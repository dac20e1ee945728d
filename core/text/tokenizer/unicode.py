"""Code point classification and UTF-8 handling exactly as llama.cpp's src/unicode.cpp.

llama.cpp classifies code points with its own tables (copied into `_unicode_data`), which
follow a newer Unicode version than Python's `unicodedata`; every tokenizer here uses these
tables, never `unicodedata` or `str.isalpha()`.

Sets of code points are handled as sorted lists of inclusive `(first, last)` ranges so that
they can be turned into `re` character classes (see `ranges_to_class`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from llamacli.core.text.tokenizer._unicode_data import FLAG_RANGES, LOWERCASE, NFD_RANGES, WHITESPACE

MAX_CODEPOINT = 0x110000

# Category flags (llama.cpp unicode_cpt_flags); exactly one is set for every code point.
UNDEFINED = 0x0001
NUMBER = 0x0002  # \p{N}
LETTER = 0x0004  # \p{L}
SEPARATOR = 0x0008  # \p{Z}
ACCENT_MARK = 0x0010  # \p{M}
PUNCTUATION = 0x0020  # \p{P}
SYMBOL = 0x0040  # \p{S}
CONTROL = 0x0080  # \p{C}

Ranges = list[tuple[int, int]]

_FLAG_STARTS: list[int] = list(FLAG_RANGES[0::2])
_FLAG_VALUES: list[int] = list(FLAG_RANGES[1::2])
WHITESPACE_SET: frozenset[int] = frozenset(WHITESPACE)
_LOWER: dict[int, int] = dict(zip(LOWERCASE[0::2], LOWERCASE[1::2]))
_NFD_FIRST: list[int] = list(NFD_RANGES[0::3])


def category(cp: int) -> int:
    """The category flag of a code point (UNDEFINED beyond U+10FFFF)."""
    if cp >= MAX_CODEPOINT:
        return UNDEFINED
    return _FLAG_VALUES[bisect.bisect_right(_FLAG_STARTS, cp) - 1]


def is_whitespace(cp: int) -> bool:
    return cp in WHITESPACE_SET


def tolower(cp: int) -> int:
    """llama.cpp unicode_tolower: simple lowercase mapping, identity when there is none."""
    return _LOWER.get(cp, cp)


def nfd_first(cp: int) -> int:
    """llama.cpp unicode_cpts_normalize_nfd for one code point: the first code point of its NFD."""
    i = bisect.bisect_right(_NFD_FIRST, cp) - 1
    first, last, nfd = NFD_RANGES[3 * i : 3 * i + 3]
    return nfd if first <= cp <= last else cp


@lru_cache(maxsize=None)
def category_ranges(flags: int) -> tuple[tuple[int, int], ...]:
    """All code points whose category is one of `flags` (a bitwise or of category flags)."""
    out: Ranges = []
    ends = _FLAG_STARTS[1:]
    for start, end, value in zip(_FLAG_STARTS, ends, _FLAG_VALUES):
        if value & flags and end > start:
            if out and out[-1][1] == start - 1:
                out[-1] = (out[-1][0], end - 1)
            else:
                out.append((start, end - 1))
    return tuple(out)


def whitespace_ranges() -> Ranges:
    return normalize([(cp, cp) for cp in WHITESPACE])


# --- range-set algebra -------------------------------------------------------------------


def normalize(ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> Ranges:
    """Sort and merge overlapping or adjacent ranges."""
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def complement(ranges: Ranges) -> Ranges:
    out: Ranges = []
    nxt = 0
    for lo, hi in normalize(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt < MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT - 1))
    return out


def intersect(a: Ranges, b: Ranges) -> Ranges:
    a, b = normalize(a), normalize(b)
    out: Ranges = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Ranges, b: Ranges) -> Ranges:
    return intersect(a, complement(b))


def contains(ranges: Ranges, cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def _esc(cp: int) -> str:
    return f"\\x{cp:02x}" if cp < 0x100 else (f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}")


def ranges_to_class(ranges: Ranges) -> str:
    """A `re` character class matching exactly these code points ('(?!)' when empty)."""
    ranges = normalize(ranges)
    if not ranges:
        return "(?!)"
    if ranges == [(0, MAX_CODEPOINT - 1)]:
        return "[\\x00-\\U0010ffff]"
    parts = [_esc(lo) if lo == hi else f"{_esc(lo)}-{_esc(hi)}" for lo, hi in ranges]
    return "[" + "".join(parts) + "]"


# --- UTF-8 as llama.cpp reads it ---------------------------------------------------------


def utf8_len(lead: int) -> int:
    """llama.cpp unicode_len_utf8: sequence length from the lead byte's high nibble."""
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]


def decode_utf8(data: bytes) -> str:
    """llama.cpp unicode_cpts_from_utf8 as a str.

    Valid UTF-8 decodes as usual. Otherwise llama.cpp's lenient decoder is emulated: it accepts
    overlong forms and surrogates, and turns each byte that starts no valid sequence into
    U+FFFD. Code points beyond U+10FFFF (which llama.cpp cannot re-encode) become U+FFFD too.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out: list[str] = []
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        cp = -1
        if b < 0x80:
            cp, size = b, 1
        elif b & 0x40 == 0:
            size = 1
        else:
            size = 2 if b & 0x20 == 0 else 3 if b & 0x10 == 0 else 4 if b & 0x08 == 0 else 0
            if size and i + size <= n and all(data[i + k] & 0xC0 == 0x80 for k in range(1, size)):
                cp = b & (0x1F, 0x0F, 0x07)[size - 2]
                for k in range(1, size):
                    cp = (cp << 6) | (data[i + k] & 0x3F)
            else:
                size = 1
        if cp < 0:
            out.append("\ufffd")
        else:
            out.append(chr(cp) if cp < MAX_CODEPOINT else "\ufffd")
        i += size
    return "".join(out)


def utf8_ends(text: str, parts: Sequence[str]) -> np.ndarray:
    """Where each part ends in the UTF-8 of `text` (int64 byte offsets); the parts must
    tile `text` (their concatenation is `text`)."""
    ends = np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)))
    if len(parts) and int(ends[-1]) != len(text):
        raise ValueError("the parts do not tile the text")
    if text.isascii():
        return ends
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    width = 1 + (cps >= 0x80).astype(np.int64) + (cps >= 0x800) + (cps >= 0x10000)
    offsets = np.zeros(len(cps) + 1, np.int64)
    np.cumsum(width, out=offsets[1:])
    return offsets[ends]


def encode_utf8(text: str) -> bytes:
    """UTF-8 bytes of a str that may hold lone surrogates (llama.cpp encodes them plainly)."""
    return text.encode("utf-8", "surrogatepass")


# --- GPT-2 byte-level alphabet (unicode_byte_to_utf8_map) --------------------------------


def _byte_alphabet() -> list[str]:
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table: dict[int, str] = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return [table[b] for b in range(256)]


BYTE_TO_CHAR: list[str] = _byte_alphabet()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
# str.translate table: a latin-1 decoded byte string -> its byte-level alphabet spelling
BYTE_ENCODE_TABLE: dict[int, str] = {b: c for b, c in enumerate(BYTE_TO_CHAR)}


def byte_encode(word: str) -> str:
    """unicode_byte_encoding_process for one word: each UTF-8 byte -> its alphabet char."""
    return encode_utf8(word).decode("latin-1").translate(BYTE_ENCODE_TABLE)
