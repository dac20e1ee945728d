"""How the commands declare their options: a group of `Opt`s turned into one value.

A group is a list of `Opt` and a function that builds one value (a dataclass, SamplingParams,
...) from the options' values. `option_group` makes a decorator of it: the command takes one
parameter of that value's type, and the decorator shows the group's options in that
parameter's place in --help and calls the command with the built value.

An `Opt` carries everything that is the same wherever the option appears: its names, its
--help panel, and the check of its value, run while the command line is parsed (a bad value
is a usage error before anything loads). A command that gives it another default or help
says so with `Opt.but`; the check stays.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import typer

from llamacli.core.errors import LlamaError

# The --help panels, in the order --help shows them (after the command's plain Options), as
# llama.cpp's help groups its options: common params, sampling params, then the tool's own.
COMMON = "Common"
SAMPLING = "Sampling"
SPECULATIVE = "Speculative decoding"
TEMPLATE = "Chat template and reasoning"
SCRIPTING = "Scripting (stdin not a terminal)"
SERVER = "Server"
SLOTS = "Slots"
ENDPOINTS = "Endpoints"
TOOLS = "Tools"
LIMITS = "Request limits"
ROUTER = "Router mode"
RAY = "Ray Serve"
PANELS = (COMMON, SAMPLING, SPECULATIVE, TEMPLATE, SCRIPTING, SERVER, SLOTS, ENDPOINTS, TOOLS, LIMITS, ROUTER, RAY)


@dataclass(frozen=True)
class Opt:
    """One option: the field it fills (or a special name its group's build reads), its type,
    default, CLI names, help, --help panel and the check of a given value."""

    field: str
    type: Any
    default: Any
    names: tuple[str, ...]
    help: str
    metavar: str | None = None
    envvar: str | None = None
    panel: str | None = None  # None: among the command's plain Options
    check: Callable[[Any], None] | None = None  # raises ValueError("must be ...") or a LlamaError for a bad value

    def but(self, **changes: Any) -> Opt:
        """This option with some fields changed (a command's own default or help)."""
        return dataclasses.replace(self, **changes)


def in_panel(panel: str, options: list[Opt]) -> list[Opt]:
    """The options, shown in `panel` of --help."""
    return [o.but(panel=panel) for o in options]


def typer_option(o: Opt) -> Any:
    """The option as typer declares it (a parameter default): its check runs while parsing."""
    callback = None if o.check is None else _parse_check(o.check)
    return typer.Option(o.default, *o.names, help=o.help, rich_help_panel=o.panel, metavar=o.metavar, envvar=o.envvar,
                        callback=callback)


def _parse_check(check: Callable[[Any], None]) -> Callable[[Any], Any]:
    def callback(value: Any) -> Any:
        if value is not None:
            try:
                check(value)
            except (ValueError, LlamaError) as e:
                raise typer.BadParameter(str(e)) from None
        return value

    return callback


def at_least(low: float, *special: float) -> Callable[[Any], None]:
    """A check: the value is `low` or more, or one of the `special` values (-1: auto, ...)."""

    def check(value: float) -> None:
        if value < low and value not in special:
            allowed = " or ".join([*(str(s) for s in special), f"at least {low}"])
            raise ValueError(f"must be {allowed}, got {value}")

    return check


def in_range(low: float, high: float) -> Callable[[Any], None]:
    """A check: low <= value <= high."""

    def check(value: float) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be from {low} to {high}, got {value}")

    return check


def one_of(choices: Iterable[str]) -> Callable[[Any], None]:
    """A check: the value is one of `choices`."""
    names = tuple(choices)

    def check(value: str) -> None:
        if value not in names:
            raise ValueError(f"must be {' or '.join(names)}, got {value!r}")

    return check


def find(options: Iterable[Opt], field: str) -> Opt:
    """The option of `options` that fills `field`."""
    return next(o for o in options if o.field == field)


def in_order(order: Iterable[str], *groups: list[Opt]) -> list[Opt]:
    """The groups' options in the order of `order` (their fields), which must name each exactly
    once: how several groups lay out their options in one --help."""
    by_field = {o.field: o for g in groups for o in g}
    names = list(order)
    if sorted(names) != sorted(by_field) or len(by_field) != sum(len(g) for g in groups):
        raise ValueError(f"the order must name every option once: {sorted(set(names) ^ set(by_field))}")
    return [by_field[n] for n in names]


def values_of(values: dict[str, Any], options: list[Opt]) -> dict[str, Any]:
    """The values (keyed by field) of one group's options."""
    return {o.field: values[o.field] for o in options}


def option_group(param: str, options: list[Opt], build_value: Callable[[dict[str, Any]], Any],
                 in_place: bool = False, prefixed: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: replace fn's `param` parameter with `options` (at the end of the list, or
    where `param` was when in_place) and call fn with build_value({field: value}) in its place.
    The options' parameter names (what click reports) are `param`_field, or the fields
    themselves when not prefixed."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        names = list(sig.parameters)
        at = names.index(param) if in_place else len(names) - 1
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if in_place else inspect.Parameter.KEYWORD_ONLY
        pname = {o.field: f"{param}_{o.field}" if prefixed else o.field for o in options}
        new = [inspect.Parameter(pname[o.field], kind, annotation=o.type, default=typer_option(o)) for o in options]
        rest = [p for p in sig.parameters.values() if p.name != param]
        params = rest[:at] + new + rest[at:]
        hints = {p.name: p.annotation for p in params}

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {o.field: kwargs.pop(pname[o.field]) for o in options}
            return fn(*args, **{param: build_value(values)}, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = hints
        return wrapper

    return deco
