"""Stop strings: never stream a partial stop string, hold back only what could become one; and
the stop reason after a token."""

from __future__ import annotations

import random
from dataclasses import replace

from llamacli.core.runtime.stop import AfterToken, StopMatcher, stop_reason
from llamacli.core.text.holdback import StopPrefixes, partial_stop_len


def test_partial_stop_len() -> None:
    assert partial_stop_len("hello wor", ["world"]) == 3
    assert partial_stop_len("hello", ["world"]) == 0
    assert partial_stop_len("ab", ["b", "abc"]) == 2  # "ab" could still become "abc"


def test_partial_stop_len_is_the_longest_suffix_that_is_a_proper_prefix() -> None:
    """One pass over the text's tail with a binary search per start (the work does not grow
    with the number of stop strings): the same answer as trying every stop and length."""

    def brute(text: str, stops: list[str]) -> int:
        return max((n for s in stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)

    rng = random.Random(7)
    for _ in range(5000):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(0, 5))]
        text = "".join(rng.choice("ab") for _ in range(rng.randint(0, 10)))
        assert StopPrefixes(stops).partial_len(text) == brute(text, stops), (text, stops)


def test_stream_holds_back_only_possible_prefix() -> None:
    m = StopMatcher(["</s>", "STOP"])
    out = [m.push(p) for p in ["Hel", "lo <", "/", "x and S", "TO", "P tail"]]
    assert out == ["Hel", "lo ", "", "</x and ", "", ""]
    assert m.stopped_word == "STOP"
    assert m.text == "Hello </x and "
    assert "".join(out) == m.text


def test_stop_string_inside_one_piece() -> None:
    m = StopMatcher(["\n\n"])
    assert m.push("a\n\nb") == "a"
    assert m.stopped_word == "\n\n" and m.text == "a"
    assert m.push("more") == ""


def test_earliest_stop_wins_and_flush() -> None:
    m = StopMatcher(["cd", "bc"])
    assert m.push("abcd") == "a" and m.stopped_word == "bc"
    m2 = StopMatcher(["xyz"])
    assert m2.push("abcx") == "abc"
    assert m2.flush() == "x"  # generation ended without completing the stop string


def test_no_stops_streams_everything() -> None:
    m = StopMatcher([])
    assert m.push("abc") == "abc" and m.flush() == ""


def test_stop_reason_goes_on_without_a_condition() -> None:
    assert stop_reason(AfterToken(n_generated=5)) is None  # no limit
    assert stop_reason(AfterToken(n_generated=5, limit=6, ms_generating=900.0, t_max_predict_ms=1000.0)) is None


def test_stop_reason_first_condition_wins() -> None:
    everything = AfterToken("</s>", grammar_complete=True, n_generated=4, limit=4, ms_generating=2.0, t_max_predict_ms=1.0)
    assert stop_reason(everything) == "word"  # the stop string, even on the last allowed token
    assert stop_reason(replace(everything, stopped_word="")) == "eos"  # a complete grammar that EOG may not end
    assert stop_reason(replace(everything, stopped_word="", grammar_complete=False)) == "limit"


def test_stop_reason_limits() -> None:
    assert stop_reason(AfterToken(n_generated=3, limit=3)) == "limit"  # n_predict tokens generated
    assert stop_reason(AfterToken(n_generated=2, limit=3)) is None
    assert stop_reason(AfterToken(n_generated=3, ms_generating=1000.5, t_max_predict_ms=1000.0)) == "limit"
    assert stop_reason(AfterToken(n_generated=3, ms_generating=1000.0, t_max_predict_ms=1000.0)) is None  # not past it
    assert stop_reason(AfterToken(n_generated=3, ms_generating=1e9, t_max_predict_ms=0.0)) is None  # 0: no time limit
