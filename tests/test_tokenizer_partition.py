"""The special-token split (core/text/tokenizer/partition.py) against llama.cpp's
tokenizer_st_partition written out: tokens that overlap, tokens that are prefixes of others,
LSTRIP/RSTRIP whitespace, control tokens only with parse_special."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import numpy as np

from llamacli.core.text.tokenizer.partition import SpecialPartitioner
from llamacli.core.text.tokenizer.vocab import ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_USER_DEFINED

# (text, attributes): overlapping pairs ("<a>b" / "b|"), prefixes ("<a" < "<a>" < "<a>b"),
# whitespace stripping on either side, control tokens that only parse_special cuts
_TOKENS = [
    ("<a>b", ATTR_USER_DEFINED),
    ("<a>", ATTR_CONTROL | ATTR_RSTRIP),
    ("<a", ATTR_USER_DEFINED | ATTR_LSTRIP),
    ("b|", ATTR_USER_DEFINED),
    ("|x|", ATTR_CONTROL | ATTR_LSTRIP | ATTR_RSTRIP),
    ("x", ATTR_CONTROL),
    ("  ", ATTR_USER_DEFINED),
]


def _vocab() -> Any:
    tokens = ["<unk>"] + [t for t, _ in _TOKENS]
    attrs = np.array([0] + [a for _, a in _TOKENS], dtype=np.int32)
    # llama.cpp's processing order: longest first (ties: lower id first)
    special = sorted(range(1, len(tokens)), key=lambda i: (-len(tokens[i].encode()), i))
    return SimpleNamespace(tokens=tokens, attrs=attrs, special_ids=special)


def _reference(vocab: Any, text: bytes, parse_special: bool) -> list[bytes | int]:
    """llama.cpp's tokenizer_st_partition: a list of fragments (raw spans of text or ids),
    each token cutting every raw fragment at its leftmost occurrences, in turn."""
    frags: list[tuple[int, int] | int] = [(0, len(text))] if text else []
    for tid in vocab.special_ids:
        attr = int(vocab.attrs[tid])
        if attr & ATTR_CONTROL and not parse_special:
            continue
        tok = vocab.tokens[tid].encode()
        out: list[tuple[int, int] | int] = []
        for f in frags:
            if isinstance(f, int):
                out.append(f)
                continue
            off, length = f
            while True:
                m = text.find(tok, off)
                if m < 0 or m + len(tok) > off + length:
                    out.append((off, length))
                    break
                left = m - off
                if attr & ATTR_LSTRIP:
                    while left > 0 and text[off + left - 1] in b" \t\n\v\f\r":
                        left -= 1
                if left > 0:
                    out.append((off, left))
                out.append(tid)
                r_off, r_len = m + len(tok), off + length - m - len(tok)
                if attr & ATTR_RSTRIP:
                    while r_len > 0 and text[r_off] in b" \t\n\v\f\r":
                        r_off, r_len = r_off + 1, r_len - 1
                if r_len <= 0:
                    break
                off, length = r_off, r_len
        frags = [f for f in out if isinstance(f, int) or f[1] > 0]
    return [f if isinstance(f, int) else text[f[0] : f[0] + f[1]] for f in frags]


def test_split_is_llama_cpp_partition_on_overlapping_and_prefix_tokens() -> None:
    vocab = _vocab()
    part = SpecialPartitioner(vocab)
    rng = random.Random(5)
    pieces = ["<", "a", ">", "b", "|", "x", " ", "\n", "<a>b|", "|x|", "ab"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 24))).encode()
        for parse_special in (False, True):
            assert part.split(text, parse_special) == _reference(vocab, text, parse_special), (text, parse_special)


def test_split_of_a_text_holding_many_distinct_tokens() -> None:
    """A text holding a thousand distinct special tokens, each several times (the split used
    to search the whole text once per token it held): the same fragments as llama.cpp's."""
    names = [f"<tok{i}>" for i in range(1000)] + [f"<tok{i}" for i in range(0, 1000, 7)]
    tokens = ["<unk>"] + names
    attrs = np.array([0] + [ATTR_USER_DEFINED | (ATTR_RSTRIP if i % 3 == 0 else 0) for i in range(len(names))], dtype=np.int32)
    special = sorted(range(1, len(tokens)), key=lambda i: (-len(tokens[i].encode()), i))
    vocab = SimpleNamespace(tokens=tokens, attrs=attrs, special_ids=special)
    rng = random.Random(7)
    text = "".join(rng.choice(names) + rng.choice(["", " ", " w ", "<", "tok"]) for _ in range(5000)).encode()
    assert SpecialPartitioner(vocab).split(text, False) == _reference(vocab, text, False)  # type: ignore[arg-type]
