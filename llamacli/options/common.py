"""Options shared by several commands (names follow llama.cpp's tools), and the helpers that
read their values: LoRA adapter lists, prompts and files, the colour switch."""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.kernels import NUMERICS_MODES
from llamacli.options.groups import COMMON, Opt, at_least, one_of, typer_option

# llama.cpp's "common params": the same names, checks and panel on every model command
CTX_SIZE = Opt("ctx_size", int, 0, ("-c", "--ctx-size"), "Context size (0: the model's training context).", panel=COMMON,
               check=at_least(0))
N_PREDICT = Opt("n_predict", int, -1, ("-n", "--predict", "--n-predict"),
                "Tokens to generate (-1: until the end of generation or a full context).", panel=COMMON, check=at_least(-1))
BATCH_SIZE = Opt("batch_size", int, 512, ("-b", "--batch-size"), "Prompt tokens per forward pass.", panel=COMMON,
                 check=at_least(1))
PARALLEL = Opt("parallel", int, -1, ("-np", "--parallel"), "Sequences decoded at once (-1: auto).", panel=COMMON,
               check=at_least(1, -1))
NUMERICS = Opt("numerics", str, "ggml", ("--numerics",),
               "ggml: emulate llama.cpp's CPU roundings; f32: plain float32 maths.", metavar="|".join(NUMERICS_MODES),
               panel=COMMON, check=one_of(NUMERICS_MODES))
BATCH_INVARIANT = Opt("batch_invariant", bool, False, ("--batch-invariant",),
                      "f32 numerics: make each sequence's output independent of what shares its batch (slower). "
                      "The ggml numerics always are.", panel=COMMON)
THREADS = Opt("threads", int, -1, ("-t", "--threads"), "Threads for the matmul kernels (<= 0: every core).", panel=COMMON)
LORA = Opt("lora", list[str], [], ("--lora",), "LoRA adapter GGUF (repeatable, or comma-separated), applied with scale 1.",
           metavar="FNAME", panel=COMMON)
LORA_SCALED = Opt("lora_scaled", list[str], [], ("--lora-scaled",),
                  "LoRA adapter with its scale (repeatable, or comma-separated).", metavar="FNAME:SCALE,...", panel=COMMON)

# the same, as typer parameter defaults for commands that declare them one by one
CtxSizeOpt = typer_option(CTX_SIZE)
NPredictOpt = typer_option(N_PREDICT)
BatchSizeOpt = typer_option(BATCH_SIZE)
NumericsOpt = typer_option(NUMERICS)
BatchInvariantOpt = typer_option(BATCH_INVARIANT)
ThreadsOpt = typer_option(THREADS)
LoraOpt = typer_option(LORA)
LoraScaledOpt = typer_option(LORA_SCALED)


def lora_specs(lora: list[str], lora_scaled: list[str]) -> list[tuple[str, float]]:
    """(path, scale) of every adapter: --lora ones (scale 1), then --lora-scaled ones."""
    out = [(p.strip(), 1.0) for arg in lora for p in arg.split(",") if p.strip()]
    for arg in lora_scaled:
        for item in (x.strip() for x in arg.split(",") if x.strip()):
            path, sep, scale = item.rpartition(":")
            try:
                if not sep or not path:
                    raise ValueError
                out.append((path, float(scale)))
            except ValueError:
                raise typer.BadParameter(f"--lora-scaled {item!r}: the format is FNAME:SCALE") from None
    return out


def read_prompt(prompt: Optional[str], file: Optional[str]) -> str:
    if prompt is not None and file is not None:
        raise typer.BadParameter("give the prompt with -p or -f, not both")
    if file is not None:
        return read_text_file(file, "--file")
    if prompt is not None:
        if not sys.stdin.isatty():
            piped = sys.stdin.read()
            return prompt + piped if piped else prompt
        return prompt
    if not sys.stdin.isatty():
        piped = sys.stdin.read()
        if piped:
            return piped
    raise typer.BadParameter("no prompt: pass -p TEXT, -f FILE or pipe text on stdin")


def read_text_file(path: str, flag: str) -> str:
    """A file given to an option (-f, -sysf, --chat-template-file) as text; bad UTF-8 replaced.
    A file that cannot be read is a usage error (exit 1), as any bad option value."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except OSError as e:
        raise InvalidRequest(f"{flag} {path}: {e.strerror or e}") from None


def want_color(flag: Optional[bool]) -> bool:
    """-co/--color/--no-color: as given, else on for a terminal unless NO_COLOR or TERM=dumb."""
    if flag is not None:
        return flag
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()
