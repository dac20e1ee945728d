"""http/params.py: request bodies and their sampling fields, type errors naming the field."""

from __future__ import annotations

import pytest

from llamacli.core.runtime.tasks import TaskParams
from llamacli.http.errors import ApiError, to_api_error
from llamacli.http.params import Body, parse_json_body, task_params
from tests.fakes import FakeTokenizer


def test_body_type_errors_name_the_field() -> None:
    b = Body({"n": "3", "t": True, "s": 5, "l": ["a", 1], "f": float("inf")})
    for call, name in ((lambda: b.int("n"), "'n'"), (lambda: b.float("t"), "'t'"), (lambda: b.str("s"), "'s'"),
                       (lambda: b.str_list("l"), "'l'"), (lambda: b.float("f"), "'f'"), (lambda: b.int("missing"), "'missing'")):
        with pytest.raises(ApiError) as e:
            call()
        assert e.value.status == 400 and name in e.value.message
    assert Body({"n": 3.0}).int("n") == 3
    with pytest.raises(ApiError):
        parse_json_body(b"[1, 2]")
    with pytest.raises(ApiError):
        parse_json_body(b'{"a": NaN}')
    with pytest.raises(ApiError):
        parse_json_body(b"\xff\xfe")


def test_task_params_reads_every_sampling_field_over_server_defaults() -> None:
    tok = FakeTokenizer()
    base = TaskParams(n_predict=7)
    body = Body({
        "temperature": 0.5, "top_k": 3, "top_p": 0.9, "min_p": 0.1, "typical_p": 0.8, "top_n_sigma": 1.0,
        "xtc_probability": 0.1, "xtc_threshold": 0.2, "repeat_last_n": 8, "repeat_penalty": 1.1,
        "presence_penalty": 0.1, "frequency_penalty": 0.2, "dry_multiplier": 0.5, "dry_base": 2.0,
        "dry_allowed_length": 3, "dry_penalty_last_n": 16, "dry_sequence_breakers": ["\n"], "mirostat": 2,
        "mirostat_tau": 4.0, "mirostat_eta": 0.2, "dynatemp_range": 0.1, "dynatemp_exponent": 1.5,
        "seed": 42, "logit_bias": {"a": -1.0, "12": False}, "samplers": ["top_k", "temperature"],
        "min_keep": 2, "n_probs": 3, "stop": "\n", "ignore_eos": True, "n_keep": -1, "cache_prompt": False,
        "adaptive_target": 0.5,
    })
    p = task_params(body, base, tok, tok.n_vocab)
    s = p.sampling
    assert p.n_predict == 7 and p.stop == ["\n"] and p.n_probs == 3 and s.n_probs == 3 and p.ignore_eos
    assert (s.temperature, s.top_k, s.mirostat, s.seed, s.min_keep, s.adaptive_target) == (0.5, 3, 2, 42, 2, 0.5)
    assert s.samplers == ("top_k", "temperature") and tuple(s.dry_sequence_breakers) == ("\n",)
    assert (107, -1.0) in s.logit_bias and (12, float("-inf")) in s.logit_bias
    assert not p.cache_prompt and p.n_keep == -1
    s.validate()
    for bad in ({"n_predict": -2}, {"top_k": 1.5}, {"samplers": 3}, {"logit_bias": "x"}, {"grammar": 5}):
        with pytest.raises(Exception) as e:
            task_params(Body(bad), base, tok, tok.n_vocab)
        assert to_api_error(e.value).status == 400, bad


def test_stop_strings_are_bounded() -> None:
    tok = FakeTokenizer()
    base = TaskParams()
    assert task_params(Body({"stop": ["x"] * 1000}), base, tok, tok.n_vocab).stop == ["x"] * 1000
    for bad, needle in (({"stop": ["x"] * 1001}, "'stop' has 1001 strings; at most 1000"),
                        ({"stop": "y" * 1001}, "a string of 1001 characters; at most 1000")):
        with pytest.raises(ApiError) as e:
            task_params(Body(bad), base, tok, tok.n_vocab)
        assert e.value.status == 400 and needle in e.value.message
