"""llama-server's glob patterns (common.cpp `glob_match`): `*` matches within one path part,
`**` across parts, `?` one character but `/`, `[a-z]` / `[!a-z]` a character class (a `]` or
`-` first in the class is literal, a `[` without its `]` is literal).

llama-server matches by recursion, which takes exponential time on patterns like `**a**a**a`;
this is the same language matched by walking all pattern positions at once over the text
(a set of NFA states), so a match costs at most len(pattern) x len(text) steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class _Tok:
    kind: str  # "lit", "any" (?), "star" (*), "globstar" (**), "class"
    text: str = ""  # the literal character, or the class body
    negated: bool = False


@lru_cache(maxsize=256)
def _compile(pattern: str) -> tuple[_Tok, ...]:
    out: list[_Tok] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(_Tok("globstar"))
            i += 2
        elif c == "*":
            out.append(_Tok("star"))
            i += 1
        elif c == "?":
            out.append(_Tok("any"))
            i += 1
        elif c == "[":
            end = i + 1
            if end < len(pattern) and pattern[end] in "]-":
                end += 1
            end = pattern.find("]", end)
            if end < 0:
                out.append(_Tok("lit", "["))
                i += 1
                continue
            body = pattern[i + 1 : end]
            negated = body.startswith("!")
            out.append(_Tok("class", body[1:] if negated else body, negated))
            i = end + 1
        else:
            out.append(_Tok("lit", c))
            i += 1
    return tuple(out)


def _in_class(c: str, body: str) -> bool:
    j = 0
    if body[:1] in ("]", "-"):  # literal when first
        if body[0] == c:
            return True
        j = 1
    while j < len(body):
        if j + 2 < len(body) and body[j + 1] == "-" and body[j + 2] != "]":
            if body[j] <= c <= body[j + 2]:
                return True
            j += 3
        else:
            if body[j] == c:
                return True
            j += 1
    return False


def _closure(toks: tuple[_Tok, ...], states: set[int]) -> set[int]:
    """States plus those reached by letting `*`/`**` match nothing."""
    out = set(states)
    stack = list(states)
    while stack:
        s = stack.pop()
        if s < len(toks) and toks[s].kind in ("star", "globstar") and s + 1 not in out:
            out.add(s + 1)
            stack.append(s + 1)
    return out


def glob_match(pattern: str, text: str) -> bool:
    """Whether `text` matches `pattern` as a whole."""
    toks = _compile(pattern)
    states = _closure(toks, {0})
    for c in text:
        nxt: set[int] = set()
        for s in states:
            if s >= len(toks):
                continue
            t = toks[s]
            if t.kind == "globstar" or (t.kind == "star" and c != "/"):
                nxt.add(s)  # the star eats c and stays
            elif t.kind == "any":
                if c != "/":
                    nxt.add(s + 1)
            elif t.kind == "class":
                if _in_class(c, t.text) != t.negated:
                    nxt.add(s + 1)
            elif t.text == c:
                nxt.add(s + 1)
        if not nxt:
            return False
        states = _closure(toks, nxt)
    return len(toks) in states


def path_glob_match(pattern: str, rel_path: str) -> bool:
    """llama-server's rule for include/exclude: a pattern without `/` matches the file's name at
    any depth; one with `/` matches the whole relative path, anchored with `**/` unless it
    already starts with `**` or `/`."""
    if "/" not in pattern:
        return glob_match(pattern, rel_path.rsplit("/", 1)[-1])
    if pattern == "**" or pattern.startswith("**/") or pattern.startswith("/"):
        return glob_match(pattern, rel_path)
    return glob_match("**/" + pattern, rel_path)
