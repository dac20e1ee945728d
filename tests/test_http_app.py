"""The HTTP app over the fake engine (tests/fakes.py: no model, no sockets), and the pure
translation functions."""

from __future__ import annotations

import time
from typing import Any

from llamacli.core.runtime.tasks import Final, Task
from tests.fakes import BOS, EOS, OFFSET, FakeEngine, FakeTokenizer, fake_model
from tests.http_app_client import ASK, CALL_REPLY, WEATHER, Client, client, make, sse_events  # noqa: F401 (a fixture)

import asyncio
import json

import numpy as np
import pytest

from llamacli.core.errors import SlotBusy
from llamacli.http import anthropic, native, oai
from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from llamacli.http.state import ServerState
from llamacli.http.errors import ApiError, to_api_error
from llamacli.http.metrics import prometheus_text
from llamacli.http.params import Body, parse_json_body, task_params
from llamacli.core.runtime.tasks import TaskParams


# ---- pure functions ----------------------------------------------------------------------------


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


def test_error_mapping() -> None:
    from llamacli.core.errors import ContextOverflow, InvalidRequest, ModelLoadError

    e = to_api_error(ContextOverflow(600, 512))
    assert e.status == 400 and e.body()["error"] == {
        "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 600, "n_ctx": 512,
        "message": "request (600 tokens) exceeds the available context size (512 tokens), try increasing it",
    }
    assert to_api_error(InvalidRequest("top_p must be between 0 and 1")).status == 400
    assert to_api_error(SlotBusy("busy")).status == 409
    assert to_api_error(ModelLoadError("x", "bad")).status == 500
    e = to_api_error(KeyError("secret internals"))
    assert e.status == 500 and "secret" not in e.message and e.type == "server_error"


def test_openai_fields_are_renamed() -> None:
    f = oai.native_fields({"max_tokens": 5, "logprobs": True, "top_logprobs": 3}, chat=True)
    assert f["n_predict"] == 5 and f["n_probs"] == 3
    f = oai.native_fields({"max_completion_tokens": 6, "max_tokens": 5, "logprobs": True}, chat=True)
    assert f["n_predict"] == 6 and f["n_probs"] == 1
    assert oai.native_fields({"logprobs": 2}, chat=False)["n_probs"] == 2
    with pytest.raises(ApiError):
        oai.native_fields({"max_tokens": "5"}, chat=True)


def test_anthropic_messages_become_chat_messages() -> None:
    msgs = anthropic.chat_messages({
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                                         {"type": "text", "text": "so?"}]},
        ],
    })
    assert msgs[0] == {"role": "system", "content": "be brief"}
    assert msgs[2]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x": 1}'}
    assert msgs[3] == {"role": "tool", "tool_call_id": "t1", "content": "42"}
    assert msgs[4] == {"role": "user", "content": "so?"}
    assert anthropic.native_fields({"max_tokens": 9, "stop_sequences": ["x"], "messages": []}) == {"n_predict": 9, "stop": ["x"]}
    with pytest.raises(ApiError) as e:
        anthropic.chat_messages({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})
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


def test_prometheus_names() -> None:
    from llamacli.core.runtime.engine import Metrics

    text = prometheus_text(Metrics(prompt_tokens_total=10, prompt_seconds_total=2.0, n_decode_total=4, n_busy_slots_total=6))
    for name in ("prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total", "tokens_predicted_seconds_total",
                 "n_decode_total", "n_tokens_max", "n_busy_slots_per_decode", "prompt_tokens_seconds",
                 "predicted_tokens_seconds", "requests_processing", "requests_deferred"):
        assert f"# TYPE llamacpp:{name} " in text and f"\nllamacpp:{name} " in text
    assert "llamacpp:prompt_tokens_seconds 5.0" in text and "llamacpp:n_busy_slots_per_decode 1.5" in text


def test_leaving_a_stream_early_cancels_its_tasks() -> None:
    tok = FakeTokenizer()
    eng = FakeEngine(tokenizer=tok, delay=0.05, reply="x" * 200)
    st = ServerState(ServerConfig())
    st.set_ready(eng, fake_model(tok))

    async def go() -> Task:
        (task,) = st.submit([Task([BOS, 20], TaskParams())])
        agen = st.results([task])
        await agen.__anext__()
        await agen.aclose()  # what Quart does when the client disconnects
        while not task.results.closed:  # let the engine finish while this loop still runs
            await asyncio.sleep(0.01)
        return task

    task = asyncio.run(go())
    assert task.cancelled.is_set()
    finals = [r for r in task.results if isinstance(r, Final)]
    assert finals and finals[0].stop_type == "cancelled" and not st.tasks


