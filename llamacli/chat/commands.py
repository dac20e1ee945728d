"""Slash commands: a table of name -> handler, dispatched by the REPL loop.

Each handler takes the loop (for its session and view) and the text after the command name,
and returns EXIT to end the session or None to go on. Errors are raised as LlamaError/OSError;
the loop turns them into one `error:` line.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llamacli.chat.conversation import Conversation
from llamacli.chat.settings import param_names
from llamacli.core.errors import InvalidRequest

if TYPE_CHECKING:
    from llamacli.chat.repl import ChatLoop

EXIT = "exit"


@dataclass(frozen=True)
class Command:
    name: str
    args: str
    help: str
    run: Callable[[ChatLoop, str], str | None]


def _help(loop: ChatLoop, arg: str) -> None:
    name = arg.strip().lstrip("/")
    if name:
        cmd = find(name)
        loop.view.info(f"/{cmd.name} {cmd.args}".rstrip() + f"\n  {cmd.help}")
        if cmd.name == "set":
            loop.view.info("  settable: " + ", ".join(param_names()))
        return
    width = max(len(f"/{c.name} {c.args}") for c in COMMANDS)
    lines = [f"  {f'/{c.name} {c.args}'.ljust(width)}  {c.help}" for c in COMMANDS]
    lines += [
        "",
        "  Enter sends; Alt+Enter (or Esc then Enter) inserts a newline; /multiline swaps the two.",
        "  Ctrl-C stops a reply (the conversation is kept); Ctrl-C twice at an empty prompt, or",
        "  Ctrl-D, exits. Start a message with // to send a line that begins with /.",
    ]
    loop.view.info("\n".join(lines))


def _clear(loop: ChatLoop, arg: str) -> None:
    loop.session.conversation.clear()
    loop.view.info("conversation cleared" + (" (system prompt kept)" if loop.session.conversation.system else ""))


def _system(loop: ChatLoop, arg: str) -> None:
    conv = loop.session.conversation
    text = arg.strip()
    if not text:
        loop.view.info(f"system prompt: {conv.system!r}" if conv.system else "no system prompt (set one: /system TEXT)")
        return
    if text in ("-", "--clear", "none"):
        conv.system = ""
        loop.view.info("system prompt removed")
        return
    conv.system = text
    loop.view.info("system prompt set")


def _set(loop: ChatLoop, arg: str) -> None:
    parts = arg.strip().split(None, 1)
    if not parts:
        _show_settings(loop)
        return
    if len(parts) == 1:
        raise InvalidRequest(f"usage: /set PARAM VALUE (e.g. /set temp 0.2); settable: {', '.join(param_names())}")
    name, value = loop.session.settings.set(parts[0], parts[1])
    loop.view.info(f"{name} = {value}")


def _show_settings(loop: ChatLoop) -> None:
    s = loop.session.settings.summary()
    loop.view.info("  " + "  ".join(f"{k}={v}" for k, v in s.items()))


def _show(loop: ChatLoop, arg: str) -> None:
    ses = loop.session
    info = ses.info
    rows = [
        ("model", f"{info.name or '?'} ({info.architecture or '?'})"),
        ("file", info.path or "?"),
        ("context", f"{ses.n_ctx} tokens (trained on {info.n_ctx_train})" if info.n_ctx_train else f"{ses.n_ctx} tokens"),
        ("chat template", ses.template.name),
        ("system prompt", repr(ses.conversation.system) if ses.conversation.system else "none"),
        ("conversation", f"{_n(ses.conversation.n_turns, 'turn')}, {_n(len(ses.conversation.messages), 'message')}"),
        ("settings", "  ".join(f"{k}={v}" for k, v in ses.settings.summary().items())),
        ("input", "multiline (Enter: newline, Alt+Enter: send)" if loop.multiline else "single line (Alt+Enter: newline)"),
    ]
    if info.n_params:
        rows.insert(1, ("parameters", f"{info.n_params / 1e6:.0f}M"))
    width = max(len(k) for k, _ in rows)
    loop.view.info("\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows))


def _path_arg(arg: str, usage: str) -> str:
    try:
        parts = shlex.split(arg)
    except ValueError as e:
        raise InvalidRequest(f"{usage}: {e}") from None
    if len(parts) != 1:
        raise InvalidRequest(f"usage: {usage}")
    return parts[0]


def _save(loop: ChatLoop, arg: str) -> None:
    path = _path_arg(arg, "/save FILE")
    ses = loop.session
    ses.conversation.save(path, model=ses.info.path, settings=ses.settings.to_dict())
    loop.view.info(f"saved {len(ses.conversation.messages)} messages to {path}")


def _load(loop: ChatLoop, arg: str) -> None:
    path = _path_arg(arg, "/load FILE")
    conv, _extra = Conversation.load(path)
    ses = loop.session
    ses.conversation = conv
    n = ses.count_tokens()
    loop.view.info(
        f"loaded {len(conv.messages)} messages ({conv.n_turns} turns, {n} tokens) from {path}"
        + (" · system prompt set" if conv.system else "")
    )
    if n >= ses.n_ctx:
        loop.view.error(f"the conversation has {n} tokens, more than the context size ({ses.n_ctx}); /undo some turns")
    elif conv.awaiting_answer:
        loop.view.info("the last message has no answer yet: /retry generates one")


def _retry(loop: ChatLoop, arg: str) -> None:
    if not loop.session.conversation.drop_answer():
        raise InvalidRequest("nothing to retry: send a message first")
    loop.answer()


def _undo(loop: ChatLoop, arg: str) -> None:
    n = loop.session.conversation.undo()
    loop.view.info(f"removed the last exchange ({n} message{'s' if n != 1 else ''})" if n else "nothing to undo")


def _tokens(loop: ChatLoop, arg: str) -> None:
    ses = loop.session
    n = ses.count_tokens()
    pct = 100.0 * n / ses.n_ctx if ses.n_ctx else 0.0
    loop.view.info(f"{n} tokens in the conversation · context {n}/{ses.n_ctx} ({pct:.0f}%) · {max(0, ses.n_ctx - n)} left")


def _multiline(loop: ChatLoop, arg: str) -> None:
    loop.multiline = not loop.multiline
    loop.view.info(
        "multiline input: Enter inserts a newline, Alt+Enter sends" if loop.multiline
        else "single-line input: Enter sends, Alt+Enter inserts a newline"
    )


def _thoughts(loop: ChatLoop, arg: str) -> None:
    """Fold or unfold a reasoning model's thoughts; unfolding shows the last reply's."""
    loop.view.show_thoughts = not loop.view.show_thoughts
    if not loop.view.show_thoughts:
        loop.view.info("thoughts folded: one line per reply (/thoughts unfolds them)")
        return
    last = loop.last_reply.reasoning if loop.last_reply is not None else ""
    loop.view.info("thoughts shown" + (":\n" + last.strip() if last.strip() else " (dimmed, before each reply)"))


def _tools(loop: ChatLoop, arg: str) -> None:
    """List the tools, or change how the loop uses them (on/off, confirm, choice, show)."""
    from llamacli.chat.agent import CHOICES, describe_tools

    agent = loop.agent
    if agent is None:
        raise InvalidRequest("no tools: start llama chat with --tools NAME,...|all or --mcp-servers-config FILE")
    words = arg.split()
    if not words:
        loop.view.info("\n".join(describe_tools(agent)))
        return
    what, value = words[0].lower(), (words[1] if len(words) > 1 else "")
    if what in ("on", "off") and len(words) == 1:
        agent.enabled = what == "on"
        loop.view.info(f"tools {what}")
    elif what == "confirm" and value.lower() in ("on", "off"):
        agent.confirm = value.lower() == "on"
        agent.always.clear()
        loop.view.info("write tools ask first" if agent.confirm else "write tools run without asking")
    elif what == "choice" and value:
        if value not in CHOICES:
            agent.box.find(value)  # a tool's name, or UnknownTool
        agent.choice = value
        loop.view.info(f"the first step of each turn uses tool_choice {value}")
    elif what == "show" and len(words) == 1:
        loop.view.show_tools = not loop.view.show_tools
        loop.view.info("tool results shown" if loop.view.show_tools else "tool results folded: one line per call")
    else:
        raise InvalidRequest("usage: /tools [on|off|confirm on|off|choice auto|required|none|TOOL|show]")


def _attach(loop: ChatLoop, arg: str, kind: str) -> None:
    from llamacli.media import read_media

    path = _path_arg(arg, f"/{kind} FILE")
    loop.session.attach(read_media(path, loop.session.media_limits, kind))
    loop.view.info(f"{kind} attached to your next message ({len(loop.session.pending)} waiting)")


def _image(loop: ChatLoop, arg: str) -> None:
    _attach(loop, arg, "image")


def _audio(loop: ChatLoop, arg: str) -> None:
    _attach(loop, arg, "audio")


def _exit(loop: ChatLoop, arg: str) -> str:
    return EXIT


COMMANDS: tuple[Command, ...] = (
    Command("help", "[COMMAND]", "this list, or one command's help", _help),
    Command("clear", "", "forget the conversation (the system prompt stays)", _clear),
    Command("system", "[TEXT]", "set the system prompt (no TEXT: show it; '-': remove it)", _system),
    Command("set", "[PARAM VALUE]", "change a setting (temp, top_k, n_predict, seed, ...; /help set)", _set),
    Command("show", "", "current settings and model information", _show),
    Command("save", "FILE", "save the conversation as JSON", _save),
    Command("load", "FILE", "load a conversation saved with /save (or a JSON list of messages)", _load),
    Command("retry", "", "generate the last answer again", _retry),
    Command("undo", "", "remove the last question and its answer", _undo),
    Command("tokens", "", "how many tokens the conversation takes of the context", _tokens),
    Command("image", "FILE", "attach an image to your next message (needs -mm/--mmproj)", _image),
    Command("audio", "FILE", "attach an audio file (WAV, MP3, FLAC) to your next message (needs -mm with audio)", _audio),
    Command("multiline", "", "swap Enter and Alt+Enter (send vs newline)", _multiline),
    Command("thoughts", "", "show or fold a reasoning model's thoughts", _thoughts),
    Command("tools", "[on|off|confirm on|off|choice C|show]", "the tools the model may call (--tools), and how", _tools),
    Command("exit", "", "leave (also /quit, Ctrl-D)", _exit),
)
_BY_NAME = {c.name: c for c in COMMANDS}
_ALIASES = {"quit": "exit", "q": "exit", "?": "help", "h": "help"}


def find(name: str) -> Command:
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key in _BY_NAME:
        return _BY_NAME[key]
    prefix = [c for c in COMMANDS if c.name.startswith(key)] if key else []
    if len(prefix) == 1:
        return prefix[0]
    hint = f" (did you mean {', '.join('/' + c.name for c in prefix)}?)" if prefix else " (try /help)"
    raise InvalidRequest(f"unknown command /{name}{hint}")


def dispatch(loop: ChatLoop, line: str) -> str | None:
    """Run the slash command in `line` (which starts with '/')."""
    parts = line[1:].split(None, 1)
    name = parts[0] if parts else ""
    arg = parts[1] if len(parts) > 1 else ""
    return find(name).run(loop, arg)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
