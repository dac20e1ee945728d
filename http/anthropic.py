"""Anthropic's Messages API shapes (/v1/messages, /v1/messages/count_tokens): requests turned
into chat messages plus llama-server fields, results into Anthropic message objects and
stream events. Pure functions."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llamacli.core.runtime.tasks import Final
from llamacli.http.errors import bad_request, no_multimodal
from llamacli.http.params import Body


def _text_of(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise bad_request(f"'{where}' must be a string or an array of content blocks")
    out = []
    for b in blocks:
        if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            raise bad_request(f"'{where}' blocks must be {{\"type\": \"text\", \"text\": ...}}")
        out.append(b["text"])
    return "".join(out)


def _image_part(blk: dict[str, Any], where: str) -> dict[str, Any]:
    """An image block as an OpenAI image_url part (llama-server's convert_anthropic_to_oai): a
    base64 source as a data: URI (media_type defaults to image/jpeg), a url source as is."""
    src = blk.get("source")
    kind = src.get("type") if isinstance(src, dict) else None
    if kind == "base64" and isinstance(src, dict) and isinstance(src.get("data"), str):
        media_type = src.get("media_type", "image/jpeg")
        if not isinstance(media_type, str):
            raise bad_request(f"'{where}' image source media_type must be a string")
        return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{src['data']}"}}
    if kind == "url" and isinstance(src, dict) and isinstance(src.get("url"), str):
        return {"type": "image_url", "image_url": {"url": src["url"]}}
    raise bad_request(f"'{where}' image blocks need a source of type base64 (with data) or url")


def chat_messages(data: Mapping[str, Any], vision: bool = False) -> list[dict[str, Any]]:
    """Anthropic `system` + `messages` as OpenAI-style chat messages for the chat template.
    tool_use blocks become assistant tool_calls, tool_result blocks become tool messages; image
    blocks (with `vision`: a projector that takes images) become image_url parts, and the
    message's content a list of parts."""
    b = Body(data)
    out: list[dict[str, Any]] = []
    if "system" in b:
        out.append({"role": "system", "content": _text_of(b.raw("system"), "system")})
    msgs = b.list("messages")
    if not msgs:
        raise bad_request("'messages' must not be empty")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise bad_request(f"'messages[{i}]' must be an object")
        role = Body(m, f"messages[{i}].").str("role")
        if role not in ("user", "assistant"):
            raise bad_request(f"'messages[{i}].role' must be user or assistant, got {role!r}")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise bad_request(f"'messages[{i}].content' must be a string or an array of content blocks")
        text: list[str] = []
        parts: list[dict[str, Any]] = []  # text and image parts in order, when there are images
        thoughts: list[str] = []
        calls: list[dict[str, Any]] = []
        for blk in content:
            kind = blk.get("type") if isinstance(blk, dict) else None
            if kind == "text" and isinstance(blk.get("text"), str):
                text.append(blk["text"])
                parts.append({"type": "text", "text": blk["text"]})
            elif kind == "image" and vision:
                parts.append(_image_part(blk, f"messages[{i}].content"))
            elif kind == "tool_use":
                calls.append(
                    {
                        "id": blk.get("id", ""),
                        "type": "function",
                        "function": {"name": blk.get("name", ""), "arguments": json.dumps(blk.get("input", {}))},
                    }
                )
            elif kind == "tool_result":
                res = blk.get("content", "")
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": blk.get("tool_use_id", ""),
                        "content": res if isinstance(res, str) else _text_of(res, f"messages[{i}].content"),
                    }
                )
            elif kind == "image":
                raise no_multimodal("image input is not supported - hint: if this is unexpected, you may need to provide the mmproj")
            elif kind == "document":
                raise no_multimodal(f"'messages[{i}]' has a {kind} block: this server has no multimodal support")
            elif kind == "thinking" and isinstance(blk.get("thinking"), str):
                thoughts.append(blk["thinking"])  # the template may show it (reasoning_content)
            elif kind in ("thinking", "redacted_thinking"):
                continue
            else:
                raise bad_request(f"'messages[{i}].content' has an unsupported block {kind!r}")
        has_images = len(parts) > len(text)
        if text or calls or role == "user" or has_images:
            msg: dict[str, Any] = {"role": role, "content": parts if has_images else "".join(text)}
            if calls:
                msg["tool_calls"] = calls
            if thoughts:
                msg["reasoning_content"] = "".join(thoughts)
            out.append(msg)
    if all(m["role"] == "system" for m in out):
        raise bad_request("'messages' has no text, tool_use or tool_result content to answer")
    return out


