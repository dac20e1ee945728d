"""The tool loop of `llama chat --tools`: the model's tool calls run, their results go back into
the conversation, and the model goes on, until it answers without calling a tool (or after
`max_steps` answers). Write tools (exec_shell_command, write_file, edit_file, and MCP tools not
marked read-only) ask first, unless --no-confirm-tools or "always" said otherwise.

    agent = Agent(box)                             # box: core/tools ToolBox
    reply = agent.run(session, view, ask)          # ask(question) -> the user's answer

Each step is one engine task (`ChatSession.submit_step`/`stream_step`: core's tool calling, with
the tools' definitions in the prompt and the call grammar). The view shows each step's reply as
any other, and each call as one folded line (`/tools show` unfolds the results). A call runs on
its own thread: Ctrl-C cancels it (a command is killed) and ends the turn.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llamacli.chat.session import ChatSession, Reply
from llamacli.core.text.tool_calls import ToolCall
from llamacli.core.tools import AgentTool, ToolBox, ToolParamsError, UnknownTool

MAX_STEPS = 10
DECLINED = "the user declined to run this tool"
CHOICES = ("auto", "required", "none")


class ToolView(Protocol):
    """What the loop needs of a view (chat/render.py's views have it)."""

    def begin_reply(self) -> None: ...
    def stream(self, text: str) -> None: ...
    def thought(self, text: str) -> None: ...
    def end_reply(self, reply: Reply | None) -> None: ...
    def info(self, text: str) -> None: ...
    def tool_start(self, name: str, arguments: str) -> None: ...
    def tool_end(self, name: str, result: str, ok: bool) -> None: ...


class Stop(Exception):
    """The user ended the turn (Ctrl-C or Ctrl-D at a confirmation, Ctrl-C during a call)."""


@dataclass
class Agent:
    box: ToolBox
    confirm: bool = True  # ask before a write tool runs
    enabled: bool = True  # /tools off: answer without tools (they stay loaded)
    choice: str = "auto"  # tool_choice of a turn's first step: auto, required, none or a tool's name
    max_steps: int = MAX_STEPS  # model answers per user turn
    always: set[str] = field(default_factory=set)  # write tools the user allowed for the session

    def tool_choice(self, step: int) -> Any:
        """OpenAI's tool_choice for a step: the setting for the first, auto after (a forced
        call on every step would never end)."""
        if step > 0 or self.choice == "auto":
            return "auto"
        if self.choice in CHOICES:
            return self.choice
        return {"type": "function", "function": {"name": self.choice}}

    def run(self, session: ChatSession, view: ToolView, ask: Callable[[str], str]) -> Reply:
        """Answer the conversation's last turn, running the model's calls until it answers
        without one. Every call gets a result message, so the conversation stays well formed."""
        conv = session.conversation
        reply: Reply | None = None
        for step in range(self.max_steps):
            task, setup = session.submit_step(self.box.definitions(), self.tool_choice(step))
            view.begin_reply()
            reply = None
            try:
                reply = session.stream_step(task, setup, view.stream, view.thought)
            finally:
                view.end_reply(reply)
            if not reply.tool_calls:
                if reply.content.strip():
                    conv.add_assistant(reply.content)
                return reply
            conv.add_assistant(reply.content, [c.to_openai() for c in reply.tool_calls])
            for i, call in enumerate(reply.tool_calls):
                try:
                    text = self.execute(call, view, ask)
                except Stop:
                    for rest in reply.tool_calls[i:]:
                        conv.add_tool_result(rest.id, rest.name, _as_text({"error": "cancelled by the user"}))
                    reply.interrupted = True
                    view.info("tool calls stopped; the conversation keeps what ran")
                    return reply
                conv.add_tool_result(call.id, call.name, text)
        view.info(f"stopped after {self.max_steps} steps of tool calls; send a message to let the model go on")
        assert reply is not None
        return reply

    def execute(self, call: ToolCall, view: ToolView, ask: Callable[[str], str]) -> str:
        """One call: its result as the tool message's text (raises Stop when the user ends the turn)."""
        try:
            tool = self.box.find(call.name)
            args = json.loads(call.arguments or "{}")
            tool.check(args)
        except (UnknownTool, ToolParamsError) as e:
            return self._report(view, call, {"error": str(e)})
        except ValueError as e:
            return self._report(view, call, {"error": f"the arguments are not JSON: {e}"})
        if not self._allowed(tool, call, ask):
            return self._report(view, call, {"error": DECLINED})
        view.tool_start(call.name, call.arguments)
        result = self._invoke(tool, args)
        text = _as_text(result)
        view.tool_end(call.name, text, "error" not in result)
        return text

    def _allowed(self, tool: AgentTool, call: ToolCall, ask: Callable[[str], str]) -> bool:
        if not tool.writes or not self.confirm or tool.name in self.always:
            return True
        try:
            answer = ask(f"run {tool.name} {call.arguments}? [y]es, [n]o, [a]lways for {tool.name}: ").strip().lower()
        except (KeyboardInterrupt, EOFError):
            raise Stop from None
        if answer in ("a", "always"):
            self.always.add(tool.name)
            return True
        return answer in ("y", "yes")

    def _invoke(self, tool: AgentTool, args: dict[str, Any]) -> dict[str, Any]:
        """Run the call on a thread; Ctrl-C cancels it (and waits for it to end) and stops the turn."""
        call = self.box.call()
        out: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: out.update(self.box.invoke(tool, args, call)), daemon=True,
                                  name=f"llama-tool-{tool.name}")
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.1)
        except KeyboardInterrupt:
            call.cancelled.set()
            worker.join()
            raise Stop from None
        return out

    @staticmethod
    def _report(view: ToolView, call: ToolCall, result: dict[str, Any]) -> str:
        text = _as_text(result)
        view.tool_start(call.name, call.arguments)
        view.tool_end(call.name, text, False)
        return text


def _as_text(result: dict[str, Any]) -> str:
    """A result as the model reads it: the text of a plain-text result, else its JSON (as
    llama-server's web page sends it)."""
    if set(result) == {"plain_text_response"}:
        return str(result["plain_text_response"])
    return json.dumps(result, ensure_ascii=False)


def describe_tools(agent: Agent) -> list[str]:
    """/tools: one line per tool, then the settings."""
    rows = []
    for t in agent.box.tools:
        mark = ("asks first" if agent.confirm and t.name not in agent.always else "runs without asking") if t.writes else ""
        kind = "MCP" if t.kind == "mcp" else ""
        rows.append(f"  {t.name:<24} {t.display_name}" + "".join(f" · {x}" for x in (kind, mark) if x))
    rows.append(f"tools {'on' if agent.enabled else 'off'} · confirm write tools: {'on' if agent.confirm else 'off'} · "
                f"first step's tool_choice: {agent.choice} · at most {agent.max_steps} steps a turn")
    return rows


__all__ = ["Agent", "Stop", "ToolView", "describe_tools"]
