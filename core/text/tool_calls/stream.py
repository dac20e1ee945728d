"""Streaming tool-call parsing: text pieces in, OpenAI deltas out, and the final message.

    parser = setup.parser()                  # or ToolCallParser("hermes")
    for piece in pieces:                     # Partial.content from the engine
        for d in parser.feed(piece):
            send(d.to_openai())              # {"content": ...} or {"tool_calls": [...]}
    for d in parser.finish(cut=final.stop_type != "eos"): send(d.to_openai())
    msg = parser.message                     # ParsedMessage: content, tool_calls
    finish_reason = parser.finish_reason(final.finish_reason)

A call is announced once its name is complete (index, id, name, empty arguments); then its
arguments follow as fragments of their JSON text. The fragments joined are exactly the
final `arguments` string, and no delta is ever taken back: the parser reads the whole text
each time and sends only what can no longer change (see `parse.scan`).
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamacli.core.text.reasoning import ReasoningSplitter
from llamacli.core.text.tool_calls.harmony import scan_harmony
from llamacli.core.text.tool_calls.parse import Scan, scan

_ALNUM = string.ascii_letters + string.digits


def random_call_id() -> str:
    """An OpenAI-style call id."""
    return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


def mistral_call_id() -> str:
    """Mistral's templates insist on 9 letters or digits."""
    return "".join(secrets.choice(_ALNUM) for _ in range(9))


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ParsedMessage:
    """The assistant message: content (None when there is only tool calls), tool calls, and
    the thoughts of a reasoning model (reasoning_content, only when there were some)."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning_content: str = ""

    def to_openai(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content:
            msg["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            msg["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return msg


@dataclass
class Delta:
    """One streamed change: some content, some reasoning, or a call's start (id, name), or
    argument text."""

    content: str | None = None
    reasoning: str | None = None
    index: int | None = None  # the tool call this delta is about
    id: str | None = None
    name: str | None = None
    arguments: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The `delta` object of a chat.completion.chunk."""
        if self.reasoning is not None:
            return {"reasoning_content": self.reasoning}
        if self.index is None:
            return {"content": self.content or ""}
        fn: dict[str, Any] = {"arguments": self.arguments or ""}
        call: dict[str, Any] = {"index": self.index}
        if self.name is not None:
            call["id"] = self.id
            call["type"] = "function"
            fn = {"name": self.name, "arguments": self.arguments or ""}
        call["function"] = fn
        return {"tool_calls": [call]}


class ToolCallParser:
    """Incremental parser for one generation in one tool-call format."""

    def __init__(
        self,
        fmt: str = "content",
        id_factory: Callable[[], str] | None = None,
        tool_names: frozenset[str] | None = None,
        strip: bool | None = None,
        reasoning: ReasoningSplitter | None = None,
        prefix: str = "",
    ) -> None:
        self.fmt = fmt
        self.id_factory = id_factory or (mistral_call_id if fmt.startswith("mistral") else random_call_id)
        self.tool_names = tool_names  # informational: calls of unknown tools are still reported
        # harmony bodies are kept as written (llama.cpp does not trim them)
        self.strip = fmt != "content" and not fmt.startswith("harmony") if strip is None else strip
        self.reasoning = reasoning  # thoughts are split off before the tool-call scan
        self.prefix = prefix  # harmony: the open message's header, ahead of the output (a prefill)
        self.text = ""
        self._reasoning_sent = 0  # characters of reasoning sent
        self._content_sent = 0  # characters of content sent
        self._ids: list[str] = []
        self._args_sent: list[int] = []
        self._finished = False
        self.message = ParsedMessage(None)

    def feed(self, piece: str) -> list[Delta]:
        """Deltas made safe by this piece of text."""
        if self._finished:
            raise RuntimeError("the parser has finished")
        self.text += piece
        if not piece:
            return []
        return self._diff(final=False)

    def finish(self, cut: bool = False) -> list[Delta]:
        """The rest, once generation ended; then `message` holds the whole answer. ``cut``:
        the output did not end on its own (max_tokens, stop string), so a call still being
        written is dropped, and so is any text that might have been the start of one."""
        if self._finished:
            return []
        out = self._diff(final=True, cut=cut)
        self._finished = True
        return out

    def finish_reason(self, engine_reason: str) -> str:
        """OpenAI's finish_reason: "tool_calls" when the answer ended normally with calls."""
        if engine_reason == "stop" and self.message.tool_calls:
            return "tool_calls"
        return engine_reason

    def _scan(self, final: bool, cut: bool) -> tuple[str, Scan]:
        """(thoughts, content and calls) of the text so far. Harmony (gpt-oss) has its
        thoughts in a channel of its own; the other formats' come off the front first."""
        if self.fmt.startswith("harmony"):  # "harmony": calls parsed; "harmony_text": none
            h = scan_harmony(self.prefix + self.text, final and not cut, self.reasoning is not None, self.fmt == "harmony")
            return h.reasoning, Scan(h.content, h.calls)
        text, thoughts = self.text, ""
        if self.reasoning is not None:
            split = self.reasoning.split(self.text, final)
            text, thoughts = split.content, split.reasoning
        # a cut output reads as one that is still going: what is undecided is held, i.e. dropped
        return thoughts, scan(self.fmt, text, final and not cut)

    def _diff(self, final: bool, cut: bool = False) -> list[Delta]:
        out: list[Delta] = []
        thoughts, s = self._scan(final, cut)
        if len(thoughts) > self._reasoning_sent:
            out.append(Delta(reasoning=thoughts[self._reasoning_sent :]))
            self._reasoning_sent = len(thoughts)
        if cut:
            done = 0
            while done < len(s.calls) and s.calls[done].complete and s.calls[done].name is not None:
                done += 1
            s.calls = s.calls[:done]
        content = s.content
        if self.strip:
            content = content.strip() if final else content.lstrip()
            if not final:
                content = content.rstrip()  # trailing whitespace may end the message: hold it
        if len(content) > self._content_sent:
            out.append(Delta(content=content[self._content_sent :]))
            self._content_sent = len(content)
        calls: list[ToolCall] = []
        for i, c in enumerate(s.calls):
            if c.name is None:
                break
            if i == len(self._ids):
                self._ids.append(self.id_factory())
                self._args_sent.append(0)
                out.append(Delta(index=i, id=self._ids[i], name=c.name, arguments=""))
            if len(c.arguments) > self._args_sent[i]:
                out.append(Delta(index=i, arguments=c.arguments[self._args_sent[i] :]))
                self._args_sent[i] = len(c.arguments)
            calls.append(ToolCall(self._ids[i], c.name, c.arguments))
        message_text = content if content or not calls else None
        self.message = ParsedMessage(message_text if final else content, calls, thoughts)
        return out


def parse_message(
    fmt: str, text: str, id_factory: Callable[[], str] | None = None, cut: bool = False
) -> ParsedMessage:
    """The whole output at once (non-streaming); ``cut`` as in `ToolCallParser.finish`."""
    p = ToolCallParser(fmt, id_factory)
    p.feed(text)
    p.finish(cut)
    return p.message
