"""Tokenizer pieces on small synthetic vocabularies: no model files needed."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from llamacli.core.errors import TokenizerError
from llamacli.core.text.tokenizer import IncrementalDecoder, Vocab, load_tokenizer
from llamacli.core.text.tokenizer import unicode as U
from llamacli.core.text.tokenizer.pretokenize import pretokenizer_for
from llamacli.core.text.tokenizer.regex_translate import translate
from llamacli.core.text.tokenizer.tokenizer import _CLEAN_CONTRACTION, _CLEAN_PUNCT, _CLEAN_QUOTE
from llamacli.core.text.tokenizer.vocab import ATTR_CONTROL, ATTR_UNUSED


def spm_metadata(pieces: list[tuple[str, float, int]], **extra: object) -> dict:
    """An SPM vocab: <unk> <s> </s>, the 256 byte tokens, then `pieces` (text, score, type)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    types = [2, 3, 3] + [6] * 256
    for text, score, ttype in pieces:
        tokens.append(text)
        scores.append(score)
        types.append(ttype)
    md = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": np.array(scores, dtype=np.float32),
        "tokenizer.ggml.token_type": np.array(types, dtype=np.int32),
    }
    md.update(extra)
    return md


def bpe_metadata(words: list[str], merges: list[str], pre: str = "gpt-2", **extra: object) -> dict:
    tokens = [U.BYTE_TO_CHAR[b] for b in range(256)] + words + ["<|endoftext|>"]
    md = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": np.array([1] * (len(tokens) - 1) + [3], dtype=np.int32),
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": len(tokens) - 1,
        "tokenizer.ggml.eos_token_id": len(tokens) - 1,
    }
    md.update(extra)
    return md


# --- loading --------------------------------------------------------------------------------


def test_unknown_model_is_named() -> None:
    with pytest.raises(TokenizerError, match="'rwkv'"):
        load_tokenizer({"tokenizer.ggml.model": "rwkv", "tokenizer.ggml.tokens": ["a"]})


def test_unknown_pre_tokenizer_is_named() -> None:
    with pytest.raises(TokenizerError, match="'no-such-pre'"):
        load_tokenizer(bpe_metadata([], [], pre="no-such-pre"))


def test_unsupported_model_is_named() -> None:
    with pytest.raises(TokenizerError, match="'hybriddna'"):
        load_tokenizer(bpe_metadata([], [], **{"tokenizer.ggml.model": "hybriddna"}))


def test_missing_merges() -> None:
    md = bpe_metadata([], [])
    del md["tokenizer.ggml.merges"]
    with pytest.raises(TokenizerError, match="merges"):
        load_tokenizer(md)


def test_vocab_flags_and_special_detection() -> None:
    md = spm_metadata([("<end_of_turn>", 0.0, 1), ("<unused3>", 0.0, 3), ("▁a", -1.0, 1)])
    v = Vocab.from_metadata(md)
    assert (v.kind, v.bos, v.eos, v.unk, v.add_bos, v.add_space_prefix) == ("spm", 1, 2, 0, True, True)
    eot = v.token_to_id["<end_of_turn>"]
    assert v.eot == eot and eot in v.eog_ids and v.attrs[eot] & ATTR_CONTROL  # found by its text
    assert v.attrs[v.token_to_id["<unused3>"]] & ATTR_UNUSED
    assert v.special_ids[0] == eot  # longest special text first


# --- unicode --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"abc", "abc"),
        (b"\xc0\x80", "\x00"),  # overlong form accepted like llama.cpp
        (b"\xed\xa0\x80", "\ud800"),  # surrogate accepted
        (b"\xe2\x82", "\ufffd\ufffd"),  # truncated: one U+FFFD per byte
        (b"\xff", "\ufffd"),
        (b"a\x80b", "a\ufffdb"),
    ],
)
def test_decode_utf8_like_llama(raw: bytes, text: str) -> None:
    assert U.decode_utf8(raw) == text


def test_categories_follow_llama_tables() -> None:
    assert U.category(ord("a")) == U.LETTER and U.category(ord("٣")) == U.NUMBER
    assert U.category(0x0CF3) == U.ACCENT_MARK  # assigned after Python 3.11's Unicode 14
    assert U.is_whitespace(0x85) and not U.is_whitespace(0x1C)
    assert U.tolower(ord("Ä")) == ord("ä") and U.nfd_first(ord("é")) == ord("e")


