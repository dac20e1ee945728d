"""OpenAI's Responses API (/v1/responses) over the chat completion: the request is converted to
a chat request as llama-server does (server-chat.cpp), and the answer (a ParsedMessage, or the
parser's deltas while streaming) is written as Response output items: a `reasoning` item for
the thoughts, a `message` item for the text, one `function_call` item per tool call.

Pure functions and one small state machine (`ResponseEvents`); routes_responses.py glues them
to the engine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamacli.core.runtime.tasks import Final
from llamacli.http.errors import bad_request, no_multimodal
from llamacli.http.oai import new_id, usage_json

# the Response fields echoed from the request (the openai client's Response model has them)
_ECHOED = ("instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "temperature", "tool_choice",
           "tools", "top_p", "text", "reasoning", "store", "user")


# ---- requests ----------------------------------------------------------------------------------


def chat_request(req: Mapping[str, Any]) -> dict[str, Any]:
    """The chat completion request a Responses request stands for: `instructions` becomes the
    system message, `input` (a string, or message / function_call / function_call_output /
    reasoning items) the messages; function tools, max_output_tokens, reasoning.effort and
    text.format (as response_format) are renamed."""
    if "input" not in req:
        raise bad_request("'input' is required")
    if req.get("previous_response_id"):
        raise bad_request("llama.cpp does not support 'previous_response_id'.")
    out = {k: v for k, v in req.items() if k not in ("input", "instructions", "tools", "max_output_tokens", "reasoning", "text")}
    msgs: list[dict[str, Any]] = []
    if "instructions" in req and req["instructions"] is not None:
        if not isinstance(req["instructions"], str):
            raise bad_request("'instructions' must be a string")
        msgs.append({"role": "system", "content": req["instructions"]})
    raw = req["input"]
    if isinstance(raw, str):
        msgs.append({"role": "user", "content": raw})
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            if not isinstance(item, dict):
                raise bad_request(f"'input[{i}]' must be an object")
            _add_item(msgs, item, i)
    else:
        raise bad_request("'input' must be a string or array of objects")
    if not msgs:
        raise bad_request("'input' must not be empty")
    out["messages"] = msgs
    tools = _tools(req.get("tools"))
    if tools:
        out["tools"] = tools
    if "max_output_tokens" in req and req["max_output_tokens"] is not None:
        out["max_tokens"] = req["max_output_tokens"]
    reasoning = req.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        out["reasoning_effort"] = reasoning["effort"]
    fmt = _response_format(req.get("text"))
    if fmt is not None:
        out["response_format"] = fmt
    return out


def _text_parts(content: Any, i: int, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """An item's content as chat text parts (a string is one input_text part)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise bad_request(f"'input[{i}].content' must be a string or an array of content parts")
    parts: list[dict[str, Any]] = []
    for p in content:
        kind = p.get("type") if isinstance(p, dict) else None
        if kind == "input_image" and "input_image" in kinds:  # llama-server: {"image_url": {"url": ...}}
            if not isinstance(p.get("image_url"), str):
                raise bad_request(f"'input[{i}].content' input_image parts need 'image_url' (a string)")
            parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
            continue
        if kind in ("input_image", "input_file", "input_audio"):
            raise no_multimodal(f"'input[{i}]' has an {kind} part: this server has no multimodal support")
        if kind not in kinds or not isinstance(p.get("text"), str):
            raise bad_request(f"'input[{i}].content' parts must be one of {', '.join(kinds)} with a 'text'")
        parts.append({"type": "text", "text": p["text"]})
    return parts


