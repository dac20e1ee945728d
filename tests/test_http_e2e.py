"""End to end: one real `llama serve` (the demo model) for the module, driven by the official
`openai` client and by plain HTTP. Generations are kept to a few tokens (the NumPy engine
decodes a few tokens per second on a shared CPU)."""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from typing import Any
from urllib.parse import urlparse

import numpy as np
import openai
import pytest

from tests.http_server import LlamaServer

pytestmark = pytest.mark.slow

MSGS = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def srv(demo_model: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    slots_dir = tmp_path_factory.mktemp("slots")
    with LlamaServer(
        "-m", demo_model, "-c", "1024", "-np", "2", "-a", "demo,demo-2", "--temp", "0", "--metrics",
        "--embeddings", "--slot-save-path", str(slots_dir),
    ) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv: LlamaServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-no-key-required", max_retries=0, timeout=120)


def sse_stream(srv: LlamaServer, path: str, body: dict[str, Any]) -> tuple[bytes, list[Any]]:
    """POST and read the raw SSE bytes; returns them and the decoded data payloads."""
    u = urlparse(srv.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream")
    raw = resp.read()
    conn.close()
    events = []
    for msg in raw.decode("utf-8").split("\n\n")[:-1]:
        assert msg.startswith("data: ") and "\n" not in msg, msg
        payload = msg[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    assert raw.endswith(b"\n\n")
    return raw, events


# ---- OpenAI client -------------------------------------------------------------------------------


def test_chat_and_stream_agree(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="demo", messages=MSGS, max_tokens=4)
    c = r.choices[0]
    assert r.object == "chat.completion" and r.model == "demo" and c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content and c.finish_reason in ("length", "stop")
    assert r.usage.completion_tokens <= 4 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.model_extra["timings"]["predicted_n"] == r.usage.completion_tokens
    chunks = list(client.chat.completions.create(model="demo", messages=MSGS, max_tokens=4, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == c.message.content  # greedy: the stream says what the plain answer said
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == c.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0  # the same prompt came from the cache


def test_chat_logprobs(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="demo", messages=MSGS, max_tokens=3, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 2
        assert item.top_logprobs[0].logprob >= item.top_logprobs[1].logprob
        assert item.token == item.top_logprobs[0].token  # greedy picks the most likely token
    assert "".join(i.token for i in content) == r.choices[0].message.content


def test_text_completions_with_logprobs_and_echo(client: openai.OpenAI) -> None:
    r = client.completions.create(model="demo", prompt="The capital of France is", max_tokens=3, logprobs=2, echo=True)
    c = r.choices[0]
    assert r.object == "text_completion" and c.text.startswith("The capital of France is")
    assert len(c.logprobs.tokens) == 3 and len(c.logprobs.top_logprobs[0]) <= 2
    assert all(lp <= 0 for lp in c.logprobs.token_logprobs)


def test_embeddings_and_models(client: openai.OpenAI) -> None:
    r = client.embeddings.create(model="demo", input=["hello", "a longer sentence about cats"])
    assert [d.index for d in r.data] == [0, 1] and r.usage.prompt_tokens > 2
    a, b = (np.array(d.embedding) for d in r.data)
    assert a.shape == (640,) and abs(np.linalg.norm(a) - 1) < 1e-4 and not np.allclose(a, b)
    models = client.models.list()
    assert [m.id for m in models.data] == ["demo"] and models.data[0].model_extra["meta"]["n_vocab"] == 262144


def test_errors_are_openai_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "word " * 700}], max_tokens=1)
    err = e.value.body if "type" in e.value.body else e.value.body["error"]
    assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 512 and err["n_prompt_tokens"] > 512
    # any model name is served, as by llama-server (OpenAI scripts keep their model names)
    r = client.chat.completions.create(model="gpt-4", messages=MSGS, max_tokens=1)
    assert r.model == "demo" and r.usage.completion_tokens == 1
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="demo", messages=MSGS, max_tokens=1, temperature="hot")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="demo", messages=MSGS, extra_body={"n_predict": -7})


# ---- native endpoints over plain HTTP -------------------------------------------------------------


def test_completion_prompt_forms(srv: LlamaServer) -> None:
    code, tok = srv.post("/tokenize", {"content": "The sky is", "add_special": True})
    assert code == 200
    ids = tok["tokens"]
    code, a = srv.post("/completion", {"prompt": "The sky is", "n_predict": 3, "return_tokens": True})
    assert code == 200 and a["tokens_evaluated"] == len(ids) and len(a["tokens"]) == a["tokens_predicted"]
    code, b = srv.post("/completion", {"prompt": ids, "n_predict": 3})
    assert b["content"] == a["content"] and b["prompt"] == a["prompt"]
    code, c = srv.post("/completion", {"prompt": [ids[0], "The sky is"], "n_predict": 1})
    assert c["tokens_evaluated"] == len(ids)  # the string after a token gets no BOS of its own
    code, many = srv.post("/completion", {"prompt": ["The sky is", ids], "n_predict": 3})
    assert code == 200 and [m["index"] for m in many] == [0, 1]
    assert many[0]["content"] == many[1]["content"] == a["content"]


def test_tokens_cached_counts_the_slots_tokens(srv: LlamaServer) -> None:
    """`tokens_cached` is what the slot holds at the end (the prompt and every generated token
    but the last, which is sampled and not evaluated); the reuse is `timings.cache_n`. The
    figures are llama-server's (/work/ref build, demo model, one slot) for the same requests."""
    code, a = srv.post("/completion", {"prompt": "The capital of France is", "n_predict": 5, "id_slot": 1})
    assert code == 200 and (a["tokens_evaluated"], a["tokens_predicted"], a["tokens_cached"]) == (6, 5, 10)
    code, b = srv.post("/completion", {"prompt": "Hello", "n_predict": 4, "id_slot": 1})
    assert code == 200 and (b["tokens_evaluated"], b["tokens_cached"], b["timings"]["cache_n"]) == (2, 5, 1)


def test_completion_stream_sse(srv: LlamaServer) -> None:
    _, plain = srv.post("/completion", {"prompt": "One, two,", "n_predict": 4, "n_probs": 2})
    assert len(plain["completion_probabilities"]) == plain["tokens_predicted"]
    _, events = sse_stream(srv, "/completion", {"prompt": "One, two,", "n_predict": 4, "stream": True})
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == plain["content"]
    assert events[-1]["stop_type"] == plain["stop_type"] and "timings" in events[-1]


def test_end_token_is_returned_and_counted(srv: LlamaServer) -> None:
    """A generation that ends on an end-of-generation token returns and counts it, as
    llama-server does (/work/ref build, demo model, these requests: the same tokens and counts):
    `tokens` ends with it, tokens_predicted, predicted_n and usage.completion_tokens count it, its
    stream chunk (content "") carries it, its probabilities entry has empty text; a complete
    grammar lets only an end token follow, which is sampled the next step."""
    body = {"prompt": "The capital of France is", "n_predict": 12, "logit_bias": [[1, 10]], "n_probs": 1}
    code, a = srv.post("/completion", body | {"return_tokens": True})
    assert code == 200 and (a["stop_type"], a["content"]) == ("eos", " the capital of the country")
    assert a["tokens"] == [506, 5279, 529, 506, 2891, 1]  # <eos> (1) last
    assert a["tokens_predicted"] == a["timings"]["predicted_n"] == 6 and a["tokens_cached"] == 11
    assert [(p["id"], p["token"], p["bytes"]) for p in a["completion_probabilities"]][-1] == (1, "", [])
    _, events = sse_stream(srv, "/completion", body | {"stream": True})
    assert [(e["content"], e["tokens"], e["tokens_predicted"]) for e in events[-2:]] == [("", [1], 6), ("", [], 6)]
    assert events[-2]["completion_probabilities"][0]["id"] == 1 and events[-1]["timings"]["predicted_n"] == 6
    code, o = srv.post("/v1/completions", {"prompt": body["prompt"], "max_tokens": 12, "logit_bias": {"1": 10}, "logprobs": 1})
    assert o["usage"]["completion_tokens"] == 6 and o["choices"][0]["logprobs"]["content"][-1]["token"] == ""
    _, chunks = sse_stream(srv, "/v1/completions", {"prompt": body["prompt"], "max_tokens": 12, "logit_bias": {"1": 10},
                                                    "stream": True})
    texts = [c["choices"][0]["text"] for c in chunks if c != "[DONE]" and c["choices"]]
    assert texts == [" the", " capital", " of", " the", " country", "", ""]  # the end token's, the finish
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-2]["usage"]["completion_tokens"] == 6
    chat = {"messages": [{"role": "user", "content": body["prompt"]}], "max_tokens": 12, "logit_bias": {"1": 8},
            "logprobs": True, "stream": True, "stream_options": {"include_usage": True}}
    _, events = sse_stream(srv, "/v1/chat/completions", chat)
    steps = [e["choices"][0] for e in events if e != "[DONE]" and e["choices"] and e["choices"][0].get("logprobs")]
    usage = next(e["usage"] for e in events if e != "[DONE]" and e.get("usage"))
    assert steps and all(c["delta"]["content"] for c in steps)  # the end token's empty text gets no chunk, as llama-server
    assert usage["completion_tokens"] == len(steps) + 1  # and is counted
    code, g = srv.post("/completion", {"prompt": body["prompt"], "grammar": 'root ::= " the capital"', "return_tokens": True})
    assert (g["content"], g["tokens"], g["tokens_predicted"], g["stop_type"]) == (" the capital", [506, 5279, 1], 3, "eos")


