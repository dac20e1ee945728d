"""Views: how the REPL shows replies, the stats footer, notes and errors.

`PlainView` writes plain text (no colours, no cursor movement): dumb terminals, --no-color,
tests. `RichView` streams a reply as live Markdown in a transient region (only the last
screenful is redrawn, so nothing flickers or scrolls twice), then prints the finished reply once
as Markdown with highlighted code blocks, followed by the dim one-line footer.

A reasoning model's thoughts stream dimmed; once the reply is done they are folded into one
dim line (`/thoughts` unfolds them: the views' `show_thoughts` toggle). Tool calls (`--tools`)
are folded the same way: one line for the call, one for its outcome; `/tools show` unfolds the
results (`show_tools`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any, Protocol

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.text import Text

from llamacli.chat.session import Reply, TurnStats

CODE_THEME = "monokai"


def format_footer(stats: TurnStats, interrupted: bool = False, context_full: bool = False) -> str:
    """`42 tokens · 6.8 tok/s · prompt 30 (+12 cached) · context 84/4096 (2%)`."""
    parts = []
    if interrupted:
        parts.append("interrupted")
    parts.append(f"{stats.n_generated} token{'s' if stats.n_generated != 1 else ''}")
    if stats.n_generated:
        parts.append(f"{stats.tokens_per_second:.1f} tok/s")
    cached = stats.n_prompt - stats.n_prompt_new
    parts.append(f"prompt {stats.n_prompt_new}" + (f" (+{cached} cached)" if cached > 0 else ""))
    pct = 100.0 * stats.ctx_used / stats.n_ctx if stats.n_ctx else 0.0
    parts.append(f"context {stats.ctx_used}/{stats.n_ctx} ({pct:.0f}%)")
    if context_full:
        parts.append("context full")
    return " · ".join(parts)


def folded_thoughts(text: str) -> str:
    """The one line that stands for folded thoughts."""
    n = len(text.split())
    return f"▸ thought for {n} word{'s' if n != 1 else ''} (/thoughts to show)"


def _short(text: str, width: int = 100) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def tool_call_line(name: str, arguments: str) -> str:
    """The line that stands for a call: `▸ read_file {"path": "a.txt"}`."""
    return f"▸ {name} {_short(arguments)}".rstrip()


def tool_outcome_line(result: str, ok: bool) -> str:
    """The folded outcome of a call: its size, or its error."""
    if not ok:
        try:
            msg = str(json.loads(result).get("error", result))
        except (ValueError, AttributeError):
            msg = result
        return f"  ↳ error: {_short(msg)}"
    n = len(result.splitlines())
    return f"  ↳ ok · {n} line{'s' if n != 1 else ''} (/tools show to unfold)"


class View(Protocol):
    show_thoughts: bool
    show_tools: bool

    def begin_reply(self) -> None: ...
    def stream(self, text: str) -> None: ...
    def thought(self, text: str) -> None: ...
    def end_reply(self, reply: Reply | None) -> None: ...
    def info(self, text: str) -> None: ...
    def error(self, text: str) -> None: ...
    def tool_start(self, name: str, arguments: str) -> None: ...
    def tool_end(self, name: str, result: str, ok: bool) -> None: ...


class PlainView:
    """Plain text to one stream; replies appear as they are generated. Shown thoughts are
    written between `<think>` lines; folded ones become one bracketed line before the answer."""

    def __init__(self, out: IO[str], show_stats: bool = True, show_thoughts: bool = False, show_tools: bool = False) -> None:
        self.out = out
        self.show_stats = show_stats
        self.show_thoughts = show_thoughts
        self.show_tools = show_tools
        self._last = ""
        self._thought = ""  # thoughts of this reply not yet closed or folded
        self._thinking = False  # a shown thought block is open

    def begin_reply(self) -> None:
        self._last = ""
        self._thought = ""
        self._thinking = False

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self._last = text

    def thought(self, text: str) -> None:
        self._thought += text
        if self.show_thoughts:
            if not self._thinking:
                self._write("<think>\n")
                self._thinking = True
            self._write(text)

    def _close_thoughts(self) -> None:
        if self._thinking:
            self._write(("" if self._last.endswith("\n") else "\n") + "</think>\n")
        elif self._thought:
            self._write(f"[{folded_thoughts(self._thought)}]\n")
        self._thinking = False
        self._thought = ""

    def stream(self, text: str) -> None:
        self._close_thoughts()
        self._write(text)

    def end_reply(self, reply: Reply | None) -> None:
        self._close_thoughts()
        if self._last and not self._last.endswith("\n"):
            self.out.write("\n")
        if reply is not None and self.show_stats:
            self.out.write(f"[{format_footer(reply.stats, reply.interrupted, reply.context_full)}]\n")
        self.out.flush()

    def info(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def error(self, text: str) -> None:
        self.out.write(f"error: {text}\n")
        self.out.flush()

    def tool_start(self, name: str, arguments: str) -> None:
        self.info(f"[{tool_call_line(name, arguments)}]")

    def tool_end(self, name: str, result: str, ok: bool) -> None:
        if self.show_tools and ok:
            self.info(result.rstrip("\n"))
        else:
            self.info(f"[{tool_outcome_line(result, ok).strip()}]")


class _Tail:
    """The reply so far as Markdown, cut to its last screenful (what the live region shows).
    The Markdown is rendered again only when the text or the width changed."""

    def __init__(self) -> None:
        self.text = ""
        self.thought = ""  # thoughts streaming before the answer: shown dimmed
        self._key: tuple[str, int] | None = None
        self._lines: list[list[Segment]] = []

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.text and self.thought:
            lines = console.render_lines(Text(self.thought, style="dim italic"), options.update(height=None), pad=False)
            for i, line in enumerate(lines[-max(1, console.size.height - 1) :]):
                if i:
                    yield Segment.line()
                yield from line
            return
        if not self.text:
            yield Text("…", style="dim")
            return
        text = self.text
        if self._key != (text, options.max_width):
            opts = options.update(height=None)
            opts.max_height = 1 << 30
            self._lines = console.render_lines(Markdown(text, code_theme=CODE_THEME), opts, pad=False)
            self._key = (text, options.max_width)
        keep = max(1, console.size.height - 1)
        for i, line in enumerate(self._lines[-keep:]):
            if i:
                yield Segment.line()
            yield from line


class _NoEcho:
    """Terminal echo off while a reply streams: a Ctrl-C's `^C` (or type-ahead) echoed into the
    live region would shift it, and its transient clearing would leave a stale copy behind.
    Type-ahead is not lost: the next prompt reads it."""

    def __init__(self) -> None:
        self._saved: list[Any] | None = None

    def __enter__(self) -> _NoEcho:
        try:
            import termios

            fd = sys.stdin.fileno()
            if os.isatty(fd):
                self._saved = termios.tcgetattr(fd)
                attrs = termios.tcgetattr(fd)
                attrs[3] &= ~termios.ECHO
                termios.tcsetattr(fd, termios.TCSANOW, attrs)
        except (ImportError, OSError, ValueError, AttributeError):
            self._saved = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, self._saved)
            self._saved = None


class RichView:
    def __init__(self, console: Console, show_stats: bool = True, markdown: bool = True, show_thoughts: bool = False,
                 show_tools: bool = False) -> None:
        self.console = console
        self.show_stats = show_stats
        self.markdown = markdown
        self.show_thoughts = show_thoughts
        self.show_tools = show_tools
        self._tail = _Tail()
        self._live: Live | None = None
        self._no_echo = _NoEcho()

    def begin_reply(self) -> None:
        self._tail = _Tail()
        if self.console.is_terminal:
            self._no_echo.__enter__()
        self._live = Live(
            self._tail, console=self.console, refresh_per_second=8, transient=True,
            vertical_overflow="visible", redirect_stdout=False, redirect_stderr=False,
        )
        self._live.start()

    def stream(self, text: str) -> None:
        self._tail.text += text

    def thought(self, text: str) -> None:
        self._tail.thought += text

    def print_thoughts(self, thought: str) -> None:
        """Thoughts unfolded (dimmed), or the one folded line."""
        if thought.strip():
            shown = thought if self.show_thoughts else folded_thoughts(thought)
            self.console.print(Text(shown, style="dim italic" if self.show_thoughts else "dim"), soft_wrap=True)

    def end_reply(self, reply: Reply | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._no_echo.__exit__()
        self.print_thoughts(reply.reasoning if reply is not None else self._tail.thought)
        text = reply.content if reply is not None else self._tail.text
        if text.strip():
            body = Markdown(text, code_theme=CODE_THEME) if self.markdown else Text(text)
            self.console.print(body)
        if reply is not None and self.show_stats:
            self.console.print(Text(format_footer(reply.stats, reply.interrupted, reply.context_full), style="dim"))
        elif reply is not None and reply.interrupted:
            self.console.print(Text("interrupted", style="dim"))

    def info(self, text: str) -> None:
        self.console.print(Text(text, style="dim"), soft_wrap=True)

    def error(self, text: str) -> None:
        self.console.print(Text.assemble(("error: ", "bold red"), text), soft_wrap=True)

    def tool_start(self, name: str, arguments: str) -> None:
        self.console.print(Text(tool_call_line(name, arguments), style="dim cyan"), soft_wrap=True)

    def tool_end(self, name: str, result: str, ok: bool) -> None:
        if self.show_tools and ok:
            self.console.print(Text(result.rstrip("\n"), style="dim"), soft_wrap=True)
        else:
            self.console.print(Text(tool_outcome_line(result, ok), style="dim" if ok else "dim red"), soft_wrap=True)