# ---- the app over the fake engine ---------------------------------------------------------------


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


def test_chat_completion_shapes(client: Client) -> None:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    code, d, _ = client.post("/v1/chat/completions", {"model": "fake", "messages": msgs, "max_tokens": 3, "n": 2,
                                                      "logprobs": True, "top_logprobs": 1})
    assert code == 200 and d["object"] == "chat.completion" and d["id"].startswith("chatcmpl-")
    assert [c["message"] for c in d["choices"]] == [{"role": "assistant", "content": "Hel"}] * 2
    assert d["choices"][0]["finish_reason"] == "length"
    lp = d["choices"][0]["logprobs"]["content"]
    assert len(lp) == 3 and lp[0]["token"] == "H" and len(lp[0]["top_logprobs"]) == 1
    u = d["usage"]
    assert u["completion_tokens"] == 6 and u["total_tokens"] == u["prompt_tokens"] + 6 and "timings" in d
    code, d, _ = client.post("/v1/chat/completions", {"messages": msgs, "stop": "lo"})
    assert d["choices"][0]["message"]["content"] == "Hel" and d["choices"][0]["finish_reason"] == "stop"


def test_chat_stream_chunks_usage_and_done(client: Client) -> None:
    code, text, _ = client.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                                         "stream": True, "stream_options": {"include_usage": True}})
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "He"
    assert chunks[-2]["choices"][0]["finish_reason"] == "length" and "timings" in chunks[-2]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2