def test_byte_alphabet_round_trips() -> None:
    assert U.byte_encode(" é") == "Ġ" + "Ã©"
    assert [U.CHAR_TO_BYTE[c] for c in U.BYTE_TO_CHAR] == list(range(256))


# --- pre-tokenizers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pre", "text", "words"),
    [
        ("GPT2", "Hello world's  x\n\n", ["Hello", " world", "'s", " ", " x", "\n\n"]),
        ("GPT2", "a  \tb", ["a", "  ", "\t", "b"]),
        ("LLAMA3", "I'LL pay 12345 $!\n\n  x", ["I", "'LL", " pay", " ", "123", "45", " $!\n\n", " ", " x"]),
        ("QWEN2", "x 123", ["x", " ", "1", "2", "3"]),
        ("STARCODER", "a 12", ["a", " ", "1", "2"]),
        ("DEEPSEEK_CODER", "ab\ncd", ["ab", "\n", "cd"]),
        ("GEMMA4", "a b\n\nc", ["a b", "\n\n", "c"]),
        ("KIMI_K2", "中文abc's 1234", ["中文", "abc's", " ", "123", "4"]),
        ("AFMOE", "x 1234567", ["x", " ", "1", "234", "567"]),
        ("TINY_AYA", "ab1234", ["ab", "1", "234"]),
    ],
)
def test_pretokenizer_splits(pre: str, text: str, words: list[str]) -> None:
    assert pretokenizer_for(pre).split(text) == words


def _regex_split(regexes: tuple[str, ...], text: str) -> list[str]:
    """unicode_regex_split with each regex translated as written (no splitter functions): the
    slow reference for the linear-time forms."""
    pieces = [(0, len(text))]
    for regex in regexes:
        pat = re.compile(translate(regex))
        out = []
        for start, end in pieces:
            prev = start
            for m in pat.finditer(text, start, end):
                if m.start() > prev:
                    out.append((prev, m.start()))
                out.append(m.span())
                prev = m.end()
            if prev < end:
                out.append((prev, end))
        pieces = out
    return [text[a:b] for a, b in pieces]


def test_thousands_splitter_splits_as_the_regex() -> None:
    """SuperBPE's thousands lookahead rescans a digit run at every position (8,000 digits:
    0.2 s, growing with the square); its one-pass splitter cuts identically."""
    from llamacli.core.text.tokenizer._pre_regexes import _REGEXES

    pre = "SUPERBPE"
    rng = random.Random(pre)
    alphabet = [" ", " ", "\t", "\r", "\n", "\u3000", "1", "2", "a", "B", "中", "!", "'", "\u0661"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(400)]
    texts += [" " * 1100 + "x", "1" * 1000, "12 1234\n\n  \r\n 5"]
    tok = pretokenizer_for(pre)
    for text in texts:
        assert tok.split(text) == _regex_split(_REGEXES[pre], text), repr(text)


def test_collapsed_regex_classes() -> None:
    pat = re.compile(translate("\\s?\\p{L}+"))
    assert pat.fullmatch(" héllo") and pat.fullmatch("\u3000日本")  # non-ASCII space counts as \s
    assert not pat.fullmatch("\x1chello")  # ASCII stays ASCII: \x1c is not \s for std::regex
    assert re.compile(translate("\\s+$")).fullmatch("  \n")  # $ is end of input, not before \n


# --- BPE and SPM merges ---------------------------------------------------------------------


def test_spm_space_prefix_and_byte_fallback() -> None:
    # SPM only merges pairs that form tokens: "▁hi" is reached through "▁h"
    md = spm_metadata([("▁hi", -1.0, 1), ("▁h", -1.5, 1), ("▁", -2.0, 1), ("h", -3.0, 1), ("i", -3.0, 1)])
    tok = load_tokenizer(md)
    byte = tok.vocab.token_to_id
    assert tok.tokenize("hi") == [1, byte["▁hi"]]
    assert tok.tokenize("hi", add_special=False) == [byte["▁hi"]]
    assert tok.tokenize("hé", add_special=False) == [byte["▁h"], byte["<0xC3>"], byte["<0xA9>"]]
    # llama.cpp strips the prefix space only when the text does not start with a (removed) BOS
    assert tok.detokenize(tok.tokenize("hi hé"), remove_special=True) == " hi hé"
    assert tok.detokenize(tok.tokenize("hi hé")) == " hi hé"
    assert tok.detokenize(tok.tokenize("hi hé", add_special=False)) == "hi hé"


