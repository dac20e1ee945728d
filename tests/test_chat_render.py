"""The views: live Markdown (rich) and plain text."""

from __future__ import annotations

import io
import re

from rich.console import Console

from llamacli.chat.render import PlainView, RichView, _Tail
from llamacli.chat.session import Reply, TurnStats

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MD = "Here is **code**:\n\n```python\ndef add(a, b):\n    return a + b\n```\n"


def console(height: int = 12) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=60, height=height, color_system="truecolor"), buf


def test_rich_view_renders_markdown_and_footer() -> None:
    c, buf = console()
    v = RichView(c)
    v.begin_reply()
    for piece in MD.split(" "):
        v.stream(piece + " ")
    v.end_reply(Reply(MD, None, False, TurnStats(n_generated=12, tokens_per_second=5.0, n_prompt=9, n_prompt_new=9, ctx_used=21, n_ctx=100)))
    raw = buf.getvalue()
    plain = ANSI.sub("", raw)
    assert "def add(a, b):" in plain and "```" not in plain.split("\n", 2)[-1]  # fences rendered away
    assert "**" not in plain  # bold rendered
    assert "\x1b[38;2;" in raw  # syntax highlighting colours in the code block
    assert "12 tokens · 5.0 tok/s · prompt 9 · context 21/100 (21%)" in plain
    # the finished reply is printed once, after the transient live region is cleared
    assert plain.count("return a + b") >= 1


def test_live_tail_shows_only_the_last_screenful() -> None:
    c, _ = console(height=6)
    t = _Tail()
    t.text = "\n\n".join(f"paragraph {i}" for i in range(20))
    lines = ANSI.sub("", "".join(s.text for s in c.render(t))).splitlines()
    assert len(lines) <= 5 and "paragraph 19" in lines[-1] and "paragraph 0" not in "".join(lines)
    t.text = ""
    assert "…" in "".join(s.text for s in c.render(t))


def test_rich_view_interrupted_without_stats() -> None:
    c, buf = console()
    v = RichView(c, show_stats=False)
    v.begin_reply()
    v.stream("partial")
    v.end_reply(Reply("partial", None, True))
    plain = ANSI.sub("", buf.getvalue())
    assert "partial" in plain and "interrupted" in plain


def test_plain_view() -> None:
    buf = io.StringIO()
    v = PlainView(buf)
    v.begin_reply()
    v.stream("a **b**")
    v.end_reply(Reply("a **b**", None, False, TurnStats(n_generated=1, n_ctx=10)))
    v.error("boom [x]")
    v.info("note")
    assert buf.getvalue() == "a **b**\n[1 token · 0.0 tok/s · prompt 0 · context 0/10 (0%)]\nerror: boom [x]\nnote\n"
