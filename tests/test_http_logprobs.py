"""http/logprobs.py: token probabilities in llama-server's and OpenAI's shapes, from Partials
built by hand (no model). Expected values follow from the definitions: logprob = ln(p), and
-9999 for p = 0 (OpenAI's value for an impossible token)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from llamacli.core.runtime.tasks import Final, Partial, TokenProb
from llamacli.http import logprobs

PIECES = {0: b"Hi", 1: b" there", 2: b"\xe2\x82", 3: b"!", 4: b"<eos>"}  # 2: the first two bytes of U+20AC
EOS = 4  # a control token: its text only with special on


class Pieces:
    """The one tokenizer method these helpers use."""

    def token_to_piece(self, token: int, special: bool) -> bytes:
        return PIECES[token] if special or token != EOS else b""


TOK = Pieces()


def two_steps() -> list[Partial]:
    """Two streamed steps: token 0 (p=0.5; candidates 0 and 1) then token 1 (p=0.25;
    candidates 1, 3 and 2, the last with p=0)."""
    return [
        Partial("Hi", [0], probs=[[TokenProb(0, 0.5), TokenProb(1, 0.25)]], chosen_probs=[0.5]),
        Partial(" there", [1], probs=[[TokenProb(1, 0.25), TokenProb(3, 0.125), TokenProb(2, 0.0)]],
                chosen_probs=[0.25]),
    ]


def test_logprob_is_the_natural_log_and_minus_9999_for_zero() -> None:
    assert logprobs.logprob(1.0) == 0.0
    assert logprobs.logprob(0.25) == math.log(0.25) < 0
    assert logprobs.logprob(0.0) == logprobs.NEG_INF_LOGPROB == -9999.0


def test_piece_replaces_an_incomplete_utf8_sequence() -> None:
    assert logprobs.piece(TOK, 1) == (" there", [32, 116, 104, 101, 114, 101])
    # a truncated sequence is one U+FFFD; its bytes are kept as they are
    assert logprobs.piece(TOK, 2) == ("\ufffd", [0xE2, 0x82])
    assert logprobs.token_json(TOK, 3) == {"id": 3, "token": "!", "bytes": [33]}
    # an end-of-generation (control) token: empty, as llama-server renders it (special off)
    assert logprobs.token_json(TOK, EOS) == {"id": EOS, "token": "", "bytes": []}


def test_token_probs_reads_pairs_and_skips_tokens_without_probs() -> None:
    # (id, prob) pairs are read as TokenProbs are (the tests' fake engines send pairs)
    pairs: list[Any] = [(0, 0.5), (3, 0.5)]
    parts = [
        Partial("Hi!", [0, 3], probs=[pairs], chosen_probs=[]),  # second token: no probs
        Partial("", [1], probs=[[TokenProb(1, 1.0)]], chosen_probs=[1.0]),
    ]
    # token 0 has candidates but no chosen probability: 0.0
    assert logprobs.token_probs(parts) == [(0, 0.0, [(0, 0.5), (3, 0.5)]), (1, 1.0, [(1, 1.0)])]


def test_probs_json_native_logprobs_and_post_sampling_probs() -> None:
    got = logprobs.probs_json(TOK, two_steps()[:1], post_sampling=False)
    hi = {"id": 0, "token": "Hi", "bytes": [72, 105]}
    there = {"id": 1, "token": " there", "bytes": [32, 116, 104, 101, 114, 101]}
    assert got == [{**hi, "logprob": math.log(0.5),
                    "top_logprobs": [{**hi, "logprob": math.log(0.5)}, {**there, "logprob": math.log(0.25)}]}]
    got = logprobs.probs_json(TOK, two_steps()[:1], post_sampling=True)
    assert got == [{**hi, "prob": 0.5, "top_probs": [{**hi, "prob": 0.5}, {**there, "prob": 0.25}]}]


def test_chat_logprobs_keeps_n_top_candidates() -> None:
    got = logprobs.chat_logprobs(TOK, two_steps(), n_top=2)
    assert [c["token"] for c in got["content"]] == ["Hi", " there"]
    assert [c["logprob"] for c in got["content"]] == [math.log(0.5), math.log(0.25)]
    assert [[t["id"] for t in c["top_logprobs"]] for c in got["content"]] == [[0, 1], [1, 3]]
    assert logprobs.chat_logprobs(TOK, two_steps(), n_top=0)["content"][1]["top_logprobs"] == []
    # the impossible candidate of the second step, once n_top reaches it
    assert logprobs.chat_logprobs(TOK, two_steps(), n_top=3)["content"][1]["top_logprobs"][2]["logprob"] == -9999.0


def test_completion_logprobs_offsets_count_characters_from_the_echoed_prompt() -> None:
    got = logprobs.completion_logprobs(TOK, two_steps(), n_top=2, offset=10)
    assert got["tokens"] == ["Hi", " there"]
    assert got["token_logprobs"] == [math.log(0.5), math.log(0.25)]
    assert got["top_logprobs"] == [{"Hi": math.log(0.5), " there": math.log(0.25)},
                                   {" there": math.log(0.25), "!": math.log(0.125)}]
    assert got["text_offset"] == [10, 12]  # "Hi" is two characters
    assert got["content"] == logprobs.chat_logprobs(TOK, two_steps(), n_top=2)["content"]


def test_reported_drops_a_stop_strings_tokens_from_the_end() -> None:
    """llama-server's whole answer after a stop string: as many entries dropped from the end
    as the string has tokens (tokenized alone); other stops keep every entry."""

    class Words(Pieces):
        def tokenize(self, text: str, add_special: bool = True) -> list[int]:
            return [0] * len(text.split())  # one token per word

    parts = two_steps() + [Partial("", [3], probs=[[TokenProb(3, 1.0)]], chosen_probs=[1.0]), Partial("", [])]
    word = Final("Hi", [0, 1, 3], [], "word", stopping_word="there !")
    assert [p.tokens for p in logprobs.reported(Words(), parts, word)] == [[0], []]
    assert logprobs.reported(Words(), parts, replace(word, stopping_word="a b c d e")) == [parts[3]]
    assert logprobs.reported(Words(), parts, replace(word, stop_type="eos")) == parts
