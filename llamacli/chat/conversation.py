"""The conversation: an optional system prompt and the user/assistant turns, as OpenAI-style
messages, with the tool loop's turns (`llama chat --tools`): an assistant message may carry
`tool_calls`, and each result is a `tool` message naming its call. Pure data; saved and loaded
as JSON."""

from __future__ import annotations

from collections.abc import Sequence

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamacli.core.errors import InvalidRequest

FORMAT = "llamacli-chat"
VERSION = 1
ROLES = ("user", "assistant", "tool")


class ConversationFileError(InvalidRequest):
    """A conversation file that cannot be read as one."""


@dataclass
class Conversation:
    system: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)  # {"role", "content"[, "tool_calls" | "tool_call_id", "name"]}

    # ---- building ------------------------------------------------------------------------
    def add_user(self, content: str, media: Sequence[Any] = ()) -> None:
        """A user message; `media`: its images (core/multimodal/prompt.Media), one
        `<__media__>` marker each in `content`, in order."""
        msg: dict[str, Any] = {"role": "user", "content": content}
        if media:
            msg["media"] = list(media)
        self.messages.append(msg)

    def media(self) -> list[Any]:
        """The images of the conversation, in the order of their markers."""
        return [m for msg in self.messages for m in msg.get("media", ())]

    def add_assistant(self, content: str, tool_calls: list[dict[str, Any]] | None = None) -> None:
        """An answer; with tool_calls (OpenAI's {id, type, function: {name, arguments}}) the
        calls it asked for."""
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            msg["tool_calls"] = tool_calls
        self.messages.append(msg)

    def add_tool_result(self, call_id: str, name: str, content: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})

    def clear(self) -> None:
        """Drop every turn; the system prompt stays."""
        self.messages.clear()

    def undo(self) -> int:
        """Drop the last exchange (the last user turn and everything after it).
        Returns how many messages were removed (0 when there is nothing to undo)."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i]["role"] == "user":
                n = len(self.messages) - i
                del self.messages[i:]
                return n
        n = len(self.messages)
        self.messages.clear()
        return n

    def drop_answer(self) -> bool:
        """For /retry: remove the answer after the last user turn (tool calls and results
        included) so that the last message is a user turn again. False when there is no user
        turn to answer."""
        while self.messages and self.messages[-1]["role"] != "user":
            self.messages.pop()
        return bool(self.messages) and self.messages[-1]["role"] == "user"

    @property
    def awaiting_answer(self) -> bool:
        return bool(self.messages) and self.messages[-1]["role"] == "user"

    @property
    def n_turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "user")

    @property
    def has_tool_turns(self) -> bool:
        return any(m["role"] == "tool" or m.get("tool_calls") for m in self.messages)

    def for_template(self) -> list[dict[str, Any]]:
        """The messages a chat template renders: the system prompt first, when set."""
        head: list[dict[str, Any]] = [{"role": "system", "content": self.system}] if self.system else []
        return head + [{k: m[k] for k in _KEYS if k in m} for m in self.messages]

    # ---- JSON ----------------------------------------------------------------------------
    def to_dict(self, **extra: Any) -> dict[str, Any]:
        # images stay out of the file (their markers stay in the text)
        msgs = [{k: v for k, v in m.items() if k != "media"} for m in self.messages]
        return {"format": FORMAT, "version": VERSION, **extra, "system": self.system, "messages": msgs}

    @classmethod
    def from_dict(cls, data: Any) -> Conversation:
        """Our own file, or a bare list of OpenAI messages (a leading system message becomes
        the system prompt)."""
        if isinstance(data, list):
            data = {"messages": data}
        if not isinstance(data, dict) or not isinstance(data.get("messages", []), list):
            raise ConversationFileError("not a conversation: expected an object with a 'messages' list")
        system = data.get("system") or ""
        if not isinstance(system, str):
            raise ConversationFileError("'system' must be a string")
        out: list[dict[str, Any]] = []
        for i, m in enumerate(data.get("messages", [])):
            if isinstance(m, dict) and m.get("content") is None and m.get("tool_calls"):
                m = {**m, "content": ""}  # OpenAI's null content beside tool calls
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise ConversationFileError(f"message {i}: expected {{'role': ..., 'content': '...'}}")
            role = m.get("role")
            if role == "system" and not out:
                system = (system + "\n\n" if system else "") + m["content"]
                continue
            if role not in ROLES:
                raise ConversationFileError(f"message {i}: role must be 'user', 'assistant' or 'tool', got {role!r}")
            out.append(_checked(i, role, m))
        return cls(system, out)

    def save(self, path: str | Path, **extra: Any) -> None:
        """Write the conversation as JSON (write a temporary file, then rename)."""
        p = Path(path).expanduser()
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(**extra), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        tmp.replace(p)

    @classmethod
    def load(cls, path: str | Path) -> tuple[Conversation, dict[str, Any]]:
        """The conversation in a file and the file's other top-level fields (e.g. settings)."""
        p = Path(path).expanduser()
        text = p.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConversationFileError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
        try:
            conv = cls.from_dict(data)
        except ConversationFileError as e:
            raise ConversationFileError(f"{p}: {e}") from None
        extra = {k: v for k, v in data.items() if k not in ("system", "messages")} if isinstance(data, dict) else {}
        return conv, extra


_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _checked(i: int, role: str, m: dict[str, Any]) -> dict[str, Any]:
    """One message of a file, with only the keys a conversation keeps (tool calls checked)."""
    out: dict[str, Any] = {"role": role, "content": m["content"]}
    if role == "tool":
        if not isinstance(m.get("tool_call_id"), str):
            raise ConversationFileError(f"message {i}: a tool message needs its 'tool_call_id'")
        out["tool_call_id"] = m["tool_call_id"]
        if isinstance(m.get("name"), str):
            out["name"] = m["name"]
    calls = m.get("tool_calls")
    if role == "assistant" and calls:
        ok = isinstance(calls, list) and all(
            isinstance(c, dict) and isinstance(c.get("function"), dict) and isinstance(c["function"].get("name"), str)
            for c in calls)
        if not ok:
            raise ConversationFileError(f"message {i}: tool_calls must be OpenAI's [{{'id', 'function': {{'name', 'arguments'}}}}]")
        out["tool_calls"] = calls
    return out