def _add_item(msgs: list[dict[str, Any]], item: dict[str, Any], i: int) -> None:
    """One input item appended to the chat messages; assistant pieces (text, calls, reasoning)
    that follow each other form one assistant message, as in llama-server."""
    kind = item.get("type", "message")
    role = item.get("role")
    prev = msgs[-1] if msgs and msgs[-1].get("role") == "assistant" else None
    if kind == "message" and role in ("user", "system", "developer"):
        msgs.append({"role": role, "content": _text_parts(item.get("content"), i, ("input_text", "output_text", "input_image"))})
    elif kind == "message" and role == "assistant":
        parts = _text_parts(item.get("content"), i, ("output_text", "input_text"))
        if prev is not None:
            old = prev.get("content")
            prev["content"] = (old if isinstance(old, list) else []) + parts
        else:
            msgs.append({"role": "assistant", "content": parts})
    elif kind == "function_call":
        for k in ("arguments", "call_id", "name"):
            if not isinstance(item.get(k), str):
                raise bad_request(f"'input[{i}]' (function_call) needs '{k}' as a string")
        call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
        if prev is not None:
            prev.setdefault("tool_calls", []).append(call)
        else:
            msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        out = item.get("output")
        if not isinstance(item.get("call_id"), str) or not isinstance(out, (str, list)):
            raise bad_request(f"'input[{i}]' (function_call_output) needs 'call_id' and 'output'")
        content = out if isinstance(out, str) else _text_parts(out, i, ("input_text",))
        msgs.append({"role": "tool", "tool_call_id": item["call_id"], "content": content})
    elif kind == "reasoning":
        texts = [c.get("text") for c in item.get("content") or [] if isinstance(c, dict)]
        if not texts or not isinstance(texts[0], str):
            raise bad_request(f"'input[{i}]' (reasoning) needs 'content' with a text")
        if prev is not None:
            prev["reasoning_content"] = texts[0]
        else:
            msgs.append({"role": "assistant", "content": "", "reasoning_content": texts[0]})
    else:
        raise bad_request(f"Cannot determine type of 'input[{i}]'")


def _tools(raw: Any) -> list[dict[str, Any]]:
    """Responses function tools ({type, name, description, parameters, strict}) in the chat
    shape; other tool types (web search, ...) have no chat equivalent and are skipped."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request("'tools' must be an array of objects")
    out = []
    for t in raw:
        if not isinstance(t, dict) or t.get("type") != "function":
            continue
        fn = {k: v for k, v in t.items() if k != "type"}
        fn.setdefault("strict", True)
        out.append({"type": "function", "function": fn})
    return out


def _response_format(text: Any) -> dict[str, Any] | None:
    """text.format as a chat response_format (json_schema or json_object; text: none)."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt["type"] == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise bad_request("'text.format.schema' must be an object")
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": spec}
    raise bad_request("'text.format.type' must be text, json_object or json_schema")


# ---- answers -----------------------------------------------------------------------------------


def usage(final: Final) -> dict[str, Any]:
    u = usage_json([final])
    return {
        "input_tokens": u["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": u["prompt_tokens_details"]["cached_tokens"]},
        "output_tokens": u["completion_tokens"],
        "total_tokens": u["total_tokens"],
    }


def reasoning_item(id: str, text: str) -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": text}] if text else []
    return {"id": id, "type": "reasoning", "summary": [], "content": content, "encrypted_content": "", "status": "completed"}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(id: str, text: str | None) -> dict[str, Any]:
    content = [text_part(text)] if text is not None else []
    return {"id": id, "type": "message", "role": "assistant", "status": "completed", "content": content}


def call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A function_call item: `call_id` is the chat tool call's id (a function_call_output
    answers it); the item's own id is fc_ + the same suffix."""
    suffix = call_id[5:] if call_id.startswith("call_") else call_id
    return {"id": "fc_" + suffix, "type": "function_call", "status": "completed", "call_id": call_id, "name": name,
            "arguments": arguments}


def response_json(req: Mapping[str, Any], *, id: str, model: str, created: int, output: list[dict[str, Any]],
                  final: Final | None) -> dict[str, Any]:
    """The Response object; with `final` it is finished: `completed` however it ended (as
    llama-server: also when max_output_tokens cut it; usage.output_tokens tells)."""
    d: dict[str, Any] = {"id": id, "object": "response", "created_at": created, "model": model}
    if final is None:
        d.update(status="in_progress", output=output)
    else:
        d.update(status="completed", completed_at=int(time.time()), output=output, usage=usage(final), error=None,
                 incomplete_details=None)
    for k in _ECHOED:
        if k in req:
            d[k] = req[k]
    d.setdefault("tools", [])
    d.setdefault("tool_choice", "auto")
    d.setdefault("parallel_tool_calls", False)  # the chat completion's default, as llama.cpp's
    return d


def output_items(message: Any, ids: "ItemIds") -> list[dict[str, Any]]:
    """The output items of a finished answer (a ParsedMessage)."""
    out = []
    if message.reasoning_content:
        out.append(reasoning_item(ids.reasoning, message.reasoning_content))
    if message.content:
        out.append(message_item(ids.message, message.content))
    for c in message.tool_calls:
        out.append(call_item(c.id, c.name, c.arguments))
    return out


@dataclass
class ItemIds:
    response: str = field(default_factory=lambda: new_id("resp_"))
    reasoning: str = field(default_factory=lambda: new_id("rs_"))
    message: str = field(default_factory=lambda: new_id("msg_"))


@dataclass
class _Open:
    """An output item being streamed: its index, its item, and its text so far."""

    index: int
    item: dict[str, Any]
    text: str = ""