def native_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """llama-server's fields for an Anthropic request (llama.cpp's own fields pass through)."""
    b = Body(data)
    out = {k: v for k, v in data.items()
           if k not in ("messages", "system", "tools", "tool_choice", "stop_sequences", "metadata", "max_tokens")}
    out["n_predict"] = b.int("max_tokens", lo=1)  # required, as in Anthropic's API
    thinking = b.obj("thinking", {})
    if thinking.get("type") == "enabled":  # extended thinking: its budget is the reasoning budget
        out["thinking_budget_tokens"] = Body(thinking, "thinking.").int("budget_tokens", 10000, lo=0)
    if "stop_sequences" in b:
        out["stop"] = b.str_list("stop_sequences")
    return out


def stop_reason(final: Final, tool_calls: bool = False) -> str:
    if tool_calls and final.stop_type == "eos":
        return "tool_use"
    return {"eos": "end_turn", "word": "stop_sequence", "limit": "max_tokens"}.get(final.stop_type, "end_turn")


def _tool_input(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:  # cut off by max_tokens: the partial text, as Anthropic has no better shape
        return {}


def content_blocks(message: Any) -> list[dict[str, Any]]:
    """A parsed message (core/text/tool_calls ParsedMessage) as Anthropic content blocks."""
    out: list[dict[str, Any]] = []
    if message.reasoning_content:  # no signature: nothing to verify on a local model
        out.append({"type": "thinking", "thinking": message.reasoning_content, "signature": ""})
    if message.content:
        out.append({"type": "text", "text": message.content})
    for c in message.tool_calls:
        out.append({"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c.arguments)})
    return out


def usage_json(final: Final | None, n_prompt: int) -> dict[str, Any]:
    cached = final.tokens_cached if final is not None else 0
    return {
        "input_tokens": n_prompt - cached,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": len(final.tokens) if final is not None else 0,
    }


def message_json(final: Final, *, id: str, model: str, message: Any = None) -> dict[str, Any]:
    """The message object; `message` is the parsed answer (text and tool calls), else the text."""
    if message is None:
        content = [{"type": "text", "text": final.content}]
        calls = False
    else:
        content = content_blocks(message) or [{"type": "text", "text": ""}]
        calls = bool(message.tool_calls)
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(final, calls),
        "stop_sequence": final.stopping_word if final.stop_type == "word" else None,
        "usage": usage_json(final, len(final.prompt_tokens)),
    }


def message_start(*, id: str, model: str, n_prompt: int) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": n_prompt, "output_tokens": 0},
        },
    }


def content_block_start(index: int = 0, block: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block or {"type": "text", "text": ""}}


def text_delta(text: str, index: int = 0) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}


def thinking_delta(text: str, index: int) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": text}}


def input_json_delta(partial: str, index: int) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": partial}}


def message_delta(final: Final, tool_calls: bool = False) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {
            "stop_reason": stop_reason(final, tool_calls),
            "stop_sequence": final.stopping_word if final.stop_type == "word" else None,
        },
        "usage": {"output_tokens": len(final.tokens)},
    }


class BlockStream:
    """Tool-call parser deltas (core/text/tool_calls Delta) as Anthropic stream events: a thinking
    block for reasoning (closed with an empty signature_delta), a text block for content, a
    tool_use block per call (its arguments as input_json_delta fragments)."""

    def __init__(self, text_open: bool) -> None:
        self.index = 0 if text_open else -1
        self.kind = "text" if text_open else None
        self.calls = False

    def events(self, deltas: Any) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for d in deltas:
            if d.reasoning is not None:
                if self.kind != "thinking":
                    out += self._open({"type": "thinking", "thinking": "", "signature": ""}, "thinking")
                out.append(("content_block_delta", thinking_delta(d.reasoning, self.index)))
                continue
            if d.index is None:
                if not d.content:
                    continue
                if self.kind != "text":
                    out += self._open({"type": "text", "text": ""}, "text")
                out.append(("content_block_delta", text_delta(d.content, self.index)))
                continue
            if d.name is not None:
                self.calls = True
                out += self._open({"type": "tool_use", "id": d.id, "name": d.name, "input": {}}, "tool_use")
            if d.arguments:
                out.append(("content_block_delta", input_json_delta(d.arguments, self.index)))
        return out

    def _open(self, block: dict[str, Any], kind: str) -> list[tuple[str, dict[str, Any]]]:
        out = self.close()
        self.index += 1
        self.kind = kind
        out.append(("content_block_start", content_block_start(self.index, block)))
        return out

    def close(self) -> list[tuple[str, dict[str, Any]]]:
        if self.kind is None:
            return []
        out = []
        if self.kind == "thinking":  # Anthropic's clients expect a signature before the stop
            sig = {"type": "content_block_delta", "index": self.index, "delta": {"type": "signature_delta", "signature": ""}}
            out.append(("content_block_delta", sig))
        self.kind = None
        return out + [("content_block_stop", {"type": "content_block_stop", "index": self.index})]
