"""How `llama ... --help` reads: the command and group classes every command is built with.

Typer renders the help; these classes set up what it renders, as llama.cpp's tools print it:
- an option's names share one cell, short names first and the negative forms after
  (`-kvu, --kv-unified, -no-kvu, --no-kv-unified`), so that a long list wraps at a comma
  instead of being cut off;
- a flag takes no value, so no type follows it (typer writes `--version <bool>`);
- an option's default ends its help text (`Default: 0.8.`) rather than taking a line of its
  own; a flag pair's default reads `on` or `off`;
- a required argument stands bare in the usage line, an optional one in brackets
  (`INPUT [OUTPUT]`; typer writes `{INPUT}`);
- option panels come in `groups.PANELS`' order (common, sampling, then the command's own),
  whatever order the decorators added the options in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from llamacli.options.groups import PANELS


def _no_flag_type(param: Any) -> None:
    if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
        param.metavar = ""  # typer shows the metavar in place of the type


def _inline_default(param: Any) -> None:
    if not isinstance(param, TyperOption) or param.show_default is not True:
        return
    param.show_default = False
    value = param.default
    if param.is_flag:
        text = ("on" if value else "off") if param.secondary_opts and value is not None else ""
    elif isinstance(value, (list, tuple)):
        text = ", ".join(map(str, value))
    else:
        text = "" if value is None else str(value)
    if text:
        sentence = (param.help or "").rstrip()
        if sentence and not sentence.endswith("."):
            sentence += "."
        param.help = f"{sentence} Default: {text}.".lstrip()


@contextmanager
def _names_in_one_cell(params: list[Any]) -> Iterator[None]:
    """While --help renders: each option's names in one cell (typer reads the cells off
    `opts` and `secondary_opts`; the parser no longer needs them then)."""
    saved = [(p, p.opts, p.secondary_opts) for p in params if isinstance(p, TyperOption)]
    try:
        for p, opts, secondary in saved:
            by_kind = sorted(opts, key=lambda n: n.startswith("--")) + sorted(secondary, key=lambda n: n.startswith("--"))
            p.opts, p.secondary_opts = [", ".join(by_kind)], []
        yield
    finally:
        for p, opts, secondary in saved:
            p.opts, p.secondary_opts = opts, secondary


def _panel_rank(param: Any) -> int:
    """Where an option's panel comes; arguments keep their places (their order is parsed)."""
    panel = getattr(param, "rich_help_panel", None)
    if panel is None or not isinstance(param, TyperOption):
        return -1
    return PANELS.index(panel) if panel in PANELS else len(PANELS)


class _HelpLayout:
    """The rules of the module docstring, for a command and for the group."""

    params: list[Any]

    def _lay_out(self) -> None:
        for p in self.params:
            _no_flag_type(p)
            _inline_default(p)
        self.params.sort(key=_panel_rank)  # stable: declaration order within a panel

    def format_help(self, ctx: Any, formatter: Any) -> None:
        with _names_in_one_cell(self.get_params(ctx)):  # type: ignore[attr-defined]
            super().format_help(ctx, formatter)  # type: ignore[misc]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        _no_flag_type(option)
        return option

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []  # type: ignore[attr-defined]
        for p in self.params:
            if isinstance(p, TyperArgument):
                name = p.display_name_raw + ("..." if p.nargs != 1 else "")
                pieces.append(name if p.required else f"[{name}]")
        return pieces


class Command(_HelpLayout, TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lay_out()


class Group(_HelpLayout, TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lay_out()

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*super().collect_usage_pieces(ctx), self.subcommand_metavar]


class App(typer.Typer):
    """A typer app whose commands are `Command`s (and whose own options follow the same rules)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=Group, **kwargs)

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or Command, **kwargs)