def test_prefill_of_a_final_assistant_message(client: Client) -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure:"}]
    _, d, _ = client.post("/apply-template", {"messages": msgs})
    assert d["prompt"].endswith("<|im_start|>assistant\nSure:")
    _, d, _ = client.post("/apply-template", {"messages": msgs[:1]})
    assert d["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_text_completions(client: Client) -> None:
    code, d, _ = client.post("/v1/completions", {"prompt": ["a", "b"], "max_tokens": 2, "echo": True, "logprobs": 1})
    assert code == 200 and d["object"] == "text_completion"
    assert [c["text"] for c in d["choices"]] == ["aHe", "bHe"]
    lp = d["choices"][0]["logprobs"]
    assert lp["tokens"] == ["H", "e"] and lp["text_offset"] == [1, 2] and lp["top_logprobs"][0] == {"H": np.log(0.5)}
    code, text, _ = client.post("/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True})
    events = sse_events(text)
    assert events[-1] == "[DONE]" and json.loads(events[0])["choices"][0]["text"] == "H"


def test_anthropic_messages(client: Client) -> None:
    body = {"model": "fake", "max_tokens": 3, "system": "s", "messages": [{"role": "user", "content": "hi"}]}
    code, d, _ = client.post("/v1/messages", body)
    assert code == 200 and d["type"] == "message" and d["content"] == [{"type": "text", "text": "Hel"}]
    assert d["stop_reason"] == "max_tokens" and d["usage"]["output_tokens"] == 3
    code, text, _ = client.post("/v1/messages", {**body, "stream": True})
    names = [m.split("\n")[0] for m in text.split("\n\n") if m]
    assert names == ["event: message_start", "event: content_block_start", "event: ping"] + \
        ["event: content_block_delta"] * 3 + ["event: content_block_stop", "event: message_delta", "event: message_stop"]
    code, d, _ = client.post("/v1/messages/count_tokens", body)
    assert code == 200 and d["input_tokens"] > 0
    code, d2, _ = client.post("/v1/chat/completions/input_tokens", {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]})
    assert d2 == {"object": "response.input_tokens", "input_tokens": d["input_tokens"]}


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


def test_disabled_endpoints_are_501_in_llama_server_shape() -> None:
    c, _ = make(ServerConfig(slots=False))
    for method, path, body in (("POST", "/v1/embeddings", {"input": "a"}), ("POST", "/embedding", {"content": "a"}),
                               ("GET", "/metrics", None), ("GET", "/slots", None), ("POST", "/props", {}),
                               ("POST", "/slots/0?action=erase", {}), ("POST", "/infill", {"input_prefix": "a"})):
        code, d, _ = c.request(method, path, body)
        assert code == 501 and d["error"]["type"] == "not_supported_error", (path, d)


def test_bad_requests_are_4xx_never_500(client: Client) -> None:
    cases = [
        ("/completion", None, b"{not json"),
        ("/completion", None, b""),
        ("/completion", None, b"[]"),
        ("/completion", {"n_predict": 3}, None),
        ("/completion", {"prompt": "a", "n_predict": -5}, None),
        ("/completion", {"prompt": "a", "n_predict": "x"}, None),
        ("/completion", {"prompt": "a", "top_p": 3}, None),
        ("/completion", {"prompt": "a", "mirostat": 7}, None),
        ("/completion", {"prompt": "a", "stop": [1]}, None),
        ("/completion", {"prompt": "a", "id_slot": 5}, None),
        ("/completion", {"prompt": "a", "samplers": ["nope"]}, None),
        ("/v1/chat/completions", {"messages": "hi"}, None),
        ("/v1/chat/completions", {"messages": []}, None),
        ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 0}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}}, None),
        ("/completion", {"prompt": "a", "grammar": 5}, None),
        ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, None),
        ("/tokenize", {}, None),
    ]
    for path, body, raw in cases:
        code, d, _ = client.post(path, body, data=raw)
        assert 400 <= code < 500 and d["error"]["type"] == "invalid_request_error", (path, body, raw, d)
        assert isinstance(d["error"]["message"], str) and d["error"]["code"] == code
    # any model name is served (llama-server in single-model mode), aliases or not
    code, d, _ = client.post("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})
    assert code == 200 and d["model"] == "fake"
    code, d, _ = client.post("/completion", {"prompt": "x" * 500})
    assert code == 400 and d["error"]["type"] == "exceed_context_size_error" and d["error"]["n_ctx"] == 128
    code, d, _ = client.get("/no/such/path")
    assert code == 404 and d["error"]["type"] == "not_found_error"
    code, d, _ = client.get("/completion")
    assert code == 405 and d["error"]["code"] == 405


def test_health_models_props_slots_metrics(client: Client) -> None:
    assert client.get("/health")[:2] == (200, {"status": "ok"})
    _, d, _ = client.get("/v1/models")
    assert d["object"] == "list" and d["data"][0]["id"] == "fake" and d["data"][0]["meta"]["n_vocab"] == 70000
    assert client.get("/models")[1]["data"] == d["data"]
    _, d, _ = client.get("/props")
    assert d["total_slots"] == 2 and d["model_path"] == "/models/fake.gguf" and d["chat_template"] == "chatml"
    assert d["default_generation_settings"]["params"]["temperature"] == 0.8
    _, d, _ = client.get("/slots")
    # an idle slot that never served a task has no id_task/params/next_token (llama-server)
    assert [s["id"] for s in d] == [0, 1] and not d[0]["is_processing"] and "params" not in d[0]
    assert set(d[0]) == {"id", "n_ctx", "speculative", "is_processing"}
    code, text, h = client.get("/metrics")
    assert code == 200 and h["Content-Type"].startswith("text/plain") and "llamacpp:n_decode_total" in text


def test_props_post_changes_defaults() -> None:
    c, _ = make(ServerConfig(props=True))
    code, d, _ = c.post("/props", {"default_generation_settings": {"params": {"temperature": 0.1, "n_predict": 4}}})
    assert code == 200 and d == {"success": True}
    _, d, _ = c.get("/props")
    assert d["default_generation_settings"]["params"]["temperature"] == 0.1
    _, d, _ = c.post("/completion", {"prompt": "a"})
    assert d["content"] == "Hell"
    assert c.post("/props", {"top_p": 7})[0] == 400


def test_slot_actions(tmp_path: Any) -> None:
    c, _ = make(ServerConfig(slot_save_path=str(tmp_path)))
    code, d, _ = c.post("/slots/0?action=save", {"filename": "a.bin"})
    assert code == 200 and d == {"id_slot": 0, "filename": "a.bin", "n_saved": 3, "n_written": 100, "timings": {"save_ms": 0.5}}
    code, d, _ = c.post("/slots/1?action=restore", {"filename": "a.bin"})
    assert code == 200 and d["n_restored"] == 3 and d["timings"] == {"restore_ms": 0.5}
    assert c.post("/slots/0?action=erase")[1] == {"id_slot": 0, "n_erased": 7}
    assert c.post("/slots/0?action=restore", {"filename": "missing.bin"})[0] == 400
    assert c.post("/slots/0?action=save", {"filename": "../x"})[0] == 400
    assert c.post("/slots/0?action=save", {})[0] == 400
    assert c.post("/slots/0?action=fly", {})[0] == 400
    assert c.post("/slots/9?action=erase")[0] == 400


def test_api_keys_and_public_endpoints() -> None:
    c, _ = make(ServerConfig(api_keys=["k1", "k2"]))
    body = {"prompt": "a", "n_predict": 1}
    code, d, _ = c.post("/completion", body)
    assert code == 401 and d == {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
    assert c.post("/completion", body, headers={"Authorization": "Bearer nope"})[0] == 401
    assert c.post("/completion", body, headers={"Authorization": "Bearer k2"})[0] == 200
    assert c.post("/completion", body, headers={"X-Api-Key": "k1"})[0] == 200
    # public: the health checks and the web UI's files; everything else needs the key
    for path in ("/health", "/v1/health", "/", "/sw.js", "/manifest.webmanifest", "/_app/version.json"):
        assert c.get(path)[0] == 200, path
    for path in ("/props", "/v1/models", "/models", "/slots", "/metrics"):
        assert c.get(path)[0] == 401, path
    assert c.get("/v1/models", headers={"Authorization": "Bearer k1"})[0] == 200


def test_cors() -> None:
    c, _ = make(ServerConfig(api_keys=["k"]))
    code, _, h = c.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert code == 200 and h["Access-Control-Allow-Origin"] == "http://example.com"
    assert h["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS" and h["Access-Control-Allow-Headers"] == "*"
    assert h["Access-Control-Allow-Credentials"] == "true"
    _, _, h = c.get("/health", headers={"Origin": "http://example.com"})
    assert h["Access-Control-Allow-Origin"] == "http://example.com" and h["Access-Control-Allow-Credentials"] == "true"
    c2, _ = make(ServerConfig(cors_origins="localhost"))
    assert "Access-Control-Allow-Origin" not in c2.get("/health", headers={"Origin": "http://evil.com"})[2]
    assert c2.get("/health", headers={"Origin": "http://localhost:3000"})[2]["Access-Control-Allow-Origin"]


def test_loading_state_is_503() -> None:
    app = create_app(None, ServerConfig())
    c = Client(app)
    for path in ("/health", "/v1/health"):
        code, d, _ = c.get(path)
        assert code == 503 and d == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
    assert c.post("/completion", {"prompt": "a"})[0] == 503
    tok = FakeTokenizer()
    app.extensions["llama"].set_ready(FakeEngine(tokenizer=tok), fake_model(tok))
    assert c.get("/health")[0] == 200


def test_ui_page() -> None:
    c, _ = make(ServerConfig())
    code, text, h = c.get("/")
    assert code == 200 and h["Content-Type"].startswith("text/html") and 'src="static/js/app.js"' in text
    assert "script-src 'self'" in h["Content-Security-Policy"]
    code, js, h = c.get("/static/js/stream.js")
    assert code == 200 and h["Content-Type"].startswith("text/javascript") and "v1/chat/completions" in js
    code, _, h = c.get("/static/vendor/dompurify/purify.min.js")
    assert code == 200 and "max-age" in h["Cache-Control"]
    for bad in ("/static/../app.py", "/static/%2e%2e/app.py", "/static/js/nope.js", "/static/"):
        assert c.get(bad)[0] == 404, bad
    c, _ = make(ServerConfig(ui=False))
    assert c.get("/")[0] == 404
    assert c.get("/static/js/app.js")[0] == 404


def test_ui_is_public_and_served_while_loading() -> None:
    c, _ = make(ServerConfig(api_keys=["k"]))
    assert c.get("/")[0] == 200 and c.get("/static/app.css")[0] == 200
    assert c.get("/props")[0] == 401
    c = Client(create_app(None, ServerConfig()))
    assert c.get("/")[0] == 200 and c.get("/static/js/app.js")[0] == 200
    assert c.get("/props")[0] == 503


def test_shutdown_ends_responses_without_waiting_for_the_engine() -> None:
    tok = FakeTokenizer()
    eng = FakeEngine(tokenizer=tok, delay=0.2, reply="x" * 100)
    st = ServerState(ServerConfig())
    st.set_ready(eng, fake_model(tok))

    async def go() -> list[Any]:
        (task,) = st.submit([Task([BOS, 20], TaskParams())])
        out = []
        async for _, r in st.results([task]):
            out.append(r)
            if len(out) == 1:
                asyncio.get_running_loop().call_soon(st.cancel_all)  # what a shutdown signal does
        while not task.results.closed:
            await asyncio.sleep(0.05)
        return out

    t0 = time.monotonic()
    out = asyncio.run(go())
    assert isinstance(out[-1], Final) and out[-1].stop_type == "cancelled" and out[-1].content == "x"
    assert time.monotonic() - t0 < 2


def test_sse_pings_while_the_engine_is_quiet() -> None:
    c, _ = make(ServerConfig(), delay=0.3, reply="ab")
    _, text, _ = c.post("/completion", {"prompt": "a", "stream": True, "sse_ping_interval": 0.1})
    assert ": ping\n\n" in text and text.count("data: ") == 3
    _, text, _ = c.post("/v1/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": "a"}], "stream": True,
                                         "sse_ping_interval": 0.1})
    assert text.count("event: ping") >= 2
    _, text, _ = c.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "stream": True,
                                                 "sse_ping_interval": -1})
    assert ": ping" not in text and text.endswith("data: [DONE]\n\n")


