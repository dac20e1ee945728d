"""BPE pre-tokenization: split text into words exactly as llama.cpp's unicode_regex_split.

Each pre-tokenizer type has a list of regexes (`_pre_regexes`). llama.cpp runs the common
ones (GPT-2, Llama 3, Qwen2, Qwen3.5, newline runs) through hand-written splitters that use
its own code point tables, and the rest through std::regex on a rewritten text. We express
the hand-written splitters as Python regexes over explicit code point classes built from the
same tables (equivalence argued per branch below), and translate the others with
`regex_translate`. Regex i splits every piece that regex i-1 produced: each match becomes a
piece, and so does each run of unmatched text between matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from llamacli.core.errors import TokenizerError
from llamacli.core.text.tokenizer import unicode as U
from llamacli.core.text.tokenizer._pre_regexes import _REGEXES
from llamacli.core.text.tokenizer.regex_translate import translate

_CONTRACTIONS_CI = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_TAIL = "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
LLAMA3 = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" + _TAIL,
    _CONTRACTIONS_CI + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" + _TAIL,
)
QWEN2 = _CONTRACTIONS_CI + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" + _TAIL
QWEN35 = (
    _CONTRACTIONS_CI
    + "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    + _TAIL
)
NEWLINES = "[^\\n]+|[\\n]+"
KIMI_K2 = "\\p{Han}+"  # stands for the whole Kimi-K2 pattern (unicode_regex_split_custom_kimi_k2)
DIGIT_GROUPS = ("\\p{AFMoE_digits}", "\\d{1,3}(?=(?:\\d{3})*\\b)")  # unicode_regex_split_custom_afmoe
THOUSANDS = "(?=(\\d{3})+(?!\\d))"  # SuperBPE: an empty word before each 3 digits from a run's end
# unicode_cpt_is_han
_HAN: U.Ranges = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
                  (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def _cls(ranges: U.Ranges) -> str:
    return U.ranges_to_class(ranges)


def _custom(regex: str) -> str | None:
    """Python source for llama.cpp's hand-written splitters (unicode_regex_split_custom_*).

    The splitters test llama.cpp's flags: `is_whitespace` (its White_Space list, so also
    U+001C..U+001F are not whitespace but U+0085 is), `is_letter`, `is_number`,
    `is_accent_mark`. Written as regexes over those exact sets, each branch of the C++ code is
    the corresponding alternative: the contractions only match ASCII letters (no non-ASCII
    code point lowercases to s, t, r, e, v, m, l or d); `\\s+(?!\\S)` takes a whitespace run
    minus its last character unless the run ends the piece; `\\s*[\\r\\n]+` ends after the
    run's last CR/LF; a lone trailing space becomes its own word in both.
    """
    ws = U.whitespace_ranges()
    L = list(U.category_ranges(U.LETTER))
    N = list(U.category_ranges(U.NUMBER))
    M = list(U.category_ranges(U.ACCENT_MARK))
    W, NW = _cls(ws), _cls(U.complement(ws))
    Lc, Nc, LMc = _cls(L), _cls(N), _cls(L + M)
    not_wln = _cls(U.complement(ws + L + N))
    not_crlf_ln = _cls(U.complement([(0x0A, 0x0A), (0x0D, 0x0D)] + L + N))
    tail = f"|{W}*[\\r\\n]+|{W}+(?!{NW})|{W}+"
    if regex == GPT2:
        return f"'s|'t|'re|'ve|'m|'ll|'d| ?{Lc}+| ?{Nc}+| ?{not_wln}+|{W}+(?!{NW})|{W}+"
    if regex in LLAMA3:
        return f"{_CONTRACTIONS_CI}|{not_crlf_ln}?{Lc}+|{Nc}{{1,3}}| ?{not_wln}+[\\r\\n]*{tail}"
    if regex == QWEN2:
        return f"{_CONTRACTIONS_CI}|{not_crlf_ln}?{Lc}+|{Nc}| ?{not_wln}+[\\r\\n]*{tail}"
    if regex == QWEN35:
        not_wlmn = _cls(U.complement(ws + L + M + N))
        return f"{_CONTRACTIONS_CI}|{not_crlf_ln}?{LMc}+|{Nc}| ?{not_wlmn}+[\\r\\n]*{tail}"
    if regex == NEWLINES:
        return "[^\\n]+|\\n+"
    if regex == KIMI_K2:
        # Han runs first; letter words exclude Han and take an optional contraction; the
        # C++ never backtracks out of the letter branch once it has decided to enter it.
        han = _cls(_HAN)
        letters = _cls(U.subtract(L, _HAN))
        return (f"{han}+|{not_crlf_ln}?{letters}+(?:{_CONTRACTIONS_CI})?|{Nc}{{1,3}}"
                f"| ?{not_wln}+[\\r\\n]*{tail}")
    return None


def _thousands(text: str, start: int, end: int, out: list[tuple[int, int]]) -> None:
    """THOUSANDS on one piece, in one pass (the regex rescans the run at every position):
    an empty match at each p in an ASCII digit run with (run end - p) a multiple of 3, the
    text between matches a piece of its own."""
    prev = start
    for m in _ascii_digit_run().finditer(text, start, end):
        a, b = m.span()
        for p in range(a + (b - a) % 3, b, 3):
            if p > prev:
                out.append((prev, p))
            out.append((p, p))
            prev = p
    if prev < end:
        out.append((prev, end))


@lru_cache(maxsize=None)
def _ascii_digit_run() -> re.Pattern[str]:
    return re.compile("[0-9]+")


def _digit_groups(text: str, start: int, end: int, out: list[tuple[int, int]]) -> None:
    """unicode_regex_split_custom_afmoe on one piece: each run of \\p{N} splits as its
    length mod 3 first, then threes; text before a run joins the run's first group."""
    prev = start
    for m in _number_run().finditer(text, start, end):
        a, b = m.span()
        cut = a + (b - a) % 3
        if cut == a:
            cut += 3
        while cut <= b:
            out.append((prev, cut))
            prev = cut
            cut += 3
    if prev < end:
        out.append((prev, end))


