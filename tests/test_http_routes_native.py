"""http/routes_native.py and http/native.py: /completion, /tokenize, /detokenize, /embedding,
/infill and /apply-template over the fake engine, and the native translation functions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llamacli.http import native
from llamacli.http.config import ServerConfig
from llamacli.http.errors import ApiError
from tests.fakes import BOS, EOS, OFFSET, FakeTokenizer
from tests.http_app_client import Client, client, make, sse_events  # noqa: F401 (a fixture)


def test_prompt_forms_follow_llama_server() -> None:
    tok = FakeTokenizer()
    assert native.split_prompts("ab") == ["ab"]
    assert native.split_prompts([12, 34]) == [[12, 34]]
    assert native.split_prompts([12, "a", 34]) == [[12, "a", 34]]
    assert native.split_prompts(["a", "b"]) == ["a", "b"]
    assert native.split_prompts(["a", [12, 13]]) == ["a", [12, 13]]
    # BOS only for a string in first position; token ids are taken as they are
    assert native.tokenize_prompt(tok, "ab", tok.n_vocab) == [BOS, 107, 108]
    assert native.tokenize_prompt(tok, [50, 51], tok.n_vocab) == [50, 51]
    assert native.tokenize_prompt(tok, ["a", 50], tok.n_vocab) == [BOS, 107, 50]
    assert native.tokenize_prompt(tok, [50, "a"], tok.n_vocab) == [50, 107]
    assert native.tokenize_prompt(tok, {"prompt_string": "a"}, tok.n_vocab) == [BOS, 107]
    for bad in (5, None, [], [True], [[1.5]], {"x": 1}):
        with pytest.raises(ApiError) as e:
            native.tokenize_prompt(tok, native.split_prompts(bad)[0], tok.n_vocab)
        assert e.value.status == 400
    with pytest.raises(ApiError) as e:
        native.tokenize_prompt(tok, [tok.n_vocab], tok.n_vocab)
    assert "outside the vocabulary" in e.value.message
    with pytest.raises(ApiError) as e:
        native.tokenize_prompt(tok, {"prompt_string": "a", "multimodal_data": ["AAAA"]}, tok.n_vocab)
    assert e.value.status == 400 and "multimodal" in e.value.message


def test_infill_layout_and_missing_fim_tokens() -> None:
    tok = FakeTokenizer(fim=True)
    toks = native.format_infill(tok, "ab", "c", [{"filename": "f.py", "text": "z"}], [107], 64, 256)
    assert toks == [BOS] + tok.tokenize("z", False) + [3, 107, 108, 4, 109, 5, 107]
    spm = native.format_infill(tok, "ab", "c", [], [], 64, 256, spm_infill=True)
    assert spm == [BOS, 4, 109, 3, 107, 108, 5]
    with pytest.raises(ApiError) as e:
        native.format_infill(FakeTokenizer(), "a", "b", [], [], 64, 256)
    assert e.value.status == 501 and e.value.type == "not_supported_error"


def test_completion_shapes(client: Client) -> None:
    code, d, h = client.post("/completion", {"prompt": "hi", "n_predict": 5, "return_tokens": True, "n_probs": 2})
    assert code == 200 and h["Content-Type"].startswith("application/json")
    assert d["content"] == "Hello" and d["stop"] is True and d["stop_type"] == "limit"
    assert d["tokens"] == [ord(c) + OFFSET for c in "Hello"] and d["tokens_evaluated"] == 3
    assert d["model"] == "fake" and d["generation_settings"]["n_predict"] == 5 and "timings" in d
    probs = d["completion_probabilities"]
    assert len(probs) == 5 and probs[0]["token"] == "H" and probs[0]["bytes"] == [72]
    assert abs(probs[0]["logprob"] - np.log(0.5)) < 1e-9 and len(probs[0]["top_logprobs"]) == 2
    code, d, _ = client.post("/completion", {"prompt": "hi", "n_predict": 2, "n_probs": 1, "post_sampling_probs": True})
    assert d["completion_probabilities"][0]["prob"] == 0.5 and "top_probs" in d["completion_probabilities"][0]
    code, d, _ = client.post("/completion", {"prompt": ["a", [20, 21]], "n_predict": 1})
    assert code == 200 and [x["index"] for x in d] == [0, 1]
    code, d, _ = client.post("/completion", {"prompt": "hi", "stop": ["lo"], "response_fields": ["content", "stop_type", "generation_settings/n_predict"]})
    assert d == {"content": "Hel", "stop_type": "word", "n_predict": -1}


def test_completion_stream_framing(client: Client) -> None:
    code, text, h = client.post("/completion", {"prompt": "hi", "n_predict": 3, "stream": True})
    assert code == 200 and h["Content-Type"].startswith("text/event-stream")
    events = [json.loads(e) for e in sse_events(text)]
    assert [e["content"] for e in events[:-1]] == ["H", "e", "l"] and all(not e["stop"] for e in events[:-1])
    assert events[-1]["stop"] is True and events[-1]["stop_type"] == "limit" and events[-1]["content"] == ""


def test_prefill_of_a_final_assistant_message(client: Client) -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure:"}]
    _, d, _ = client.post("/apply-template", {"messages": msgs})
    assert d["prompt"].endswith("<|im_start|>assistant\nSure:")
    _, d, _ = client.post("/apply-template", {"messages": msgs[:1]})
    assert d["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_tokenize_detokenize(client: Client) -> None:
    _, d, _ = client.post("/tokenize", {"content": "a<s>"})
    assert d == {"tokens": [107, BOS]}
    _, d, _ = client.post("/tokenize", {"content": "a<s>", "parse_special": False, "add_special": True, "with_pieces": True})
    assert d["tokens"][0] == {"id": BOS, "piece": "<s>"} and d["tokens"][1] == {"id": 107, "piece": "a"}
    _, d, _ = client.post("/detokenize", {"tokens": [107, 108]})
    assert d == {"content": "ab"}
    code, d, _ = client.post("/detokenize", {"tokens": [-1]})
    assert code == 400


def test_embeddings(client: Client) -> None:
    code, d, _ = client.post("/v1/embeddings", {"input": ["ab", "abc"], "model": "fake"})
    assert code == 200 and d["object"] == "list" and [x["index"] for x in d["data"]] == [0, 1]
    v = np.array(d["data"][0]["embedding"])
    assert abs(np.linalg.norm(v) - 1) < 1e-6 and d["usage"]["prompt_tokens"] == 3 + 4
    code, d, _ = client.post("/v1/embeddings", {"input": "ab", "encoding_format": "base64"})
    assert np.frombuffer(__import__("base64").b64decode(d["data"][0]["embedding"]), "<f4").shape == (8,)
    code, d, _ = client.post("/embedding", {"content": "ab", "embd_normalize": -1})
    assert code == 200 and d[0]["embedding"][0][0] == 3.0
    code, _, _ = client.post("/embeddings", {"content": 5})
    assert code == 400


def test_ignore_eos_shows_eog_biases_in_generation_settings() -> None:
    """As llama-server: ignore_eos appends a -inf bias per end-of-generation token, shown in
    generation_settings.logit_bias as {"bias": null, "token": id}; without it the list is empty."""
    c, _ = make(ServerConfig())
    _, d, _ = c.post("/completion", {"prompt": "hi", "n_predict": 2, "ignore_eos": True})
    assert d["generation_settings"]["logit_bias"] == [{"bias": None, "token": EOS}]
    _, d, _ = c.post("/completion", {"prompt": "hi", "n_predict": 2, "ignore_eos": False})
    assert d["generation_settings"]["logit_bias"] == []
    _, d, _ = c.post("/completion", {"prompt": "hi", "n_predict": 2, "logit_bias": [[20, 1.5]]})
    assert d["generation_settings"]["logit_bias"] == [{"bias": 1.5, "token": 20}]


def test_server_n_predict_is_a_default_not_a_cap() -> None:
    """llama-server's -n: used when a request gives no n_predict or -1; a request may ask for more."""
    c, _ = make(ServerConfig(n_predict=2))
    for body, want in (({}, 2), ({"n_predict": -1}, 2), ({"n_predict": 4}, 4), ({"n_predict": 0}, 0)):
        _, d, _ = c.post("/completion", {"prompt": "hi", **body})
        assert d["generation_settings"]["n_predict"] == want, body
        assert d["tokens_predicted"] == want, body


def test_timings_rate_excludes_the_first_token() -> None:
    """The first token comes from the prompt's last batch: llama-server's rate is over n-1 steps."""
    from llamacli.core.runtime.tasks import Timings

    one = Timings(prompt_n=3, prompt_ms=6.0, predicted_n=1, predicted_ms=0.5).to_dict()
    assert one["predicted_per_second"] == 0.0 and one["predicted_per_token_ms"] == 0.0
    many = Timings(prompt_n=3, prompt_ms=6.0, predicted_n=16, predicted_ms=30.0).to_dict()
    assert many["predicted_per_second"] == pytest.approx(1e3 / 30.0 * 15, abs=1e-6) and many["predicted_per_token_ms"] == 2.0
