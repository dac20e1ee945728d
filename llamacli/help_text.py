"""The `--help` text of every command, rendered at a fixed width for docs/cli.md."""

from __future__ import annotations

import os

from typer.testing import CliRunner

WIDTH = 100


def command_help(args: list[str]) -> str:
    """`llama ARGS --help` as plain text at WIDTH columns."""
    from llamacli.cli import app, register_all

    register_all()
    env = {"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        res = CliRunner().invoke(app, [*args, "--help"], prog_name="llama", terminal_width=WIDTH, color=False)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return "\n".join(line.rstrip() for line in res.output.splitlines()) + "\n"


def render_cli_reference() -> str:
    from llamacli.cli import app, register_all

    register_all()
    names = sorted(c.name or c.callback.__name__ for c in app.registered_commands)  # type: ignore[union-attr]
    parts = [
        "# CLI reference\n",
        "Generated from `--help` by `python scripts/gen_cli_docs.py`; a test keeps it equal.\n",
        "## llama\n",
        "```\n" + command_help([]) + "```\n",
    ]
    for name in names:
        parts.append(f"## llama {name}\n")
        parts.append("```\n" + command_help([name]) + "```\n")
    return "\n".join(parts)
