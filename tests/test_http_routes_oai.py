"""http/routes_oai.py and http/oai.py: the OpenAI chat and text completions over the fake
engine (shapes, streaming, prompts, tool calls), and the OpenAI field translation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llamacli.http import oai
from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from llamacli.http.errors import ApiError
from tests.fakes import FakeEngine, FakeTokenizer, fake_model
from tests.http_app_client import ASK, CALL_REPLY, WEATHER, Client, client, make, sse_events  # noqa: F401 (a fixture)


def test_openai_fields_are_renamed() -> None:
    f = oai.native_fields({"max_tokens": 5, "logprobs": True, "top_logprobs": 3}, chat=True)
    assert f["n_predict"] == 5 and f["n_probs"] == 3
    f = oai.native_fields({"max_completion_tokens": 6, "max_tokens": 5, "logprobs": True}, chat=True)
    assert f["n_predict"] == 6 and f["n_probs"] == 1
    assert oai.native_fields({"logprobs": 2}, chat=False)["n_probs"] == 2
    with pytest.raises(ApiError):
        oai.native_fields({"max_tokens": "5"}, chat=True)


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


def test_text_completions(client: Client) -> None:
    code, d, _ = client.post("/v1/completions", {"prompt": ["a", "b"], "max_tokens": 2, "echo": True, "logprobs": 1})
    assert code == 200 and d["object"] == "text_completion"
    assert [c["text"] for c in d["choices"]] == ["aHe", "bHe"]
    lp = d["choices"][0]["logprobs"]
    assert lp["tokens"] == ["H", "e"] and lp["text_offset"] == [1, 2] and lp["top_logprobs"][0] == {"H": np.log(0.5)}
    code, text, _ = client.post("/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True})
    events = sse_events(text)
    assert events[-1] == "[DONE]" and json.loads(events[0])["choices"][0]["text"] == "H"


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
    from llamacli.core.text.chat_templates.thinking import close_thinking

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