def test_stop_string_tokens_carry_no_probabilities(srv: LlamaServer) -> None:
    """After a stop string, the whole answer's probabilities leave out as many tokens from
    the end as the string has (" of the": 2), as llama-server's do (/work/ref build, demo
    model, this request: ids 506 and 5279); `tokens` keeps them all."""
    body = {"prompt": "The capital of France is", "n_predict": 12, "n_probs": 1, "stop": [" of the"], "return_tokens": True}
    code, a = srv.post("/completion", body)
    assert code == 200 and (a["stop_type"], a["content"], a["tokens_predicted"]) == ("word", " the capital", 4)
    assert a["tokens"] == [506, 5279, 529, 506] and [p["id"] for p in a["completion_probabilities"]] == [506, 5279]
    code, o = srv.post("/v1/completions", {"prompt": body["prompt"], "max_tokens": 12, "stop": [" of the"], "logprobs": 1})
    assert o["usage"]["completion_tokens"] == 4 and o["choices"][0]["logprobs"]["tokens"] == [" the", " capital"]


def test_tokenize_detokenize_template(srv: LlamaServer) -> None:
    _, d = srv.post("/tokenize", {"content": "héllo", "with_pieces": True})
    pieces = d["tokens"]
    assert all(set(p) == {"id", "piece"} for p in pieces)
    _, back = srv.post("/detokenize", {"tokens": [p["id"] for p in pieces]})
    assert back == {"content": "héllo"}
    _, t = srv.post("/apply-template", {"messages": MSGS})
    assert "Name a colour." in t["prompt"] and t["prompt"].endswith("model\n")


