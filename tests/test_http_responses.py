"""The Responses API and reasoning over HTTP.

Fast part: the app over the fake engine (tests/fakes.py), whose answer is fixed text:
request conversion, Response objects, the event sequence, reasoning_content and its streaming.
Slow part: a real `llama serve` with the demo model and the official `openai` client:
client.responses.create plain, streamed and through a tool round trip; the reasoning budget and
the control endpoint on a model steered into `<think>` by a grammar (greedy decoding)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from llamacli.http.config import ServerConfig

from tests.http_server import LlamaServer
from tests.http_app_client import make, sse_events

THINK_REPLY = "<think>\nPlan it.\n</think>\n\nHello world"


def events_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, payload) of a named-event SSE body; the name matches the payload's type."""
    out = []
    for msg in text.split("\n\n")[:-1]:
        name, payload = msg.split("\n")
        d = json.loads(payload[len("data: "):])
        assert name == f"event: {d['type']}"
        out.append((d["type"], d))
    return out


# ---- fast: the app over the fake engine ---------------------------------------------------------------


def test_responses_plain_and_streamed_shapes() -> None:
    client, eng = make(reply="Hello world")
    body = {"model": "m", "instructions": "Be brief.", "input": "hi", "max_output_tokens": 50}
    code, d, _ = client.post("/v1/responses", body)
    assert code == 200 and d["object"] == "response" and d["id"].startswith("resp_") and d["status"] == "completed"
    (item,) = d["output"]
    assert item["type"] == "message" and item["id"].startswith("msg_") and item["role"] == "assistant"
    assert item["content"] == [{"type": "output_text", "text": "Hello world", "annotations": [], "logprobs": []}]
    assert d["usage"]["output_tokens"] == 11 and d["usage"]["total_tokens"] == d["usage"]["input_tokens"] + 11
    assert eng.submitted[-1].params.n_predict == 50  # max_output_tokens
    # the prompt: instructions as the system message, input as the user's
    prompt = client.post("/apply-template", {"messages": [{"role": "system", "content": "Be brief."},
                                                          {"role": "user", "content": "hi"}]})[1]["prompt"]
    assert eng.tokenizer.detokenize(eng.submitted[-1].prompt_tokens, unparse_special=True) == "<s>" + prompt
    code, d2, _ = client.post("/v1/responses/input_tokens", body)
    assert d2 == {"object": "response.input_tokens", "input_tokens": d["usage"]["input_tokens"]}

    code, text, headers = client.post("/v1/responses", {**body, "stream": True})
    assert code == 200 and headers["Content-Type"].startswith("text/event-stream") and "[DONE]" not in text
    evs = events_of(text)
    kinds = [k for k, _ in evs]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] + ["response.output_text.delta"] * kinds.count(
        "response.output_text.delta") + ["response.output_text.done", "response.content_part.done",
                                         "response.output_item.done", "response.completed"]
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    deltas = "".join(d["delta"] for k, d in evs if k == "response.output_text.delta")
    done = evs[-1][1]["response"]
    assert deltas == "Hello world" == done["output"][0]["content"][0]["text"]
    ids = {d.get("item_id") for k, d in evs if "item_id" in d}
    assert ids == {done["output"][0]["id"]}


def test_responses_cut_by_max_output_tokens_completes() -> None:
    """As llama-server (its test suite waits for response.completed): a cut answer is
    `completed` too; usage says it took max_output_tokens."""
    client, _ = make(reply="Hello world")
    code, d, _ = client.post("/v1/responses", {"input": "hi", "max_output_tokens": 3})
    assert d["status"] == "completed" and d["usage"]["output_tokens"] == 3 and d["output"][0]["content"][0]["text"] == "Hel"
    code, text, _ = client.post("/v1/responses", {"input": "hi", "max_output_tokens": 3, "stream": True})
    assert events_of(text)[-1][0] == "response.completed"


