"""Bounds on one output constraint, checked before llguidance sees it.

llguidance compiles a grammar recursively in native code: a long enough chain of rules or of
`$ref`s overflows any stack, and a huge alternation takes minutes. Compilation runs on threads
with a large stack (`worker.py`) and the input is bounded here so that what reaches them fits:

    check_limits(spec)        # GrammarError naming the bound that was passed

- ``max_bytes``: the grammar text (a JSON schema as its canonical JSON text);
- ``max_rules``: rule definitions of a GBNF or Lark grammar (llguidance's GBNF converter takes
  time that grows faster than the square of a chain of rules);
- ``max_depth``: bracket nesting of a grammar or regex, container nesting of a JSON schema;
- ``timeout_s``: wall time a caller waits for the compilation (`compile_grammar`).

The scans here are linear and use no recursion: they run on the caller's thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llamacli.core.text.grammar.spec import GrammarError, GrammarSpec


@dataclass(frozen=True)
class GrammarLimits:
    max_bytes: int = 256 * 1024
    max_rules: int = 1000
    max_depth: int = 100
    timeout_s: float = 20.0


DEFAULT_LIMITS = GrammarLimits()

# What cannot hold a bracket that nests: strings, character classes, regex literals, comments.
_GBNF_OPAQUE = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|#[^\n]*')
_LARK_OPAQUE = re.compile(r'"(?:\\.|[^"\\\n])*"i?|/(?:\\.|[^/\\\n])+/[imslux]*|//[^\n]*')
_REGEX_OPAQUE = re.compile(r"\\.|\[(?:\\.|[^\]\\])*\]")
_GBNF_RULE = re.compile(r"^[ \t]*[A-Za-z0-9_.-]+[ \t]*::=", re.MULTILINE)
_LARK_RULE = re.compile(r"^[ \t]*[?!]?[A-Za-z_][A-Za-z0-9_]*(?:\.-?[0-9]+)?[ \t]*:", re.MULTILINE)
_LARK_SYNTAX = re.compile(r"(?m)^\s*(%llguidance\b|start\s*:)")  # llguidance.gbnf_to_lark.is_lark_syntax


def check_limits(spec: GrammarSpec, limits: GrammarLimits = DEFAULT_LIMITS) -> None:
    """Raise `GrammarError` when ``spec`` passes one of ``limits``."""
    what = spec.describe()
    size = len(spec.source.encode("utf-8"))
    if size > limits.max_bytes:
        raise GrammarError(f"the {what} is {size} bytes; at most {limits.max_bytes} are accepted")
    if spec.kind == "json_schema":
        try:
            depth = json_depth(spec.schema)
        except RecursionError:  # deeper than the JSON decoder goes
            depth = limits.max_depth + 1
        if depth > limits.max_depth:
            raise GrammarError(f"the {what} is nested {depth} levels deep; at most {limits.max_depth} are accepted")
        return
    if spec.kind == "llguidance":  # built by this program, not by a request
        return
    lark = spec.kind == "lark" or (spec.kind == "gbnf" and _LARK_SYNTAX.search(spec.source) is not None)
    if spec.kind == "regex":
        opaque, rules = _REGEX_OPAQUE, None
    else:
        opaque, rules = (_LARK_OPAQUE, _LARK_RULE) if lark else (_GBNF_OPAQUE, _GBNF_RULE)
    bare = opaque.sub(" ", spec.source)
    if rules is not None:
        n = len(rules.findall(bare))
        if n > limits.max_rules:
            raise GrammarError(f"the {what} defines {n} rules; at most {limits.max_rules} are accepted")
    depth = bracket_depth(bare)
    if depth > limits.max_depth:
        raise GrammarError(f"the {what} nests brackets {depth} levels deep; at most {limits.max_depth} are accepted")


def bracket_depth(text: str) -> int:
    """The deepest nesting of (), [] and {} in ``text`` (unbalanced closers are ignored)."""
    depth = deepest = 0
    for m in re.finditer(r"[(\[{]|[)\]}]", text):
        if m.group() in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


def json_depth(value: Any) -> int:
    """The container nesting of a decoded JSON value (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            items: Any = v.values()
        elif isinstance(v, list):
            items = v
        else:
            continue
        deepest = max(deepest, d)
        stack.extend((x, d + 1) for x in items if isinstance(x, (dict, list)))
    return deepest
