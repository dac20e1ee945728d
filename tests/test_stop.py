"""Stop strings: never stream a partial stop string, hold back only what could become one."""

from __future__ import annotations

from llamacli.core.runtime.stop import StopMatcher, partial_stop_len


def test_partial_stop_len() -> None:
    assert partial_stop_len("hello wor", ["world"]) == 3
    assert partial_stop_len("hello", ["world"]) == 0
    assert partial_stop_len("ab", ["b", "abc"]) == 2  # "ab" could still become "abc"


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