class ResponseEvents:
    """The Responses stream of one answer: parser deltas in, (event name, payload) pairs out.

    response.created, response.in_progress; per item response.output_item.added, then its
    deltas (response.reasoning_text.delta; response.content_part.added and
    response.output_text.delta; response.function_call_arguments.delta); at the end each item
    is closed (…done events, response.output_item.done) and response.completed carries the
    whole Response."""

    def __init__(self, req: Mapping[str, Any], model: str) -> None:
        self.req = req
        self.model = model
        self.ids = ItemIds()
        self.created = int(time.time())
        self.seq = 0
        self.items: list[_Open] = []
        self._reasoning: _Open | None = None
        self._message: _Open | None = None
        self._calls: dict[int, _Open] = {}  # tool call index -> its item

    def _ev(self, kind: str, **payload: Any) -> tuple[str, dict[str, Any]]:
        d = {"type": kind, "sequence_number": self.seq, **payload}
        self.seq += 1
        return kind, d

    def _response(self, final: Final | None = None) -> dict[str, Any]:
        output = [o.item for o in self.items] if final is not None else []
        return response_json(self.req, id=self.ids.response, model=self.model, created=self.created, output=output,
                             final=final)

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        resp = self._response()
        return [self._ev("response.created", response=resp), self._ev("response.in_progress", response=resp)]

    def progress(self, progress: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """A response.in_progress event carrying llama-server's prompt_progress (return_progress)."""
        kind, d = self._ev("response.in_progress", response=self._response())
        d["prompt_progress"] = dict(progress)
        return [(kind, d)]

    def _add(self, item: dict[str, Any]) -> tuple[_Open, tuple[str, dict[str, Any]]]:
        o = _Open(len(self.items), item)
        self.items.append(o)
        return o, self._ev("response.output_item.added", output_index=o.index, item=dict(item, status="in_progress"))

    def feed(self, deltas: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
        """Events for the parser's deltas (core.tool_calls.Delta)."""
        out = []
        for d in deltas:
            if d.reasoning is not None:
                if self._reasoning is None:
                    self._reasoning, ev = self._add(reasoning_item(self.ids.reasoning, ""))
                    out.append(ev)
                o = self._reasoning
                o.text += d.reasoning
                out.append(self._ev("response.reasoning_text.delta", item_id=o.item["id"], output_index=o.index,
                                    content_index=0, delta=d.reasoning))
            elif d.index is None:
                if not d.content:
                    continue
                if self._message is None:
                    self._message, ev = self._add(message_item(self.ids.message, None))
                    out.append(ev)
                    out.append(self._ev("response.content_part.added", item_id=self.ids.message,
                                        output_index=self._message.index, content_index=0, part=text_part("")))
                o = self._message
                o.text += d.content
                out.append(self._ev("response.output_text.delta", item_id=o.item["id"], output_index=o.index,
                                    content_index=0, delta=d.content, logprobs=[]))
            else:
                if d.index not in self._calls:
                    self._calls[d.index], ev = self._add(call_item(d.id or "", d.name or "", ""))
                    out.append(ev)
                o = self._calls[d.index]
                if d.arguments:
                    o.text += d.arguments
                    out.append(self._ev("response.function_call_arguments.delta", item_id=o.item["id"],
                                        output_index=o.index, delta=d.arguments))
        return out

    def finish(self, final: Final) -> list[tuple[str, dict[str, Any]]]:
        """Close every item (in the order they were opened), then response.completed."""
        out = []
        for o in self.items:
            item, idx = o.item, o.index
            if item["type"] == "reasoning":
                o.item = reasoning_item(item["id"], o.text)
                out.append(self._ev("response.reasoning_text.done", item_id=item["id"], output_index=idx,
                                    content_index=0, text=o.text))
            elif item["type"] == "message":
                o.item = message_item(item["id"], o.text)
                part = text_part(o.text)
                out.append(self._ev("response.output_text.done", item_id=item["id"], output_index=idx,
                                    content_index=0, text=o.text, logprobs=[]))
                out.append(self._ev("response.content_part.done", item_id=item["id"], output_index=idx,
                                    content_index=0, part=part))
            else:
                o.item = call_item(item["call_id"], item["name"], o.text)
                out.append(self._ev("response.function_call_arguments.done", item_id=item["id"], output_index=idx,
                                    name=item["name"], arguments=o.text))
            out.append(self._ev("response.output_item.done", output_index=idx, item=o.item))
        out.append(self._ev("response.completed", response=self._response(final)))
        return out