def test_responses_input_items_become_chat_messages() -> None:
    """Message items, a function call and its output, and a reasoning item, as llama-server
    converts them (assistant pieces that follow each other are one assistant message)."""
    from llamacli.http.responses import chat_request

    req = {
        "instructions": "sys",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "look it up"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "22 C"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 22 C."}]},
        ],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                  {"type": "web_search"}],
        "max_output_tokens": 7,
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True}},
    }
    chat = chat_request(req)
    assert chat["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {"role": "assistant", "content": "", "reasoning_content": "look it up",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22 C"},
        {"role": "assistant", "content": [{"type": "text", "text": "It is 22 C."}]},
    ]
    assert chat["tools"] == [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"},
                                                               "strict": True}}]
    assert chat["max_tokens"] == 7 and chat["reasoning_effort"] == "low"
    assert chat["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True}}


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "'input' is required"),
        ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": 3}, "'input' must be a string or array"),
        ({"input": [{"type": "bogus"}]}, "Cannot determine type"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "needs 'arguments'"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ],
)
def test_responses_bad_requests(body: dict[str, Any], message: str) -> None:
    client, _ = make()
    code, d, _ = client.post("/v1/responses", body)
    assert code == 400 and d["error"]["type"] == "invalid_request_error" and message in d["error"]["message"]


def test_reasoning_content_plain_streamed_and_formats() -> None:
    client, _ = make(reply=THINK_REPLY)
    msgs = [{"role": "user", "content": "hi"}]
    code, d, _ = client.post("/v1/chat/completions", {"messages": msgs})
    assert d["choices"][0]["message"] == {"role": "assistant", "content": "Hello world", "reasoning_content": "Plan it."}
    code, text, _ = client.post("/v1/chat/completions", {"messages": msgs, "stream": True})
    deltas = [json.loads(e)["choices"][0]["delta"] for e in sse_events(text)[:-1] if json.loads(e)["choices"]]
    assert "".join(x.get("reasoning_content", "") for x in deltas) == "Plan it."
    content = [x["content"] for x in deltas if x.get("content")]
    assert "".join(content) == "Hello world" and not any("<" in c or ">" in c for c in content)
    # per request, and the server's default
    code, d, _ = client.post("/v1/chat/completions", {"messages": msgs, "reasoning_format": "none"})
    assert d["choices"][0]["message"] == {"role": "assistant", "content": THINK_REPLY}
    code, d, _ = client.post("/v1/chat/completions", {"messages": msgs, "reasoning_format": "deepseek-legacy"})
    assert d["choices"][0]["message"]["content"] == THINK_REPLY and d["choices"][0]["message"]["reasoning_content"] == "Plan it."
    code, d, _ = client.post("/v1/chat/completions", {"messages": msgs, "reasoning_format": "bogus"})
    assert code == 400 and "reasoning_format" in d["error"]["message"]
    none_client, _ = make(ServerConfig(reasoning_format="none"), reply=THINK_REPLY)
    code, d, _ = none_client.post("/v1/chat/completions", {"messages": msgs})
    assert d["choices"][0]["message"]["content"] == THINK_REPLY


def test_reasoning_items_and_thinking_blocks() -> None:
    client, _ = make(reply=THINK_REPLY)
    code, d, _ = client.post("/v1/responses", {"input": "hi"})
    assert [o["type"] for o in d["output"]] == ["reasoning", "message"]
    assert d["output"][0]["content"] == [{"type": "reasoning_text", "text": "Plan it."}] and d["output"][0]["id"].startswith("rs_")
    code, text, _ = client.post("/v1/responses", {"input": "hi", "stream": True})
    evs = events_of(text)
    kinds = [k for k, _ in evs]
    assert kinds[2] == "response.output_item.added" and evs[2][1]["item"]["type"] == "reasoning"
    assert "".join(e["delta"] for k, e in evs if k == "response.reasoning_text.delta") == "Plan it."
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.output_text.delta")
    assert [o["type"] for o in evs[-1][1]["response"]["output"]] == ["reasoning", "message"]
    code, m, _ = client.post("/v1/messages", {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]})
    assert m["content"] == [{"type": "thinking", "thinking": "Plan it.", "signature": ""},
                            {"type": "text", "text": "Hello world"}]


def test_control_endpoint_errors() -> None:
    client, _ = make(reply="Hello world")
    code, d, _ = client.post("/v1/chat/completions/control", {"action": "reasoning_end"})
    assert code == 400 and d["error"]["message"] == "missing completion id"
    code, d, _ = client.post("/v1/chat/completions/control", {"id": "chatcmpl-x", "action": "pause"})
    assert code == 400 and d["error"]["message"] == "unknown control action"
    code, d, _ = client.post("/v1/chat/completions/control", {"id": "chatcmpl-x", "action": "reasoning_end"})
    assert code == 200 and d == {"success": False, "message": "no active completion for this id"}


