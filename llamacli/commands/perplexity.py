"""`llama perplexity`: llama.cpp's llama-perplexity (tools/perplexity/perplexity.cpp).

stdout carries the results as llama-perplexity prints them: the running PPL after each chunk
(`[1]12.3456,[2]...`) and `Final estimate: PPL = X +/- Y`; with --kl-divergence the table of
per-chunk figures and the statistics. llama.cpp's progress lines go to stderr, with a
progress bar when stderr is a terminal (the chunk list then comes at the end). `--json`: one
JSON object on stdout instead of the text.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import typer

from llamacli.cli import app, guarded
from llamacli.core.errors import InvalidRequest
from llamacli.options.eval_text import EvalOptions, eval_options
from llamacli.options.model_source import ModelSource, model_options

if TYPE_CHECKING:
    import numpy as np

    from llamacli.core.quality.kld_file import LogitsFile
    from llamacli.loading import OpenedModel

TOOL = "perplexity"


@app.command()
@guarded
@model_options
@eval_options
def perplexity(
    source: ModelSource,  # -m, -hf, -hff, -hft, --offline (@model_options)
    opts: EvalOptions,  # -f, -p, -c, -b, -ub, --chunks, -t, --numerics (@eval_options)
    ppl_stride: int = typer.Option(0, "--ppl-stride", metavar="N", help="Stride for perplexity calculation (0: none, chunks)."),
    ppl_output_type: int = typer.Option(0, "--ppl-output-type", metavar="<0|1>", help="Output type for perplexity calculation: 0 `[i]ppl,` per chunk, 1 one line per chunk."),
    kl_divergence_base: str | None = typer.Option(
        None, "--kl-divergence-base", "--save-all-logits", metavar="FNAME",
        help="Logits file: written by a perplexity run, read by --kl-divergence (llama.cpp's format)."),
    kl_divergence: bool = typer.Option(
        False, "--kl-divergence", help="Compute the KL divergence to the logits of --kl-divergence-base (the text is the file's)."),
    hellaswag: bool = typer.Option(False, "--hellaswag", help="Compute the HellaSwag score over random tasks of the -f file."),
    hellaswag_tasks: int = typer.Option(400, "--hellaswag-tasks", metavar="N", help="Number of tasks for the HellaSwag score."),
    winogrande: bool = typer.Option(False, "--winogrande", help="Compute the Winogrande score over the tasks of the -f file."),
    winogrande_tasks: int = typer.Option(
        0, "--winogrande-tasks", metavar="N", help="Number of random tasks for the Winogrande score (0: all)."),
    multiple_choice: bool = typer.Option(
        False, "--multiple-choice", help="Compute the multiple-choice score over the tasks of the -bf (or -f) file."),
    multiple_choice_tasks: int = typer.Option(
        0, "--multiple-choice-tasks", metavar="N", help="Number of random tasks for the multiple-choice score (0: all)."),
    binary_file: str | None = typer.Option(
        None, "-bf", "--binary-file", metavar="FNAME", help="A binary file as the text, read as it is (--multiple-choice)."),
    parallel: int = typer.Option(
        1, "-np", "--parallel", metavar="N", help="Sequences per batch of the benchmarks (at least 4: one per choice)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object with the results instead of llama.cpp's text."),
) -> None:
    """Perplexity of a model on a text, and KL divergence against a base model's logits."""
    from llamacli.quality import bos_token, open_eval_model, read_text, tokenize

    if ppl_output_type not in (0, 1):
        raise InvalidRequest(f"--ppl-output-type must be 0 or 1, got {ppl_output_type}")
    if kl_divergence and not kl_divergence_base:
        raise InvalidRequest("--kl-divergence: you must provide a name of a file containing the log probabilities "
                             "of the base model (--kl-divergence-base FNAME)")
    if ppl_stride and kl_divergence_base:
        raise InvalidRequest("--ppl-stride cannot be combined with --kl-divergence-base")
    if opts.ctx_size <= 0:
        raise InvalidRequest("perplexity tool requires '--ctx-size' > 0")
    if kl_divergence:
        assert kl_divergence_base is not None
        from llamacli.core.quality.kld_file import LogitsFile

        base = LogitsFile.open(kl_divergence_base)
        m = open_eval_model(source, opts)
        _kld(m, bos_token(m), base, opts, as_json)
        return
    bench = [k for k, on in (("hellaswag", hellaswag), ("winogrande", winogrande), ("multiple-choice", multiple_choice)) if on]
    if len(bench) > 1:
        raise InvalidRequest("choose one of --hellaswag, --winogrande and --multiple-choice")
    if binary_file is not None and opts.file is not None:
        raise InvalidRequest("give the text with -f or -bf, not both")
    if binary_file is not None:
        with open(binary_file, "rb") as f:
            text = f.read()
    else:
        text = read_text(opts)
    m = open_eval_model(source, opts)
    if bench:
        n_tasks = {"hellaswag": hellaswag_tasks, "winogrande": winogrande_tasks,
                   "multiple-choice": multiple_choice_tasks}[bench[0]]
        _benchmark(m, bench[0], text, n_tasks, opts, parallel, as_json)
        return
    tokens = tokenize(TOOL, m, text)
    _perplexity(m, bos_token(m), tokens, opts, ppl_stride, ppl_output_type, kl_divergence_base, as_json)


