"""The `llama` command: a typer app that only parses options and dispatches.

Every command turns its options into plain values for core/ and maps engine errors to one
line on stderr and an exit code: 0 ok, 1 usage or request error, 2 model/load error,
130 interrupted.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, Optional, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from llamacli import __version__
from llamacli.core.errors import LlamaError
from llamacli.help_format import App

app = App(
    name="llama",
    help="Chat with, serve and script local GGUF models on a NumPy engine that follows llama.cpp.",
    add_completion=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)

err = Console(stderr=True, highlight=False)
F = TypeVar("F", bound=Callable[..., Any])


def guarded(fn: F) -> F:
    """Run a command body, turning LlamaError/OSError into one clear line and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            stdout_closed()
            raise typer.Exit(0) from None
        except LlamaError as e:
            error_line(str(e))
            raise typer.Exit(e.exit_code) from None
        except OSError as e:
            error_line(f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))
            raise typer.Exit(2 if e.filename else 1) from None

    return wrapper  # type: ignore[return-value]


def stdout_closed() -> None:
    """The reader of stdout went away (`llama complete ... | head -c 5`): end quietly with
    status 0 like other Unix tools. Point stdout at /dev/null so that the interpreter's final
    flush does not complain about the broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _version(value: bool) -> None:
    if value:
        print(f"llama (llamacli) {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Chat with, serve and script local GGUF models."""


def register_all() -> None:
    """Import every command module (each adds its commands to `app`)."""
    from llamacli.commands import register_all as register_commands

    register_commands()
    # help lists commands in registration order, which depends on what was imported first
    app.registered_commands.sort(key=lambda c: c.name or (c.callback.__name__ if c.callback else ""))


def error_line(message: str) -> None:
    """One line on stderr: `error: message` (message printed literally, no markup)."""
    err.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)


def main() -> None:
    """Console-script entry point."""
    register_all()
    try:
        rv = app(standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("interrupted")
        sys.exit(130)
    except BrokenPipeError:
        stdout_closed()
        sys.exit(0)
    except Exception as e:
        # typer's (vendored click's) usage errors: bad option values, unknown options, missing
        # arguments; one line, as every other error (`llama CMD -h` shows the usage)
        message = getattr(e, "format_message", None)
        if message is None or not hasattr(e, "exit_code"):
            raise
        error_line(message())
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)