# ---- tool calling (core/tool_calls through the adapters) ---------------------------------------


def test_chat_tool_call_non_streaming() -> None:
    c, eng = make(reply=CALL_REPLY, n_ctx=4096)
    code, d, _ = c.post("/v1/chat/completions", {"messages": ASK, "tools": [WEATHER], "tool_choice": "required"})
    assert code == 200, d
    ch = d["choices"][0]
    assert ch["finish_reason"] == "tool_calls" and ch["message"]["content"] is None
    (call,) = ch["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    p = eng.submitted[-1].params
    assert p.grammar is not None and p.grammar.kind == "json_schema"  # the call is constrained
    assert "get_weather" in eng.tokenizer.detokenize(eng.submitted[-1].prompt_tokens)  # tools reach the prompt
    assert d["usage"]["completion_tokens"] == len(CALL_REPLY) and d["timings"]


def test_chat_tool_call_streaming() -> None:
    c, _ = make(reply=CALL_REPLY, n_ctx=4096)
    code, text, _ = c.post("/v1/chat/completions", {"messages": ASK, "tools": [WEATHER], "tool_choice": "required",
                                                    "stream": True, "stream_options": {"include_usage": True}})
    assert code == 200
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert all("name" not in t["function"] and t["index"] == 0 for t in calls[1:]) and len(calls) > 2
    assert json.loads("".join(t["function"]["arguments"] for t in calls)) == {"city": "Paris"}
    assert not any(d.get("content") for d in deltas)
    finishes = [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]]
    assert finishes[-1] == "tool_calls" and chunks[-1]["usage"]["completion_tokens"] == len(CALL_REPLY)