def test_props_report_and_change_reasoning_defaults() -> None:
    client, eng = make(ServerConfig(props=True, reasoning_budget=64), reply=THINK_REPLY)
    params = client.get("/props")[1]["default_generation_settings"]["params"]
    assert (params["reasoning_format"], params["reasoning_in_content"]) == ("auto", False)
    assert (params["reasoning_budget_tokens"], params["reasoning_budget_message"]) == (64, "")
    code, d, _ = client.post("/props", {"reasoning_format": "deepseek-legacy", "reasoning_budget_tokens": 8,
                                        "reasoning_budget_message": "Stop."})
    assert code == 200 and d == {"success": True}
    params = client.get("/props")[1]["default_generation_settings"]["params"]
    assert params["reasoning_format"] == "deepseek-legacy" and params["reasoning_in_content"] is True
    client.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    spec = eng.submitted[-1].params.reasoning
    assert spec is not None and (spec.budget, spec.message, spec.start, spec.end) == (8, "Stop.", "<think>", "</think>")
    assert client.post("/props", {"reasoning_format": "xml"})[0] == 400
    assert client.post("/props", {"reasoning_budget_tokens": -1})[0] == 200
    client.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert eng.submitted[-1].params.reasoning is None  # no budget, no control: nothing for the engine


# ---- slow: a real server, the openai client ---------------------------------------------------------------

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}},
                          "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# steers the demo model (no thinking of its own) into a thinking block; "<" is banned by a
# logit bias so that only the engine's forcing can close it (the budget and control tests)
THINK_GRAMMAR = 'root ::= "<think>" [^<]* "</think>" [^<]*'
LT = 236820  # "<" in the demo model's vocabulary


@pytest.fixture(scope="module")
def srv(demo_model: str) -> Any:
    with LlamaServer("-m", demo_model, "-c", "2048", "-np", "2", "--temp", "0",
                     "--reasoning-budget-message", " Enough.") as s:
        yield s


