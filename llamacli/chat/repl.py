"""The REPL loop: read a line, run a slash command or a chat turn, repeat.

Input and output are injected (`read` and a `View`), so the loop runs the same under
prompt-toolkit, under a test's scripted input, or with plain `input()`.

`read()` returns the submitted text; it raises KeyboardInterrupt for Ctrl-C at an empty prompt
(the prompt-toolkit input clears a non-empty line itself) and EOFError for Ctrl-D.
"""

from __future__ import annotations

from collections.abc import Callable

from llamacli.chat import commands
from llamacli.chat.agent import Agent
from llamacli.chat.render import View
from llamacli.chat.session import ChatSession, Reply
from llamacli.core.errors import LlamaError

EXIT_HINT = "(Ctrl-C again or Ctrl-D to exit)"


class ChatLoop:
    def __init__(self, session: ChatSession, read: Callable[[], str], view: View, multiline: bool = False,
                 agent: Agent | None = None, ask: Callable[[str], str] = input) -> None:
        self.session = session
        self.read = read
        self.view = view
        self.multiline = multiline  # read by the prompt-toolkit input's key bindings
        self.last_reply: Reply | None = None
        self.agent = agent  # --tools: the model's tool calls run (chat/agent.py)
        self.ask = ask  # a yes/no question before a write tool runs

    def run(self, first: str | None = None, single_turn: bool = False) -> int:
        """Run until /exit, Ctrl-D or a second Ctrl-C at an empty prompt; returns the exit code.
        `first` is sent as the first message (-p/-f); with single_turn the loop ends after it."""
        if first is not None and first.strip():
            self.handle(first)
            if single_turn:
                return 0
        armed = False  # the previous input was a Ctrl-C at an empty prompt
        while True:
            try:
                line = self.read()
            except KeyboardInterrupt:
                if armed:
                    return 0
                armed = True
                self.view.info(EXIT_HINT)
                continue
            except EOFError:
                return 0
            armed = False
            if self.handle(line) == commands.EXIT:
                return 0
            if single_turn and self.last_reply is not None:
                return 0

    def handle(self, line: str) -> str | None:
        """One submitted input: a slash command, or a message to answer."""
        text = line.strip()
        if not text:
            return None
        try:
            if text.startswith("/") and not text.startswith("//"):
                return commands.dispatch(self, text)
            message = line.strip("\n")
            if text.startswith("//"):
                message = message.lstrip()[1:]
            self.session.add_user(message)
            self.answer(new_turn=True)
        except (LlamaError, OSError) as e:
            self.view.error(_describe(e))
        except KeyboardInterrupt:  # outside the streaming itself (e.g. while printing)
            self.view.info("interrupted")
        return None

    def answer(self, new_turn: bool = False) -> Reply | None:
        """Generate the answer to the conversation's last user turn, shown through the view.

        A prompt that does not fit the context is an error; the user turn just typed is then
        taken back (new_turn) so that the conversation stays answerable.
        """
        conv = self.session.conversation
        n_before = len(conv.messages)
        reply: Reply | None = None
        try:
            if self.agent is not None and self.agent.enabled:
                reply = self.agent.run(self.session, self.view, self.ask)
            else:
                self.view.begin_reply()
                try:
                    reply = self.session.reply(self.view.stream, self.view.thought)
                finally:
                    self.view.end_reply(reply)
        except LlamaError:
            if new_turn and len(conv.messages) == n_before and conv.awaiting_answer:
                conv.messages.pop()
            raise
        self.last_reply = reply
        return reply


def _describe(e: BaseException) -> str:
    if isinstance(e, OSError) and not isinstance(e, LlamaError):
        return f"{e.strerror or e}: {e.filename}" if e.filename else str(e.strerror or e)
    return str(e)
