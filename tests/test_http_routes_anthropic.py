"""http/routes_anthropic.py and http/anthropic.py: the Anthropic Messages API over the fake
engine, and the message translation."""

from __future__ import annotations

import json

import pytest

from llamacli.http import anthropic
from llamacli.http.errors import ApiError
from tests.http_app_client import ASK, CALL_REPLY, WEATHER, Client, client, make  # noqa: F401 (a fixture)


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
    assert e.value.status == 400 and e.value.message.startswith("image input is not supported - hint")


def test_anthropic_image_blocks_become_image_url_parts() -> None:
    """As llama-server's convert_anthropic_to_oai: a base64 source as a data: URI (image/jpeg when
    no media_type), a url source as is; the message's content becomes the parts in order."""
    blocks = [{"type": "image", "source": {"type": "base64", "data": "QUJD"}},
              {"type": "text", "text": "and"},
              {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]
    (msg,) = anthropic.chat_messages({"messages": [{"role": "user", "content": blocks}]}, vision=True)
    assert msg == {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
        {"type": "text", "text": "and"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}
    with pytest.raises(ApiError) as e:
        anthropic.chat_messages({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
                                vision=True)
    assert e.value.status == 400 and "image blocks need a source of type base64" in e.value.message


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