def test_chat_tool_choice_none_and_plain_text() -> None:
    c, eng = make(reply="Sunny.", n_ctx=4096)
    for choice in ("none", "auto"):
        code, d, _ = c.post("/v1/chat/completions", {"messages": ASK, "tools": [WEATHER], "tool_choice": choice})
        assert code == 200 and d["choices"][0]["message"]["content"] == "Sunny.", d
        assert d["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in d["choices"][0]["message"]
    code, text, _ = c.post("/v1/chat/completions", {"messages": ASK, "tools": [WEATHER], "tool_choice": "none", "stream": True})
    deltas = [json.loads(e)["choices"][0]["delta"] for e in sse_events(text)[:-1]]
    assert "".join(d.get("content") or "" for d in deltas) == "Sunny."
    assert eng.submitted[-1].params.grammar is None


def test_tool_result_round_trips_through_the_template() -> None:
    c, eng = make(reply="It is 22 C in Paris.", n_ctx=4096)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "22 C, sunny"}]
    code, d, _ = c.post("/v1/chat/completions", {"messages": msgs, "tools": [WEATHER]})
    assert code == 200 and d["choices"][0]["message"]["content"] == "It is 22 C in Paris.", d
    prompt = eng.tokenizer.detokenize(eng.submitted[-1].prompt_tokens)
    assert "22 C, sunny" in prompt and "Paris" in prompt
    # without tools in the request the tool turns still render
    code, d, _ = c.post("/v1/chat/completions", {"messages": msgs})
    assert code == 200 and "22 C, sunny" in eng.tokenizer.detokenize(eng.submitted[-1].prompt_tokens)