@lru_cache(maxsize=None)
def _number_run() -> re.Pattern[str]:
    return re.compile(_cls(list(U.category_ranges(U.NUMBER))) + "+")


@lru_cache(maxsize=None)
def compile_regex(regex: str) -> tuple[re.Pattern[str], bool]:
    """(pattern, covers_all): covers_all when every character is always inside a match."""
    custom = _custom(regex)
    if custom is not None:
        return re.compile(custom), True
    return re.compile(translate(regex)), False


# regexes split by a function (text, start, end, out) instead
_SPLITTERS = {DIGIT_GROUPS[0]: _digit_groups, DIGIT_GROUPS[1]: _digit_groups, THOUSANDS: _thousands}


@dataclass
class PreTokenizer:
    """The word splitter of one llama.cpp pre-tokenizer type."""

    name: str
    regexes: tuple[str, ...]
    byte_encode: bool

    def __post_init__(self) -> None:
        compiled = [None if r in _SPLITTERS else compile_regex(r) for r in self.regexes]
        self._patterns = [c[0] if c else _SPLITTERS[r] for c, r in zip(compiled, self.regexes)]
        # one regex that covers the whole text: its findall is the split
        first = compiled[0] if len(compiled) == 1 else None
        self._single: re.Pattern[str] | None = first[0] if first is not None and first[1] else None

    def split(self, text: str) -> list[str]:
        """The words of `text` (code points; byte-level encoding is the caller's job)."""
        if not text:
            return []
        if self._single is not None:
            return self._single.findall(text)
        pieces = [(0, len(text))]
        for pat in self._patterns:
            out: list[tuple[int, int]] = []
            append = out.append
            if not isinstance(pat, re.Pattern):
                for start, end in pieces:
                    pat(text, start, end, out)
                pieces = out
                continue
            for start, end in pieces:
                prev = start
                for m in pat.finditer(text, start, end):
                    a, b = m.span()
                    if a > prev:
                        append((prev, a))
                    append((a, b))
                    prev = b
                if prev < end:
                    append((prev, end))
            pieces = out
        return [text[a:b] for a, b in pieces]


def pretokenizer_for(pre_type: str) -> PreTokenizer:
    """The splitter for a llama.cpp pre-tokenizer type name (e.g. 'LLAMA3', 'GPT2')."""
    if pre_type not in _REGEXES:
        raise TokenizerError(f"no pre-tokenizer regexes for type {pre_type!r}")
    byte_encode = pre_type not in ("GEMMA4", "SARVAM_MOE", "WHITESPACE")
    return PreTokenizer(pre_type, _REGEXES[pre_type], byte_encode)
