"""`llama bench`: throughput beside llama.cpp's (llama-bench)."""

from __future__ import annotations


import typer

from llamacli.cli import app, guarded
from llamacli.options.model_source import ModelSource, model_options
from llamacli.options.common import BatchInvariantOpt, NumericsOpt


@app.command()
@guarded
@model_options
def bench(
    source: ModelSource,  # -m, -hf, -hff, -hft, --offline (@model_options)
    n_prompt: int = typer.Option(
        512, "-p", "--n-prompt", help="Prompt tokens of the pp test."
    ),
    n_gen: int = typer.Option(
        128, "-n", "--n-gen", help="Generated tokens of the tg test."
    ),
    parallel: str = typer.Option(
        "1,4,8,16", "--parallel", help="Sequence counts for aggregate decode."
    ),
    reps: int = typer.Option(
        2, "-r", "--repetitions", help="Repetitions of the pp test (best is kept)."
    ),
    reference: bool = typer.Option(
        True,
        "--reference/--no-reference",
        help="Also run llama.cpp (llama-cpp-python) when installed.",
    ),
    numerics: str = NumericsOpt,
    batch_invariant: bool = BatchInvariantOpt,
    flash_attn: str = typer.Option(
        "auto", "-fa", "--flash-attn", help="llama.cpp's flash attention for the reference: auto (its default), on, off."
    ),
    threads: int = typer.Option(
        -1, "-t", "--threads", help="Threads for our kernels and for llama.cpp (default: -1, every core)."
    ),
) -> None:
    """Prompt processing and generation speed, like llama-bench, beside llama.cpp's."""
    from llamacli.benchmark import run_bench

    try:
        seqs = [int(s) for s in parallel.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"--parallel must be a comma-separated list of integers, got {parallel!r}"
        ) from None
    if flash_attn not in ("auto", "on", "off"):
        raise typer.BadParameter("--flash-attn must be auto, on or off")
    model = source.path()
    run_bench(model, n_prompt, n_gen, seqs, reps, reference, numerics, threads, batch_invariant, flash_attn)