def test_infill_needs_fim_tokens(srv: LlamaServer) -> None:
    code, d = srv.post("/infill", {"input_prefix": "def f(", "input_suffix": "):\n"})
    assert code == 501 and d["error"]["type"] == "not_supported_error" and "fill-in-the-middle" in d["error"]["message"]


def test_anthropic_messages(srv: LlamaServer) -> None:
    body = {"model": "demo", "max_tokens": 3, "system": "Be brief.", "messages": MSGS}
    code, m = srv.post("/v1/messages", body)
    assert code == 200 and m["type"] == "message" and m["content"][0]["type"] == "text"
    assert m["stop_reason"] in ("max_tokens", "end_turn") and m["usage"]["output_tokens"] <= 3
    u = urlparse(srv.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request("POST", "/v1/messages", json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
    raw = conn.getresponse().read().decode()
    conn.close()
    kinds = [blk.split("\n")[0].removeprefix("event: ") for blk in raw.split("\n\n") if blk]
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    deltas = [json.loads(blk.split("\n")[1][6:])["delta"]["text"] for blk in raw.split("\n\n") if blk.startswith("event: content_block_delta")]
    assert "".join(deltas) == m["content"][0]["text"]
    _, n = srv.post("/v1/messages/count_tokens", body)
    _, n2 = srv.post("/v1/chat/completions/input_tokens", {"messages": [{"role": "system", "content": "Be brief."}] + MSGS})
    assert n["input_tokens"] == n2["input_tokens"] > 5


def test_props_slots_metrics_and_slot_files(srv: LlamaServer) -> None:
    _, p = srv.get("/props")
    assert p["total_slots"] == 2 and p["default_generation_settings"]["n_ctx"] == 512
    assert p["default_generation_settings"]["params"]["temperature"] == 0.0 and p["model_alias"] == "demo"
    srv.post("/completion", {"prompt": "Slot zero holds this prompt", "n_predict": 1, "id_slot": 0})
    code, saved = srv.post("/slots/0?action=save", {"filename": "s0.bin"})
    assert code == 200 and saved["n_saved"] > 5 and saved["n_written"] > 0
    assert srv.post("/slots/1?action=restore", {"filename": "s0.bin"})[1]["n_restored"] == saved["n_saved"]
    assert srv.post("/slots/0?action=erase")[1] == {"id_slot": 0, "n_erased": saved["n_saved"]}
    assert srv.post("/slots/0?action=restore", {"filename": "../etc/passwd"})[0] == 400
    code, slots = srv.get("/slots")
    assert code == 200 and [s["id"] for s in slots] == [0, 1] and slots[1]["n_cached_tokens"] == saved["n_saved"]
    code, text = srv.get("/metrics")
    values = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln.startswith("llamacpp:")}
    assert code == 200 and values["llamacpp:prompt_tokens_total"] > 0 and values["llamacpp:n_decode_total"] > 0


def test_bad_requests_are_4xx(srv: LlamaServer) -> None:
    for raw in (b"{nope", b"[1]", b""):
        code, d = srv.request("POST", "/completion", raw=raw)
        assert code == 400 and d["error"]["type"] == "invalid_request_error"
    for body in ({"prompt": "a", "n_predict": -5}, {"prompt": "a", "top_k": "x"}, {"prompt": [999999999]},
                 {"prompt": "a", "grammar": "root ::= ("}, {"prompt": "a", "json_schema": {"type": "nonsense"}}):
        code, d = srv.post("/completion", body)
        assert code == 400 and d["error"]["code"] == 400 and d["error"]["message"], body
    assert srv.get("/nope")[0] == 404


def metric(text: str, name: str) -> float:
    return next(float(ln.split()[1]) for ln in text.splitlines() if ln.startswith(f"llamacpp:{name} "))


def test_disconnect_cancels_the_task(srv: LlamaServer) -> None:
    _, before = srv.get("/metrics")
    u = urlparse(srv.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request("POST", "/completion", json.dumps({"prompt": "Once upon a time", "n_predict": 400, "stream": True}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.read1(256).startswith(b"data: ")  # generation has started
    conn.close()  # the client goes away mid-stream
    t0 = time.monotonic()
    while True:
        _, slots = srv.get("/slots")
        if not any(s["is_processing"] for s in slots):
            break
        assert time.monotonic() - t0 < 20, slots
        time.sleep(0.1)
    _, after = srv.get("/metrics")
    generated = metric(after, "tokens_predicted_total") - metric(before, "tokens_predicted_total")
    assert 1 <= generated < 40  # stopped right after the client left, far from n_predict


def test_concurrent_streams(srv: LlamaServer, client: openai.OpenAI) -> None:
    _, before = srv.get("/metrics")
    results: dict[int, str] = {}

    def run(i: int) -> None:
        stream = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": f"Count to {i + 3}."}], max_tokens=5, stream=True
        )
        results[i] = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]  # 3 requests, 2 slots: one waits
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(results) == [0, 1, 2] and all(results.values())
    _, after = srv.get("/metrics")
    decodes = metric(after, "n_decode_total") - metric(before, "n_decode_total")
    tokens = metric(after, "tokens_predicted_total") - metric(before, "tokens_predicted_total")
    assert tokens > decodes  # several slots advanced in the same forward pass
    assert not math.isnan(metric(after, "n_busy_slots_per_decode"))


def test_embeddings_native(srv: LlamaServer) -> None:
    code, d = srv.post("/embedding", {"content": "hello", "embd_normalize": 2})
    assert code == 200 and d[0]["index"] == 0 and len(d[0]["embedding"]) == 1 and len(d[0]["embedding"][0]) == 640
    assert abs(float(np.linalg.norm(d[0]["embedding"][0])) - 1) < 1e-4


# ---- tool calling --------------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tool_calls_openai_client(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="demo", messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=64)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, c
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Paris", "London", "Tokyo")
    chunks = list(client.chat.completions.create(model="demo", messages=ASK, tools=[WEATHER], tool_choice="required",
                                                 max_tokens=64, stream=True))
    calls = [t for ch in chunks if ch.choices for t in (ch.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "get_weather" and calls[0].id
    assert all(t.function.name is None for t in calls[1:])
    assert "".join(t.function.arguments or "" for t in calls) == call.function.arguments  # greedy: same call
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    # the tool's result goes back through the template; tool_choice none answers in text
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                  {"role": "tool", "tool_call_id": call.id, "content": "22 C, sunny"}]
    r = client.chat.completions.create(model="demo", messages=msgs, tools=[WEATHER], tool_choice="none", max_tokens=4)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason in ("stop", "length")


def test_tool_use_anthropic_and_bad_schema(srv: LlamaServer) -> None:
    tool = {"name": "get_weather", "description": "Current weather of a city",
            "input_schema": WEATHER["function"]["parameters"]}
    code, m = srv.post("/v1/messages", {"model": "demo", "max_tokens": 64, "messages": ASK, "tools": [tool],
                                        "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert code == 200 and m["stop_reason"] == "tool_use", m
    blk = [b for b in m["content"] if b["type"] == "tool_use"][0]
    assert blk["name"] == "get_weather" and blk["input"]["city"] in ("Paris", "London", "Tokyo") and blk["id"]
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "array", "uniqueItems": True}}}
    code, d = srv.post("/v1/chat/completions", {"messages": ASK, "tools": [bad], "tool_choice": "required"})
    assert code == 400 and d["error"]["type"] == "invalid_request_error" and "uniqueItems" in d["error"]["message"], d


def test_response_format_pydantic_parse(client: openai.OpenAI) -> None:
    """The openai client's structured-output helper: a Pydantic model as response_format comes
    back as a parsed, validated object."""
    from typing import Literal

    from pydantic import BaseModel

    class Colour(BaseModel):  # short fields: the small model fills free strings at length
        name: Literal["red", "green", "blue"]
        bright: bool

    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    r = parse(model="demo", messages=MSGS, response_format=Colour, max_tokens=60, temperature=0)
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Colour) and parsed.name in ("red", "green", "blue")
    assert r.choices[0].finish_reason == "stop"


def test_timings_per_token_and_prompt_progress(srv: LlamaServer) -> None:
    """timings_per_token: every streamed token chunk (native, chat, text) carries `timings`;
    return_progress: `prompt_progress` chunks (0% first, with zero timings) before the tokens."""
    body = {"prompt": "the quick brown fox " * 4, "n_predict": 3, "stream": True,
            "timings_per_token": True, "return_progress": True}
    _, events = sse_stream(srv, "/completion", body)
    progress = [e for e in events if "prompt_progress" in e]
    assert len(progress) >= 2 and progress[0]["timings"]["prompt_n"] == 0 and progress[0]["timings"]["prompt_ms"] == 0.0
    assert progress[0]["prompt_progress"]["processed"] == progress[0]["prompt_progress"]["cache"]
    assert progress[-1]["prompt_progress"]["processed"] == progress[-1]["prompt_progress"]["total"]
    assert all(k in progress[0]["prompt_progress"] for k in ("total", "cache", "processed", "time_ms"))
    tokens = [e for e in events if e.get("tokens")]
    assert tokens and all(e["timings"]["predicted_n"] == i + 1 for i, e in enumerate(tokens))
    assert events.index(progress[-1]) < events.index(tokens[0])
    assert events[-1]["generation_settings"]["timings_per_token"] is True
    _, plain = sse_stream(srv, "/completion", {**body, "timings_per_token": False, "return_progress": False})
    assert not any("prompt_progress" in e or ("timings" in e and not e["stop"]) for e in plain)
    chat = {"messages": MSGS, "max_tokens": 3, "stream": True, "timings_per_token": True}
    _, events = sse_stream(srv, "/v1/chat/completions", chat)
    content = [e for e in events[1:] if e != "[DONE]" and e["choices"] and e["choices"][0]["delta"].get("content")]
    assert "timings" not in events[0] and content and all("timings" in e for e in content)


def test_prompt_progress_on_the_openai_streams(srv: LlamaServer) -> None:
    """return_progress on /v1/chat/completions and /v1/completions: llama-server's progress chunks
    (a chat chunk's delta is {role, content: null}) before the first token, the last one at 100%;
    the web page reads them while the prompt is processed."""
    chat = {"messages": [{"role": "user", "content": "the quick brown fox " * 8}], "max_tokens": 2, "stream": True,
            "return_progress": True}
    _, events = sse_stream(srv, "/v1/chat/completions", chat)
    events = [e for e in events if e != "[DONE]"]
    progress = [e for e in events if "prompt_progress" in e]
    assert progress, events
    assert all(e["choices"][0]["delta"] == {"role": "assistant", "content": None} for e in progress)
    last = progress[-1]["prompt_progress"]
    assert last["processed"] == last["total"] > 0 and set(last) == {"total", "cache", "processed", "time_ms"}
    first_token = next(i for i, e in enumerate(events) if e["choices"] and e["choices"][0]["delta"].get("content"))
    assert events.index(progress[-1]) < first_token
    _, plain = sse_stream(srv, "/v1/chat/completions", {**chat, "return_progress": False})
    assert not any("prompt_progress" in e for e in plain if e != "[DONE]")
    _, text = sse_stream(srv, "/v1/completions", {"prompt": "the quick brown fox " * 8, "max_tokens": 2, "stream": True,
                                                  "return_progress": True})
    text_progress = [e for e in text if e != "[DONE]" and "prompt_progress" in e]
    assert text_progress and text_progress[-1]["prompt_progress"]["processed"] == text_progress[-1]["prompt_progress"]["total"]
    assert all(e["choices"][0]["text"] == "" for e in text_progress)