def test_anthropic_tool_use() -> None:
    c, _ = make(reply=CALL_REPLY, n_ctx=4096)
    tool = {"name": "get_weather", "description": "Weather of a city", "input_schema": WEATHER["function"]["parameters"]}
    body = {"max_tokens": 200, "messages": ASK, "tools": [tool], "tool_choice": {"type": "any"}}
    code, d, _ = c.post("/v1/messages", body)
    assert code == 200, d
    assert d["stop_reason"] == "tool_use"
    (block,) = d["content"]
    assert block["type"] == "tool_use" and block["name"] == "get_weather" and block["input"] == {"city": "Paris"}
    code, text, _ = c.post("/v1/messages", {**body, "stream": True})
    evs = [(m.split("\n")[0][len("event: "):], json.loads(m.split("\n")[1][len("data: "):])) for m in text.split("\n\n") if m]
    starts = [e for n, e in evs if n == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["tool_use"] and starts[0]["content_block"]["name"] == "get_weather"
    parts = [e["delta"]["partial_json"] for n, e in evs if n == "content_block_delta"]
    assert json.loads("".join(parts)) == {"city": "Paris"}
    assert [n for n, _ in evs][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert evs[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_bad_tools_are_400() -> None:
    c, _ = make()
    bad = [
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": "string"}}]},
        {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}},
        {"tools": [WEATHER], "tool_choice": "sometimes"},
        {"tool_choice": "required"},
        {"tools": [WEATHER], "grammar": "root ::= \"x\""},
    ]
    for extra in bad:
        code, d, _ = c.post("/v1/chat/completions", {"messages": ASK, **extra})
        assert code == 400 and d["error"]["type"] == "invalid_request_error" and d["error"]["code"] == 400, (extra, d)
    code, d, _ = c.post("/v1/messages", {"max_tokens": 8, "messages": ASK, "tools": [{"input_schema": {}}]})
    assert code == 400 and d["error"]["type"] == "invalid_request_error", d


# ---- llama-server compatibility (issue 11) -------------------------------------------------------
def test_models_aliases_and_tags() -> None:
    """--alias a,b,c / --tags: /v1/models lists both (sorted, as llama-server's std::set) and the
    id is the first alias in that order; responses name the same id."""
    c, _ = make(ServerConfig(aliases=["tinyllama-2", "fim", "code"], tags=["small", "chat", "fim"]))
    _, d, _ = c.get("/v1/models")
    (m,) = d["data"]
    assert m["id"] == "code" and m["aliases"] == ["code", "fim", "tinyllama-2"] and m["tags"] == ["chat", "fim", "small"]
    assert m["meta"]["n_ctx"] == 128
    assert c.get("/props")[1]["model_alias"] == "code"
    _, d, _ = c.post("/v1/chat/completions", {"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": "hi"}]})
    assert d["model"] == "code"


def test_cors_origin_rules() -> None:
    """llama-server's rules: `*` reflects any Origin, `localhost` only localhost hosts (any
    port, IPv6 included, never a lookalike), an explicit origin is sent as given."""
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization"}
    c, _ = make(ServerConfig())
    assert c.request("OPTIONS", "/completions", headers={"Origin": "localhost", **pre})[2]["Access-Control-Allow-Origin"] == "localhost"
    c, _ = make(ServerConfig(cors_origins="localhost"))
    for origin in ("http://localhost", "http://localhost:8080", "http://127.0.0.1:3000", "http://[::1]", "http://[::1]:3000"):
        code, _, h = c.request("OPTIONS", "/completions", headers={"Origin": origin, **pre})
        assert code == 200 and h["Access-Control-Allow-Origin"] == origin, origin
    for origin in ("http://evil.com", "http://notlocalhost", "http://localhost.evil.com"):
        code, _, h = c.request("OPTIONS", "/completions", headers={"Origin": origin, **pre})
        assert code == 200 and "Access-Control-Allow-Origin" not in h, origin
    c, _ = make(ServerConfig(cors_origins="https://app.example"))
    assert c.get("/health", headers={"Origin": "https://other.example"})[2]["Access-Control-Allow-Origin"] == "https://app.example"


