"""llamacli/options/groups.py: an option declared once (names, panel, check of its value) and
the checks, which run while the command line is parsed."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from llamacli.options import (
    common, endpoints, listen, model_load, model_source, reasoning, router_args, sampling, slots, speculative,
)
from llamacli.options.groups import Opt, at_least, in_panel, in_range, one_of, typer_option

EVERY_GROUP = (common, endpoints, listen, model_load, model_source, reasoning, router_args, sampling, slots, speculative)


def test_checks_say_what_is_allowed() -> None:
    at_least(0)(0)
    at_least(1, -1)(-1)
    in_range(0, 65535)(65535)
    one_of(("ggml", "f32"))("f32")
    for check, value, message in (
        (at_least(0), -5, "must be at least 0, got -5"),
        (at_least(1, -1), 0, "must be -1 or at least 1, got 0"),
        (in_range(0, 65535), 65536, "must be from 0 to 65535, got 65536"),
        (in_range(0, 65535), -1, "must be from 0 to 65535, got -1"),
        (one_of(("ggml", "f32")), "foo", "must be ggml or f32, got 'foo'"),
    ):
        with pytest.raises(ValueError, match=f"^{message}$"):
            check(value)


def test_but_keeps_the_check_and_in_panel_sets_the_panel() -> None:
    o = Opt("n", int, 0, ("-n",), "N.", check=at_least(0))
    b = o.but(default=5, help="Other.")
    assert b.check is o.check and b.names == o.names and (b.default, b.help) == (5, "Other.")
    assert [x.panel for x in in_panel("P", [o, b])] == ["P", "P"] and o.panel is None


def test_a_bad_value_is_refused_while_parsing() -> None:
    """The check runs in the parser: the command's body never sees the value."""
    app = typer.Typer()
    seen: list[int] = []

    @app.command()
    def run(n: int = typer_option(Opt("n", int, 0, ("-n",), "N.", check=at_least(0)))) -> None:
        seen.append(n)

    r = CliRunner().invoke(app, ["-n", "-3"])
    assert r.exit_code != 0 and "must be at least 0, got -3" in r.output and seen == []
    assert CliRunner().invoke(app, ["-n", "3"]).exit_code == 0 and seen == [3]


def test_every_default_passes_its_check() -> None:
    checked = 0
    for group in EVERY_GROUP:
        for o in vars(group).get("OPTIONS", []) + [v for v in vars(group).values() if isinstance(v, Opt)]:
            if o.check is not None and o.default is not None:
                o.check(o.default)
                checked += 1
    assert checked >= 10