@pytest.fixture(scope="module")
def client(srv: LlamaServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-no-key-required", max_retries=0, timeout=300)


@pytest.mark.slow
def test_openai_client_responses_plain_and_stream(srv: LlamaServer, client: openai.OpenAI) -> None:
    r = client.responses.create(model="demo", instructions="Answer in one word.", input="Name a colour.",
                                max_output_tokens=6)
    assert r.id.startswith("resp_") and r.output[0].id.startswith("msg_") and r.output_text
    assert r.usage is not None and r.usage.output_tokens == 6 and r.status == "completed"
    events = list(client.responses.create(model="demo", instructions="Answer in one word.", input="Name a colour.",
                                          max_output_tokens=6, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text == r.output_text  # greedy: the same answer
    n = client.responses.input_tokens.count(model="demo", instructions="Answer in one word.", input="Name a colour.")
    assert n.input_tokens == r.usage.input_tokens
    # llama-server's telemetry: prompt_progress on response.in_progress, timings per token and at the end
    code, raw = srv.post("/responses", {"input": "This is a test" * 10, "max_output_tokens": 3, "stream": True,
                                        "timings_per_token": True, "return_progress": True})
    evs = events_of(raw)
    assert code == 200 and any(k == "response.in_progress" and d["prompt_progress"]["total"] > 0
                               for k, d in evs if "prompt_progress" in d)
    assert any("timings" in d for k, d in evs if k == "response.output_text.delta")
    assert "predicted_per_second" in evs[-1][1]["timings"] and "usage" in evs[-1][1]["response"]


@pytest.mark.slow
def test_openai_client_tool_round_trip(client: openai.OpenAI) -> None:
    r = client.responses.create(model="demo", input=ASK, tools=[WEATHER], tool_choice="required", max_output_tokens=64)
    (call,) = r.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert json.loads(call.arguments)["city"] in ("Paris", "London", "Tokyo") and call.call_id.startswith("call_")
    events = list(client.responses.create(model="demo", input=ASK, tools=[WEATHER], max_output_tokens=64, stream=True,
                                          tool_choice={"type": "function", "name": "get_weather"}))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert args == call.arguments  # greedy: the same call, streamed in fragments
    assert [e.type for e in events][-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                                             "response.completed"]
    # the call and its output go back as input items; tool_choice none answers in text
    follow = ASK + [call.model_dump(exclude_none=True),
                    {"type": "function_call_output", "call_id": call.call_id, "output": "22 C, sunny"}]
    r2 = client.responses.create(model="demo", input=follow, tools=[WEATHER], tool_choice="none", max_output_tokens=4)
    assert r2.output[0].type == "message" and r2.output_text


@pytest.mark.slow
def test_openai_client_json_schema_text_format(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
              "required": ["colour"], "additionalProperties": False}
    r = client.responses.create(model="demo", input="Name a colour.", max_output_tokens=32,
                                text={"format": {"type": "json_schema", "name": "colour", "schema": schema, "strict": True}})
    assert json.loads(r.output_text)["colour"] in ("red", "green", "blue")
    # the client's own structured-output helper (text_format from a Pydantic model), streamed
    from typing import Literal

    from pydantic import BaseModel

    class Colour(BaseModel):
        colour: Literal["red", "green", "blue"]

    with client.responses.stream(model="demo", input="Name a colour.", max_output_tokens=32, text_format=Colour) as s:
        final = s.get_final_response()
    assert final.output_parsed is not None and final.output_parsed.colour in ("red", "green", "blue")


@pytest.mark.slow
def test_reasoning_stream_budget_and_natural_end(client: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "Name a colour."}]
    # the model's own tokens close the block (no budget): the grammar bounds the thinking to
    # one word of at most 8 letters, so the end tag comes within max_tokens on any numerics
    steer = {"grammar": 'root ::= "<think>" [a-z]{1,8} "</think>" [a-z ]+'}
    r = client.chat.completions.create(model="demo", messages=msgs, max_tokens=16, extra_body=steer)
    m = r.choices[0].message.model_dump()
    assert m["reasoning_content"] and m["content"] and "<" not in m["content"] + m["reasoning_content"]
    chunks = list(client.chat.completions.create(model="demo", messages=msgs, max_tokens=16, stream=True, extra_body=steer))
    deltas = [c.choices[0].delta.model_dump() for c in chunks if c.choices]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == m["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == m["content"]
    # a budget of 3: the engine forces the server's message and the end tag after 3 thinking tokens
    forced = client.chat.completions.create(model="demo", messages=msgs, max_tokens=24, logit_bias={str(LT): -100},
                                            extra_body={"grammar": THINK_GRAMMAR, "reasoning_budget_tokens": 3})
    fm = forced.choices[0].message.model_dump()
    assert fm["reasoning_content"].endswith("Enough.") and fm["content"]
    free = client.chat.completions.create(model="demo", messages=msgs, max_tokens=24, logit_bias={str(LT): -100},
                                          extra_body={"grammar": THINK_GRAMMAR})
    assert free.choices[0].message.model_dump()["content"] is None or not free.choices[0].message.content
    assert free.choices[0].finish_reason == "length"  # without a budget it never leaves the block


@pytest.mark.slow
def test_control_reasoning_end(srv: LlamaServer, client: openai.OpenAI) -> None:
    """A running completion with reasoning_control: /v1/chat/completions/control ends its
    thinking (the end tag is forced) and the answer goes on as content."""
    msgs = [{"role": "user", "content": "Name a colour."}]
    stream = client.chat.completions.create(
        model="demo", messages=msgs, max_tokens=60, stream=True, logit_bias={str(LT): -100},
        extra_body={"grammar": THINK_GRAMMAR, "reasoning_control": True})
    answers: list[dict[str, Any]] = []
    thoughts, content = "", ""
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta.model_dump()
        thoughts += d.get("reasoning_content") or ""
        content += d.get("content") or ""
        if len(thoughts) > 5 and not answers:
            answers.append(srv.post("/v1/chat/completions/control", {"id": chunk.id, "action": "reasoning_end"})[1])
    assert answers == [{"success": True}]
    assert thoughts and content  # the block ended before max_tokens and the answer followed
    # not armed: the control is refused
    holder: list[Any] = []
    plain = client.chat.completions.create(model="demo", messages=msgs, max_tokens=40, stream=True,
                                           logit_bias={str(LT): -100}, extra_body={"grammar": THINK_GRAMMAR})
    for chunk in plain:
        holder.append(srv.post("/v1/chat/completions/control", {"id": chunk.id, "action": "reasoning_end"})[1])
        break
    plain.close()
    assert holder == [{"success": False, "message": "reasoning control not enabled for this completion"}]