def test_metrics_header_and_counters() -> None:
    c, _ = make(ServerConfig(metrics=True))
    c.post("/completion", {"prompt": "a", "n_predict": 2})
    code, text, h = c.get("/metrics")
    assert code == 200 and int(h["Process-Start-Time-Unix"]) > 0
    for name, kind in [("prompt_tokens_cached_total", "counter"), ("spec_decode_num_drafts_total", "counter"),
                       ("spec_decode_num_accepted_tokens_total", "counter"), ("n_busy_slots_per_decode", "gauge")]:
        assert f"# TYPE llamacpp:{name} {kind}" in text and f"# HELP llamacpp:{name} " in text


def test_timings_rate_excludes_the_first_token() -> None:
    """The first token comes from the prompt's last batch: llama-server's rate is over n-1 steps."""
    from llamacli.core.runtime.tasks import Timings

    one = Timings(prompt_n=3, prompt_ms=6.0, predicted_n=1, predicted_ms=0.5).to_dict()
    assert one["predicted_per_second"] == 0.0 and one["predicted_per_token_ms"] == 0.0
    many = Timings(prompt_n=3, prompt_ms=6.0, predicted_n=16, predicted_ms=30.0).to_dict()
    assert many["predicted_per_second"] == pytest.approx(1e3 / 30.0 * 15, abs=1e-6) and many["predicted_per_token_ms"] == 2.0


def test_slot_shows_its_last_task() -> None:
    """After a task the idle slot shows that task's params, with next_token as a list whose
    budget does not leak (n_remain -1, n_decoded 0)."""
    from llamacli.core.runtime.slot import Slot
    from llamacli.core.runtime.tasks import Task, TaskParams
    from llamacli.http.native import slot_json

    s = Slot(0, 64)
    s.task = Task([1, 2, 3], TaskParams(n_predict=8))
    s.generated = [5, 6]
    busy = slot_json(s, 64, TaskParams())
    assert busy["is_processing"] and busy["next_token"][0]["n_remain"] == 6 and busy["params"]["n_predict"] == 8
    s.release()
    idle = slot_json(s, 64, TaskParams())
    assert not idle["is_processing"] and idle["id_task"] == busy["id_task"] and idle["params"]["n_predict"] == 8
    assert idle["next_token"][0]["n_remain"] == -1 and idle["next_token"][0]["n_decoded"] == 0


