"""`llama chat` when stdin is not a terminal: scripting through pipes.

* The whole input is one user message (after -p/-f text, when given). Only the answer goes to
  stdout, as plain text while it is generated; the stats line and errors go to stderr.
* --json: one JSON object instead (content, finish_reason, usage, timings).
* --jsonl / --batch-lines: every non-blank input line is its own one-message conversation. All
  of them are submitted at once, so the engine runs them concurrently on its slots; answers
  are printed in input order, one line each (a JSON object with --jsonl or --json, otherwise
  the answer's text with backslashes and newlines escaped as \\\\ and \\n).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from rich.text import Text

from llamacli.chat.conversation import Conversation
from llamacli.chat.agent import Agent
from llamacli.chat.render import format_footer, tool_call_line, tool_outcome_line
from llamacli.chat.session import ChatSession, Reply
from llamacli.core.errors import LlamaError
from llamacli.core.runtime.tasks import Task


def join_message(prefix: str | None, piped: str) -> str:
    """-p/-f text followed by the piped text, separated by a blank line."""
    piped = piped.rstrip("\n")
    if prefix and piped:
        return prefix.rstrip("\n") + "\n\n" + piped
    return prefix or piped


def batch_prompts(piped: str, prefix: str | None = None) -> list[str]:
    """One message per non-blank input line (the -p text first, when given)."""
    return [join_message(prefix, line) for line in piped.splitlines() if line.strip()]


def escape_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


def reply_object(reply: Reply, model: str = "", index: int | None = None) -> dict[str, Any]:
    final = reply.final
    n_prompt = len(final.prompt_tokens) if final is not None else 0
    n_gen = len(final.tokens) if final is not None else 0
    obj: dict[str, Any] = {} if index is None else {"index": index}
    obj.update(
        {
            "content": reply.content,
            "finish_reason": reply.finish_reason,
            "model": os.path.basename(model),
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen},
            "timings": final.timings.to_dict() if final is not None else {},
        }
    )
    if reply.reasoning:
        obj["reasoning_content"] = reply.reasoning
    if final is not None and final.truncated:
        obj["truncated"] = True
    return obj


@dataclass
class PipeOutput:
    out: IO[str]  # stdout: answers only
    err: Any  # a rich Console on stderr, for the stats line
    show_timings: bool = True


class _ToolLines:
    """The tool loop's view on a pipe: the answer's text through `write`, each call and its
    outcome as a dim line on stderr. Nobody can answer a confirmation: write tools are declined
    (unless --no-confirm-tools)."""

    show_tools = False

    def __init__(self, write: Callable[[str], None], err: Any) -> None:
        self.stream = write
        self.err = err

    def begin_reply(self) -> None:
        pass

    def thought(self, text: str) -> None:
        pass

    def end_reply(self, reply: Reply | None) -> None:
        pass

    def info(self, text: str) -> None:
        self.err.print(Text(text, style="dim"), soft_wrap=True)

    def tool_start(self, name: str, arguments: str) -> None:
        self.info(tool_call_line(name, arguments))

    def tool_end(self, name: str, result: str, ok: bool) -> None:
        self.info(tool_outcome_line(result, ok))

    def ask(self, question: str) -> str:
        self.info(f"{question.split('?')[0]}: declined (input is a pipe; --no-confirm-tools lets write tools run)")
        return "n"


def answer_once(session: ChatSession, message: str, io: PipeOutput, as_json: bool, agent: Agent | None = None) -> int:
    """Answer one message (with `agent`, through the tool loop). Ctrl-C cancels the task and
    re-raises KeyboardInterrupt (exit 130)."""
    session.add_user(message)
    written: list[str] = []

    def write(text: str) -> None:
        if not as_json:
            io.out.write(text)
            io.out.flush()
            written.append(text)

    if agent is not None:
        view = _ToolLines(write, io.err)
        reply = agent.run(session, view, view.ask)
    else:
        reply = session.stream(session.submit(), write)
    if as_json:
        io.out.write(json.dumps(reply_object(reply, session.info.path), ensure_ascii=False) + "\n")
    elif written and not written[-1].endswith("\n"):
        io.out.write("\n")
    io.out.flush()
    if reply.interrupted:
        raise KeyboardInterrupt
    if io.show_timings:
        io.err.print(Text(format_footer(reply.stats, context_full=reply.context_full), style="dim"))
    return 0


def answer_lines(session: ChatSession, messages: list[str], io: PipeOutput, as_json: bool) -> int:
    """Submit every message at once; print one line per message in input order. Exit status 1
    when any message failed (its line then carries an "error", or is empty in text mode)."""
    tasks: list[Task | LlamaError] = []
    for m in messages:
        conv = Conversation(session.conversation.system, [{"role": "user", "content": m}])
        try:
            tasks.append(session.submit(conv))
        except LlamaError as e:
            tasks.append(e)
    status = 0
    try:
        for i, t in enumerate(tasks):
            obj: dict[str, Any]
            try:
                if isinstance(t, LlamaError):
                    raise t
                reply = session.stream(t, lambda _s: None)
                if reply.interrupted:
                    raise KeyboardInterrupt
                obj = reply_object(reply, session.info.path, index=i)
                line = json.dumps(obj, ensure_ascii=False) if as_json else escape_line(reply.content)
            except LlamaError as e:
                status = 1
                io.err.print(Text.assemble(("error: ", "bold red"), f"line {i + 1}: {e}"), soft_wrap=True)
                line = json.dumps({"index": i, "error": str(e)}, ensure_ascii=False) if as_json else ""
            io.out.write(line + "\n")
            io.out.flush()
    except KeyboardInterrupt:
        for t in tasks:
            if isinstance(t, Task):
                t.cancel()
        raise
    return status
