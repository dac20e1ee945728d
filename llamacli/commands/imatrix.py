"""`llama imatrix`: llama.cpp's llama-imatrix (tools/imatrix/imatrix.cpp).

Runs a text through the model in chunks and saves, per weight matrix, the sums of the squared
inputs of each column (the importance matrix `llama quantize --imatrix` reads), as GGUF or
the legacy .dat; `--in-file` adds earlier files (alone: combines them), `--show-statistics`
prints a file's statistics. stdout: the running perplexity (`[1]12.3456,...`) and its final
estimate, as llama-imatrix prints them; progress lines on stderr, with a bar on a terminal.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from llamacli.cli import app, guarded
from llamacli.core.errors import InvalidRequest
from llamacli.options.eval_text import EvalOptions, eval_options
from llamacli.options.model_source import ModelSource, model_options

if TYPE_CHECKING:
    from llamacli.core.quality.imatrix import ImatrixCollector

TOOL = "compute_imatrix"


@app.command()
@guarded
@model_options
@eval_options
def imatrix(
    source: ModelSource,  # -m, -hf, -hff, -hft, --offline (@model_options)
    opts: EvalOptions,  # -f, -p, -c, -b, -ub, --chunks, -t, --numerics (@eval_options)
    output_file: str = typer.Option("imatrix.gguf", "-o", "--output", "--output-file", metavar="FNAME", help="Output file."),
    output_format: str | None = typer.Option(
        None, "--output-format", metavar="{gguf,dat}", help="Output format for the imatrix file (default: gguf)."),
    output_frequency: int = typer.Option(10, "-ofreq", "--output-frequency", metavar="N", help="Save the imatrix every N chunks."),
    save_frequency: int = typer.Option(
        0, "--save-frequency", metavar="N", help="Save a copy FNAME.at_N every N chunks (0: never)."),
    process_output: bool = typer.Option(
        False, "--process-output", help="Collect data for the output tensor (not for an output tied to the embeddings)."),
    ppl: bool = typer.Option(True, "--ppl/--no-ppl", help="Whether to compute perplexity."),
    from_chunk: int = typer.Option(0, "--chunk", "--from-chunk", metavar="N", help="Start processing the input from chunk N."),
    in_file: list[str] = typer.Option(
        [], "--in-file", metavar="FNAME", help="Imatrix file to add (repeatable, or comma-separated); alone: combine them."),
    show_statistics: bool = typer.Option(False, "--show-statistics", help="Show the statistics of one --in-file and exit."),
    parse_special: bool = typer.Option(False, "--parse-special", help="Parse special tokens (chat, tool, etc.) in the text."),
) -> None:
    """Compute an importance matrix for quantization (llama.cpp's llama-imatrix)."""
    from llamacli.core.quality.imatrix import ImatrixCollector, ImatrixOutput
    from llamacli.quality import info

    if output_format not in (None, "gguf", "dat"):
        raise InvalidRequest(f"invalid output format {output_format!r}: gguf or dat")
    if opts.ctx_size <= 0:
        raise InvalidRequest("imatrix tool requires '--ctx-size' > 0")
    if output_frequency <= 0:
        raise InvalidRequest("--output-frequency must be at least 1")
    files = [p.strip() for arg in in_file for p in arg.split(",") if p.strip()]
    out = ImatrixOutput(output_file, output_format or "", output_frequency, save_frequency, opts.file or "")
    col = ImatrixCollector(opts.ctx_size, out, process_output, warn=lambda w: info(f"save_imatrix: {w}"))
    if show_statistics:
        _show_statistics(col, files)
        return
    for f in files:
        info(f"main : loading imatrix from '{f}'")
        col.load(f)
    if opts.file is None and opts.prompt is None:
        info("No prompt provided; combining precomputed matrices only.")
        if not files:
            raise InvalidRequest("No prompt provided and no precomputed matrices (--in-file) to combine.")
        info(f"main : saving {'combined ' if len(files) > 1 else ''}imatrix to '{output_file}'")
        col.save()
        return
    _collect(source, opts, col, ppl, from_chunk, parse_special)


def _show_statistics(col: ImatrixCollector, files: list[str]) -> None:
    from llamacli.core.quality.imatrix_stats import statistics
    from llamacli.quality_report import imatrix_stats_lines

    if len(files) != 1:
        raise InvalidRequest("a single imatrix file is required to compute tensor statistics (--in-file FNAME)")
    col.load(files[0])
    tensors, layers = statistics(col.entries)
    if not tensors:
        raise InvalidRequest(f"cannot compute statistics for {files[0]}")
    print("\n".join(imatrix_stats_lines(files[0], tensors, layers)))


def _collect(source: ModelSource, opts: EvalOptions, col: ImatrixCollector, ppl: bool, from_chunk: int,
             parse_special: bool) -> None:
    from llamacli import quality_report as R
    from llamacli.core.quality.chunks import plan_chunks
    from llamacli.core.quality.imatrix import collect
    from llamacli.core.quality.perplexity import PerplexityResult, Progress
    from llamacli.quality import PassOutput, bos_token, info, open_eval_model, read_text, tokenize

    text = read_text(opts)
    m = open_eval_model(source, opts)
    tokens = tokenize(TOOL, m, text, parse_special)
    n_ctx = opts.ctx_size
    if from_chunk > 0:
        if (from_chunk + 2) * n_ctx >= tokens.shape[0]:
            raise InvalidRequest(f"there will be not enough tokens left after removing {from_chunk} chunks")
        info(f"{TOOL}: removing initial {from_chunk} chunks ({from_chunk * n_ctx} tokens)")
        tokens = tokens[from_chunk * n_ctx :]
    plan = plan_chunks(int(tokens.shape[0]), n_ctx, opts.batch_size, opts.ubatch_size, opts.chunks,
                       "for a context of")
    with PassOutput(TOOL, "computing", "imatrix", False) as out:

        def on_chunk(i: int, res: PerplexityResult) -> None:
            if ppl:
                out.emit(R.chunk_text(i, res))
            out.bar.update(i, f"[{i}] PPL {res.ppl:.4f}" if ppl else f"[{i}]")

        res = collect(m.model, tokens, plan, bos_token(m), col, ppl,
                      Progress(on_start=out.on_start, on_first_group=out.on_first_group, on_chunk=on_chunk))
    out.flush_kept()
    sys.stdout.write("\n" + (R.final_estimate(res) + "\n" if ppl else ""))
    sys.stdout.flush()
    path = col.save()
    info(f"save_imatrix: stored collected data after {col.last_chunk} chunks in {path}")
    out.speed(plan.n_chunk * plan.n_ctx, res.seconds)
