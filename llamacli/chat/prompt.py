"""The prompt-toolkit input of the REPL: history file, slash-command completion, multiline keys.

Keys: Enter sends and Alt+Enter (Esc then Enter) inserts a newline; in multiline mode
(`/multiline`, `-mli`) the two swap. Pasted text (bracketed paste) is inserted as is, newlines
included, without sending. Ctrl-C clears a non-empty line; at an empty prompt it raises
KeyboardInterrupt (the loop's exit rule). Ctrl-D at an empty prompt raises EOFError.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import (
    CompleteEvent,
    Completer,
    Completion,
    PathCompleter,
)
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.styles import Style

from llamacli.chat.commands import COMMANDS
from llamacli.chat.settings import param_names

STYLE = Style.from_dict({"prompt": "ansigreen bold", "continuation": "ansibrightblack", "bottom-toolbar": "noreverse ansibrightblack"})


def default_history_path() -> Path:
    """$XDG_STATE_HOME/llamacli/chat_history (default ~/.local/state/llamacli/chat_history)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "llamacli" / "chat_history"


class SlashCompleter(Completer):
    """Completes /command names (with their help as meta), /set parameter names, and file
    paths after /save, /load, /image and /audio."""

    def __init__(self) -> None:
        self.paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or "\n" in text:
            return
        if " " not in text:
            word = text[1:].lower()
            for c in COMMANDS:
                if c.name.startswith(word):
                    yield Completion("/" + c.name, start_position=-len(text), display_meta=c.help)
            return
        cmd, _, rest = text[1:].partition(" ")
        if cmd == "set" and " " not in rest:
            for name in param_names():
                if name.startswith(rest.lower()):
                    yield Completion(name, start_position=-len(rest))
        elif cmd in ("save", "load", "image", "audio"):
            sub = Document(rest, len(rest))
            yield from self.paths.get_completions(sub, complete_event)


def key_bindings(multiline: Callable[[], bool]) -> KeyBindings:
    kb = KeyBindings()
    ml = Condition(multiline)

    @kb.add("escape", "enter", filter=~ml)
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        buf = event.current_buffer
        if buf.text:
            buf.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt(), style="class:aborting")

    return kb


def make_reader(
    multiline: Callable[[], bool],
    history_file: str | Path | None = None,
    *,
    color: bool = True,
    input: Any = None,
    output: Any = None,
) -> Callable[[], str]:
    """A `read()` for ChatLoop backed by a prompt-toolkit PromptSession.

    history_file None keeps history in memory only; the file's folder is created when needed.
    """
    history: History
    if history_file is None:
        history = InMemoryHistory()
    else:
        p = Path(history_file).expanduser()
        p.parent.mkdir(parents=True, exist_ok=True)
        history = FileHistory(str(p))

    def continuation(width: int, line_number: int, is_soft_wrap: int) -> FormattedText:  # a bool, typed int upstream
        return FormattedText([("class:continuation", "… ".rjust(width))])

    session: PromptSession[str] = PromptSession(
        history=history,
        completer=SlashCompleter(),
        complete_while_typing=True,
        key_bindings=key_bindings(multiline),
        multiline=Condition(multiline),
        prompt_continuation=continuation,
        enable_history_search=False,
        style=STYLE,
        include_default_pygments_style=False,
        color_depth=None if color else _mono(),
        input=input,
        output=output,
    )

    def read() -> str:
        return session.prompt(FormattedText([("class:prompt", "> ")]))

    return read


def _mono() -> Any:
    from prompt_toolkit.output import ColorDepth

    return ColorDepth.MONOCHROME


def make_asker(*, color: bool = True, input: Any = None, output: Any = None) -> Callable[[str], str]:
    """An `ask(question)` for the tool loop's confirmations: one line of prompt-toolkit input
    (no history, no completion); Ctrl-C raises KeyboardInterrupt, Ctrl-D EOFError."""
    session: PromptSession[str] = PromptSession(style=STYLE, include_default_pygments_style=False,
                                                color_depth=None if color else _mono(), input=input, output=output)

    def ask(question: str) -> str:
        return session.prompt(FormattedText([("class:prompt", question)]))

    return ask