def test_cors_proxy() -> None:
    """/cors-proxy is 403 unless --ui-mcp-proxy; with it, only x-llama-server-proxy-header-*
    headers reach the target (the caller's key, cookies and proxy credentials never do)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.update({k.lower(): v for k, v in self.headers.items()})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    target = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    try:
        url = f"/cors-proxy?url=http://127.0.0.1:{target.server_port}/x"
        c, _ = make(ServerConfig())
        code, d, _ = c.get(url)
        assert code == 403 and d["error"]["type"] == "feature_disabled"
        c, _ = make(ServerConfig(ui_mcp_proxy=True, api_keys=["k"]))
        code, text, _ = c.get(url, headers={"Authorization": "Bearer k", "Cookie": "s=1", "Proxy-Authorization": "Basic x",
                                            "x-llama-server-proxy-header-accept": "application/json",
                                            "x-llama-server-proxy-header-authorization": "Bearer explicit"})
        assert code == 200 and text == "ok"
        assert seen["accept"] == "application/json" and seen["authorization"] == "Bearer explicit"
        assert "cookie" not in seen and "proxy-authorization" not in seen and "x-api-key" not in seen
        assert c.get("/cors-proxy?url=ftp://x/y", headers={"Authorization": "Bearer k"})[0] == 400
    finally:
        target.shutdown()
        target.server_close()


def test_canonical_header_case() -> None:
    from llamacli.http.header_case import canonical

    assert canonical(b"access-control-allow-origin") == b"Access-Control-Allow-Origin"
    assert canonical(b"process-start-time-unix") == b"Process-Start-Time-Unix"


def test_chat_prompt_endings() -> None:
    """add_generation_prompt false leaves the assistant header out; continue_final_message (vLLM)
    continues a final assistant message like the prefill, text parts joined by blank lines; both
    true is a 400; invalid message lists are 400s."""
    c, _ = make(ServerConfig())
    user = [{"role": "user", "content": "Hi"}]
    _, d, _ = c.post("/apply-template", {"messages": user})
    assert d["prompt"].endswith("<|im_start|>assistant\n")
    _, d, _ = c.post("/apply-template", {"messages": user, "add_generation_prompt": False})
    assert "assistant" not in d["prompt"] and d["prompt"].endswith("<|im_end|>\n")
    pre = user + [{"role": "assistant", "content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]}]
    _, auto, _ = c.post("/apply-template", {"messages": pre})
    _, cont, _ = c.post("/apply-template", {"messages": pre, "continue_final_message": True, "add_generation_prompt": False})
    assert auto["prompt"] == cont["prompt"] and cont["prompt"].endswith("<|im_start|>assistant\nWh\n\nill")
    code, d, _ = c.post("/v1/chat/completions", {"messages": pre, "continue_final_message": True, "add_generation_prompt": True})
    assert code == 400 and d["error"]["type"] == "invalid_request_error"
    for bad in (None, "string", [123], [{}], [{"role": 123}], [{"role": "system", "content": 123}],
                [{"role": "system", "content": "t"}, {}],
                [{"role": "user", "content": "t"}, {"role": "assistant", "content": "t"}, {"role": "assistant", "content": "t"}]):
        code, d, _ = c.post("/chat/completions", {"messages": bad})
        assert code == 400 and "error" in d, bad


def test_reasoning_off_closes_the_thinking_block() -> None:
    """enable_thinking false (chat_template_kwargs, reasoning_effort "none", --reasoning off):
    the prompt ends with the empty thinking block the template's model expects."""
    from llamacli.core.chat_templates.thinking import close_thinking

    deepseek = "{{ '<｜Assistant｜><think>\\n' if add_generation_prompt }}"
    assert close_thinking("<｜Assistant｜><think>\n", deepseek) == "<｜Assistant｜><think>\n</think>"
    cmdr = "{% if x %}<|START_THINKING|>{{ t }}<|END_THINKING|>{% endif %}<|CHATBOT_TOKEN|>"
    assert close_thinking("<|CHATBOT_TOKEN|>", cmdr) == "<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>"
    assert close_thinking("assistant\n<think>\n\n</think>\n\n", "<think></think>") == "assistant\n<think>\n\n</think>\n\n"
    assert close_thinking("assistant\n", "no tags") == "assistant\n"
    tok = FakeTokenizer()
    src = "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<A><think>\n{% endif %}"
    c = Client(create_app(FakeEngine(tokenizer=tok), ServerConfig(), fake_model(tok, src)))
    msgs = [{"role": "user", "content": "Q"}]
    assert c.post("/apply-template", {"messages": msgs})[1]["prompt"] == "Q<A><think>\n"
    for extra in ({"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}):
        assert c.post("/apply-template", {"messages": msgs, **extra})[1]["prompt"] == "Q<A><think>\n</think>", extra
    c = Client(create_app(FakeEngine(tokenizer=tok), ServerConfig(chat_template_kwargs={"enable_thinking": False}), fake_model(tok, src)))
    assert c.post("/apply-template", {"messages": msgs})[1]["prompt"] == "Q<A><think>\n</think>"


def test_verbose_and_token_count_routes() -> None:
    """`verbose` (or --verbose) adds llama-server's __verbose with the rendered prompt; the
    token-count routes answer under both prefixes; usage chunks carry timings."""
    c, _ = make(ServerConfig())
    msgs = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
    _, d, _ = c.post("/chat/completions", {"messages": msgs, "max_tokens": 2, "verbose": True})
    assert "Book" in d["__verbose"]["prompt"] and d["__verbose"]["tokens_evaluated"] > 0
    assert "__verbose" not in c.post("/chat/completions", {"messages": msgs, "max_tokens": 2})[1]
    c2, _ = make(ServerConfig(verbose=True))
    assert "__verbose" in c2.post("/v1/completions", {"prompt": "a", "max_tokens": 2})[1]
    counts = {p: c.post(p, {"messages": msgs})[1]["input_tokens"] for p in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens")}
    assert len(set(counts.values())) == 1 and counts["/chat/completions/input_tokens"] > 5
    for p in ("/responses/input_tokens", "/v1/responses/input_tokens"):
        code, d, _ = c.post(p, {"instructions": "Book", "input": "What is the best book"})
        assert code == 200 and d["input_tokens"] == counts["/chat/completions/input_tokens"], p
    code, text, _ = c.post("/chat/completions", {"messages": msgs, "max_tokens": 3, "stream": True,
                                                  "stream_options": {"include_usage": True}})
    chunks = [json.loads(ln[6:]) for ln in text.splitlines() if ln.startswith("data: {")]
    usage = [ch for ch in chunks if not ch["choices"]]
    assert len(usage) == 1 and "predicted_n" in usage[0]["timings"] and "timings" not in chunks[0]


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