def _perplexity(m: OpenedModel, bos: int | None, tokens: np.ndarray, opts: EvalOptions, stride: int,
                output_type: int, base_path: str | None, as_json: bool) -> None:
    from llamacli import quality_report as R
    from llamacli.core.quality.chunks import plan_chunks
    from llamacli.core.quality.perplexity import PerplexityResult, Progress, perplexity, perplexity_strided
    from llamacli.quality import PassOutput, info

    what = "computing" if stride else "calculating perplexity"
    with PassOutput("perplexity_v2" if stride else TOOL, what, "perplexity", as_json) as out:

        def on_chunk(i: int, res: PerplexityResult) -> None:
            out.emit(R.chunk_text(i, res, output_type, stride))
            out.bar.update(i, f"[{i}] PPL {res.ppl:.4f}")

        progress = Progress(on_start=out.on_start, on_first_group=out.on_first_group, on_chunk=on_chunk)
        if stride:
            res = perplexity_strided(m.model, tokens, opts.ctx_size, opts.batch_size, opts.ubatch_size, stride,
                                     opts.chunks, progress)
        else:
            plan = plan_chunks(int(tokens.shape[0]), opts.ctx_size, opts.batch_size, opts.ubatch_size, opts.chunks)
            if base_path:
                info(f"perplexity: saving all logits to {base_path}")
            res = perplexity(m.model, tokens, plan, bos, progress, base_path)
    if as_json:
        print(json.dumps(R.perplexity_json(res, m.info.path, stride)))
        return
    out.flush_kept()
    sys.stdout.write("\n" if stride else "\n" + R.final_estimate(res) + "\n")
    sys.stdout.flush()
    out.speed(res.plan.n_chunk * res.plan.n_ctx, res.seconds)


def _kld(m: OpenedModel, bos: int | None, base: LogitsFile, opts: EvalOptions, as_json: bool) -> None:
    from llamacli import quality_report as R
    from llamacli.core.quality.kld import KldStatus
    from llamacli.core.quality.perplexity import Progress, kl_divergence
    from llamacli.quality import PassOutput

    with PassOutput("kl_divergence", "computing", "kl-divergence", as_json) as out:

        def on_first(seconds: float) -> None:
            out.on_first_group(seconds)
            out.emit("\n" + R.KLD_HEADER + "\n")

        def on_status(s: KldStatus) -> None:
            out.emit(R.kld_status_line(s) + "\n")
            out.bar.update(s.chunk, f"[{s.chunk}] KLD {s.kld.value:.5f}")

        res = kl_divergence(m.model, base, opts.batch_size, opts.ubatch_size, bos,
                            Progress(on_start=out.on_start, on_first_group=on_first, on_status=on_status))
    summary = res.summary
    if as_json:
        print(json.dumps(R.kld_json(res.statuses, summary, m.info.path, base.path, res)))
        return
    out.flush_kept()
    print()
    if summary is not None:
        print("\n".join(R.kld_summary_lines(summary)))
    sys.stdout.flush()
    out.speed(res.plan.n_chunk * res.plan.n_ctx, res.seconds)


def _benchmark(m: OpenedModel, kind: str, data: bytes, n_tasks: int, opts: EvalOptions, parallel: int,
               as_json: bool) -> None:
    """HellaSwag, Winogrande or multiple choice (ChoiceRunner.for_benchmark: llama-perplexity's context)."""
    from llamacli import quality_report as R
    from llamacli.core.quality import choices as C
    from llamacli.core.quality import task_files as F
    from llamacli.quality import PassOutput, info

    runner = C.ChoiceRunner.for_benchmark(m.model, kind, opts.ctx_size, opts.batch_size, parallel)

    def tok(text: str) -> list[int]:
        return m.tokenizer.tokenize(text, add_special=True, parse_special=False)

    fn = kind.replace("-", "_") + "_score"
    warn: list[str] = []
    if kind == "hellaswag":
        hs = F.read_hellaswag(data, n_tasks)
        info(f"{fn} : selecting {len(hs)} randomized tasks.")
        n_all, n_answers, scores = len(hs), 4 * len(hs), C.hellaswag(runner, hs, tok)
    elif kind == "winogrande":
        wg = F.read_winogrande(data, n_tasks, warn)
        for w in warn:
            info(f"load_winogrande_from_csv: {w}")
        if not wg:
            raise InvalidRequest("winogrande: no tasks")
        n_all, n_answers, scores = len(wg), 2 * len(wg), C.winogrande(runner, wg, tok)
    else:
        mc, _ = F.read_multiple_choice(data, n_tasks)
        n_all, n_answers, scores = len(mc), sum(len(q.answers) for q in mc), C.multiple_choice(runner, mc, tok)
    info(f"{fn} : calculating the score over {n_all} tasks.")
    done: list[C.TaskScore] = []
    with PassOutput(fn, "", kind, as_json) as out:
        out.bar.start(n_all)
        out.emit(R.BENCH_HEADERS[kind])
        for s in scores:
            done.append(s)
            out.emit(R.task_line(kind, s))
            out.bar.update(s.done, f"{100.0 * s.accuracy:.2f}%")
    if as_json:
        print(json.dumps(R.bench_json(kind, done, m.info.path, n_answers)))
        return
    out.flush_kept()
    sys.stdout.write(R.bench_final(kind, done[-1] if done else None, n_answers))
    sys.stdout.flush()
