"""Chat messages as the templates see them: the error type, content flattening, role fixes.

Messages arrive in OpenAI form: ``{"role": ..., "content": str | [parts] | None, ...}`` where a
part is ``{"type": "text", "text": ...}``. llama.cpp joins the text parts of a message with
``"\\n"`` (``concat_content_parts`` in common/chat.cpp) and ignores parts of other types.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from llamacli.core.errors import LlamaError

Message = dict[str, Any]


class ChatTemplateError(LlamaError):
    """A chat template cannot be compiled or rendered (syntax, runtime, sandbox or input error)."""

    exit_code = 1


def content_text(content: Any) -> str:
    """The text of a message's content: a string, ``None`` or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, Mapping):
                raise ChatTemplateError(f"a content part must be an object, got {type(part).__name__}")
            if part.get("type") == "text":
                texts.append(str(part.get("text", "")))
        return "\n".join(texts)
    raise ChatTemplateError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def as_text_parts(content: Any) -> list[dict[str, Any]]:
    """The content as a list of typed parts (a string becomes one text part)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict(part) for part in content]


def check_messages(messages: Any) -> list[Message]:
    """A deep copy of ``messages`` (templates may mutate lists), each checked to have a role."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise ChatTemplateError("messages must be a list of {role, content} objects")
    checked: list[Message] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise ChatTemplateError(f"message {i} must be an object, got {type(msg).__name__}")
        role = msg.get("role")
        if not isinstance(role, str) or not role:
            raise ChatTemplateError(f"message {i} has no role")
        checked.append(copy.deepcopy(dict(msg)))
    return checked


def merge_system_into_next(messages: list[Message]) -> list[Message]:
    """llama.cpp's workaround for templates without a system role: prepend it to the next message."""
    if not messages or messages[0]["role"] != "system":
        return messages
    first, rest = messages[0], messages[1:]
    if rest:
        second = dict(rest[0])
        second["content"] = content_text(first.get("content")) + "\n" + content_text(second.get("content"))
        rest = [second, *rest[1:]]
    return rest


def parse_tool_arguments(messages: list[Message]) -> None:
    """Turn JSON-string tool-call arguments into objects, in place (templates that want objects)."""
    for msg in messages:
        for call in msg.get("tool_calls") or []:
            func = call.get("function") if isinstance(call, dict) else None
            if isinstance(func, dict) and isinstance(func.get("arguments"), str):
                try:
                    func["arguments"] = json.loads(func["arguments"])
                except json.JSONDecodeError as exc:
                    raise ChatTemplateError(f"tool call arguments are not valid JSON: {exc}") from exc
