"""Options and helpers shared by several commands (names follow llama.cpp's tools)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

NumericsOpt = typer.Option(
    "ggml",
    "--numerics",
    help="ggml: emulate llama.cpp's CPU roundings (default); f32: plain float32 maths.",
)
BatchInvariantOpt = typer.Option(
    False,
    "--batch-invariant",
    help="f32 numerics: make each sequence's output independent of what shares its batch (slower). The ggml numerics always are.",
)
ThreadsOpt = typer.Option(
    -1, "-t", "--threads", help="Threads for the matmul kernels (default: -1, every core)."
)
LoraOpt = typer.Option(
    [], "--lora", metavar="FNAME", help="LoRA adapter GGUF (repeatable, or comma-separated), applied with scale 1."
)
LoraScaledOpt = typer.Option(
    [], "--lora-scaled", metavar="FNAME:SCALE,...", help="LoRA adapter with its scale (repeatable, or comma-separated)."
)


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
        with open(file, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
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