# --- special tokens -------------------------------------------------------------------------


def test_user_defined_tokens_split_always_control_only_when_parsing() -> None:
    pieces = [("<ctl>", 0.0, 3), ("<ud>", 0.0, 4), ("▁x", -1.0, 1)]
    md = spm_metadata(pieces, **{"tokenizer.ggml.add_space_prefix": False})
    tok = load_tokenizer(md)
    ids = tok.vocab.token_to_id
    assert ids["<ud>"] in tok.tokenize("a<ud>b", add_special=False)
    assert ids["<ctl>"] not in tok.tokenize("a<ctl>b", add_special=False)
    assert ids["<ctl>"] in tok.tokenize("a<ctl>b", add_special=False, parse_special=True)


def test_rstrip_tokens_eat_following_whitespace() -> None:
    # llama.cpp requires these four tokens in a model it recognises as Phi-3
    phi = [("<|endoftext|>", 0.0, 3), ("<|end|>", 0.0, 3), ("▁x", -1.0, 1), ("▁", -2.0, 1), ("x", -2.0, 1)]
    md = spm_metadata(phi, **{"general.name": "Phi3"})
    tok = load_tokenizer(md)
    end, x = tok.vocab.token_to_id["<|end|>"], tok.vocab.token_to_id["▁x"]
    assert tok.tokenize("<|end|>  \n x", add_special=False, parse_special=True) == [end, x]


def test_longest_special_token_wins() -> None:
    md = spm_metadata([("<a>", 0.0, 4), ("<a><b>", 0.0, 4)], **{"tokenizer.ggml.add_space_prefix": False})
    tok = load_tokenizer(md)
    ids = tok.vocab.token_to_id
    assert tok.tokenize("<a><b><a>", add_special=False) == [ids["<a><b>"], ids["<a>"]]


# --- detokenize -----------------------------------------------------------------------------


def _clean_reference(text: bytes) -> bytes:
    """Direct port of llama_detokenize's three clean_spaces passes."""
    t = bytearray(text)
    total = len(t)
    for rule in ("punct", "quote", "contraction"):
        n, total = total, (1 if total else 0)
        i = 1
        while i < n:
            x = t[i]
            if rule == "punct" and t[i - 1] == 32 and x in b"?!.,":
                total -= 1
            elif rule == "quote" and x == 39 and i + 1 < n and t[i - 1] == 32 and t[i + 1] == 32:
                total -= 1
                i += 1
                t[i] = 0
            elif rule == "contraction" and t[i - 1] == 32 and x == 39 and i + 1 < n:
                x1 = t[i + 1]
                if x1 in b"sm" or (i + 2 < n and bytes(t[i + 1 : i + 3]) in (b"re", b"ve")):
                    total -= 1
            t[total] = x
            total += 1
            i += 1
    return bytes(t[:total])


def test_clean_spaces_equals_llama_cpp_loops() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        text = bytes(rng.choice(b" ' ?.,!smrevtdx") for _ in range(rng.randint(0, 14)))
        ours = _CLEAN_CONTRACTION.sub(b"'", _CLEAN_QUOTE.sub(b"'", _CLEAN_PUNCT.sub(b"", text)))
        assert ours == _clean_reference(text), text


def test_incremental_decoder() -> None:
    md = spm_metadata([("▁hi", -1.0, 1), ("▁h", -2.0, 1), ("▁", -3.0, 1), ("h", -3.0, 1), ("i", -3.0, 1)],
                      **{"tokenizer.ggml.add_space_prefix": False})
    tok = load_tokenizer(md)
    ids = tok.tokenize("€ hi", add_special=False)  # € = 3 byte tokens
    dec = IncrementalDecoder(tok)
    assert [dec.feed(i) for i in ids] == ["", "", "€", " hi"]
    assert dec.feed(tok.vocab.token_to_id["<0xE2>"]) == "" and dec.pending == b"\xe2"
    assert dec.flush() == "\ufffd" and dec.pending == b""
    assert dec.feed(tok.vocab.token_to_id["<0xFF>"]) == "\ufffd"
