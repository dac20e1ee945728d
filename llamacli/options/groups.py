"""How the commands declare their options: a group of `Opt`s turned into one value.

A group is a list of `Opt` and a function that builds one value (a dataclass, SamplingParams,
...) from the options' values. `option_group` makes a decorator of it: the command takes one
parameter of that value's type, and the decorator shows the group's options in that
parameter's place in --help and calls the command with the built value.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import typer


@dataclass(frozen=True)
class Opt:
    """One option: the field it fills (or a special name its group's build reads), its type,
    default, CLI names and help."""

    field: str
    type: Any
    default: Any
    names: tuple[str, ...]
    help: str
    metavar: str | None = None
    envvar: str | None = None


def typer_option(o: Opt, panel: str | None = None) -> Any:
    """The option as typer declares it (a parameter default)."""
    return typer.Option(o.default, *o.names, help=o.help, rich_help_panel=panel, metavar=o.metavar, envvar=o.envvar)


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


def option_group(param: str, options: list[Opt], build_value: Callable[[dict[str, Any]], Any], panel: str | None,
                 in_place: bool = False, prefixed: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: replace fn's `param` parameter with `options` (shown in `panel` of --help, or
    among the plain options for None; at the end of the list, or where `param` was when
    in_place) and call fn with build_value({field: value}) in its place. The options' parameter
    names (what click reports) are `param`_field, or the fields themselves when not prefixed."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        names = list(sig.parameters)
        at = names.index(param) if in_place else len(names) - 1
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if in_place else inspect.Parameter.KEYWORD_ONLY
        pname = {o.field: f"{param}_{o.field}" if prefixed else o.field for o in options}
        new = [inspect.Parameter(pname[o.field], kind, annotation=o.type, default=typer_option(o, panel)) for o in options]
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
