"""`llama quantize`: convert a GGUF model to another type, like llama.cpp's llama-quantize."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer

from llamacli.cli import app, err, guarded
from llamacli.help_format import Command

if TYPE_CHECKING:
    from llamacli.core.quantize import QuantizeOptions

USAGE = "INPUT [OUTPUT] TYPE [NTHREADS]"  # llama-quantize's: model-f32.gguf [model-quant.gguf] type [nthreads]


class _QuantizeCommand(Command):
    """llama-quantize's usage line: OUTPUT may be left out (TYPE then comes second)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [self.options_metavar or "", *USAGE.split()]


@app.command(
    cls=_QuantizeCommand,
    epilog="Types: Q4_0, Q4_1, MXFP4_MOE, Q5_0, Q5_1, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S, IQ1_M, TQ1_0, TQ2_0, Q2_K, "
    "Q2_K_S, IQ3_XXS, IQ3_S, IQ3_M, IQ3_XS, Q3_K_S, Q3_K_M (Q3_K), Q3_K_L, IQ4_NL, IQ4_XS, Q4_K_S, Q4_K_M (Q4_K), "
    "Q5_K_S, Q5_K_M (Q5_K), Q6_K, Q8_0, F16, BF16, F32, COPY, any case, or llama.cpp's numeric ids (e.g. 15 = Q4_K_M); "
    "IQ1_*, IQ2_*, IQ3_XXS, IQ3_XS and Q2_K_S need --imatrix; COPY copies every tensor unchanged. Tensor types for the "
    "--*-type options: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, tq1_0, tq2_0, "
    "mxfp4, iq4_nl, iq4_xs, iq3_s, iq3_xxs, iq2_s, iq2_xs, iq2_xxs, iq1_m, iq1_s (iq2_xxs, iq2_xs and iq1_s only "
    "for tensors the importance matrix covers)."
)
@guarded
def quantize(
    input_path: str = typer.Argument(..., metavar="INPUT", help="GGUF model to quantize (F32/F16/BF16, or quantized with --allow-requantize)."),
    output_or_type: str | None = typer.Argument(
        None, metavar="OUTPUT", help="Output GGUF path; left out, the output is INPUT's folder/ggml-model-TYPE.gguf."
    ),
    type_name: str | None = typer.Argument(None, metavar="TYPE", help="Quantization type, e.g. Q4_K_M, Q8_0 (see below); required."),
    nthreads: str | None = typer.Argument(None, metavar="NTHREADS", help="Threads (default: all CPUs)."),
    allow_requantize: bool = typer.Option(
        False, "--allow-requantize", help="Allow requantizing tensors that are already quantized (quality suffers)."
    ),
    leave_output_tensor: bool = typer.Option(
        False, "--leave-output-tensor", help="Leave output.weight un(re)quantized."
    ),
    pure: bool = typer.Option(
        False, "--pure", help="Disable k-quant mixtures: quantize all tensors to the same type."
    ),
    output_tensor_type: str | None = typer.Option(
        None, "--output-tensor-type", metavar="T", help="Tensor type for output.weight."
    ),
    token_embedding_type: str | None = typer.Option(
        None, "--token-embedding-type", metavar="T", help="Tensor type for the token embeddings."
    ),
    imatrix: str | None = typer.Option(
        None, "--imatrix", metavar="FILE",
        help="Importance matrix (from llama imatrix / llama-imatrix, GGUF or .dat) that weights the quantizers.",
    ),
    include_weights: list[str] = typer.Option(
        [], "--include-weights", metavar="NAME",
        help="Use the importance matrix only for tensors whose name contains NAME (repeatable).",
    ),
    exclude_weights: list[str] = typer.Option(
        [], "--exclude-weights", metavar="NAME",
        help="Do not use the importance matrix for tensors whose name contains NAME (repeatable).",
    ),
    tensor_type: list[str] = typer.Option(
        [], "--tensor-type", metavar="REGEX=TYPE",
        help="Quantize tensors whose name matches REGEX to TYPE, e.g. attn_q=q8_0 (repeatable; first match wins).",
    ),
    tensor_type_file: str | None = typer.Option(
        None, "--tensor-type-file", metavar="FILE", help="REGEX=TYPE entries separated by spaces or newlines."
    ),
    prune_layers: str | None = typer.Option(
        None, "--prune-layers", metavar="L0,L1,...", help="Remove these layers (renumbering the rest)."
    ),
    override_kv: list[str] = typer.Option(
        [], "--override-kv", metavar="KEY=TYPE:VALUE",
        help="Set metadata in the output, TYPE int, float, bool or str (repeatable).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Show each tensor's type and the final size without writing anything."
    ),
    keep_split: bool = typer.Option(
        False, "--keep-split",
        help="Write the output in the same parts as the input (OUTPUT-00001-of-0000N.gguf, ...).",
    ),
) -> None:
    """Quantize a GGUF model (llama-quantize's rules, bit-exact ggml quantizers)."""
    from llamacli.core.errors import InvalidRequest
    from llamacli.core.quantize import (
        QuantizeOptions,
        parse_file_type,
        parse_tensor_type,
        try_parse_file_type,
    )
    from llamacli.core.quantize.importance import load_importance
    from llamacli.core.quantize.overrides import (
        parse_kv_override,
        parse_prune_layers,
        parse_tensor_type_override,
        read_tensor_type_file,
    )

    if output_or_type is None:
        raise InvalidRequest(f"missing TYPE (e.g. Q4_K_M); usage: llama quantize {USAGE}")
    ftype = try_parse_file_type(output_or_type)
    if ftype is not None:  # INPUT TYPE [NTHREADS]
        if nthreads is not None:
            raise InvalidRequest(f"unexpected extra argument {nthreads!r}")
        output, threads_arg = None, type_name
    else:  # INPUT OUTPUT TYPE [NTHREADS]
        if type_name is None:
            raise InvalidRequest(f"missing TYPE (e.g. Q4_K_M); usage: llama quantize {USAGE}")
        ftype = parse_file_type(type_name)
        output, threads_arg = output_or_type, nthreads
    if output is None:
        output = os.path.join(os.path.dirname(input_path), f"ggml-model-{ftype.name}" + ("" if keep_split else ".gguf"))
    elif keep_split and output.endswith(".gguf"):  # the parts' prefix
        output = output[: -len(".gguf")]
    try:
        n_threads = int(threads_arg) if threads_arg is not None else 0
    except ValueError:
        raise InvalidRequest(f"invalid NTHREADS {threads_arg!r} (an integer)") from None
    if include_weights and exclude_weights:
        raise InvalidRequest("--include-weights and --exclude-weights cannot be used together")
    types = [parse_tensor_type_override(t) for t in tensor_type]
    if tensor_type_file is not None:
        types += read_tensor_type_file(tensor_type_file)
    overrides = tuple(parse_kv_override(o) for o in override_kv)
    prune = parse_prune_layers(prune_layers) if prune_layers is not None else ()
    importance = None
    if imatrix is not None:
        importance = load_importance(imatrix, tuple(include_weights), tuple(exclude_weights))
        err.print(
            f"loaded {len(importance.weights)} importance matrix entries from {imatrix}"
            + (f" computed on {importance.chunk_count} chunks" if importance.chunk_count > 0 else ""),
            markup=False, highlight=False, soft_wrap=True,
        )
    opts = QuantizeOptions(
        file_type=ftype,
        allow_requantize=allow_requantize,
        pure=pure,
        output_tensor_type=None if output_tensor_type is None else parse_tensor_type(output_tensor_type, "--output-tensor-type"),
        token_embedding_type=None if token_embedding_type is None else parse_tensor_type(token_embedding_type, "--token-embedding-type"),
        leave_output_tensor=leave_output_tensor,
        n_threads=n_threads,
        tensor_types=tuple(types),
        importance=importance,
        kv_overrides=overrides,
        prune_layers=prune,
        dry_run=dry_run,
        keep_split=keep_split,
    )
    _run(input_path, output, opts)


def _run(input_path: str, output: str, opts: QuantizeOptions) -> None:
    """Check and plan, then quantize with a progress bar on stderr (a terminal only), then print
    the summary."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from llamacli.core.quantize import QuantizeJob, TensorPlan

    job = QuantizeJob(input_path, output, opts)
    verb = "calculating the quantization size of" if opts.dry_run else "quantizing"
    target = "" if opts.dry_run else f" to {output}"
    err.print(f"{verb} {input_path}{target} as {opts.file_type.name}", markup=False, highlight=False)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True, disable=not err.is_terminal,
    )
    task = progress.add_task("", total=len(job.plans))

    def on_tensor(i: int, n: int, p: TensorPlan) -> None:
        change = f"{p.src_type.name} -> {p.dst_type.name}" if p.converts else f"{p.src_type.name} (copied)"
        progress.update(task, completed=i, description=f"{p.name:<36} {change}")

    with progress:
        report = job.run(on_tensor)
    mib = 1024.0 * 1024.0
    if report.wrote:
        where = ", ".join(job.part_paths())
        outcome = f"wrote {where} ({report.file_bytes / mib:.2f} MiB) in {report.seconds:.2f} s"
    else:
        for p in report.tensors:
            change = f"{p.src_type.name:>6} -> {p.dst_type.name:<6}" if p.converts else f"{p.src_type.name:>6} (copied)"
            err.print(f"{p.name:<36} {change} {p.dst_nbytes / mib:8.3f} MiB", markup=False, highlight=False)
        outcome = f"dry run: the file would be {report.file_bytes / mib:.2f} MiB; nothing written"
        if any(p.needs_imatrix for p in report.tensors) and job.opts.importance is None:
            outcome += "; the quantization itself will require an importance matrix (--imatrix)"
    bpw_in = report.src_bytes * 8.0 / max(1, report.n_values)
    bpw_out = report.dst_bytes * 8.0 / max(1, report.n_values)
    n_conv = sum(p.converts for p in report.tensors)
    err.print(
        f"model size  = {report.src_bytes / mib:8.2f} MiB ({bpw_in:.2f} BPW)\n"
        f"quant size  = {report.dst_bytes / mib:8.2f} MiB ({bpw_out:.2f} BPW)\n"
        f"{len(report.tensors)} tensors, {n_conv} converted, {len(report.tensors) - n_conv} copied; {outcome}",
        markup=False, highlight=False, soft_wrap=True,
    )
    if report.n_fallback:
        err.print(
            f"{report.n_fallback} of {len(report.tensors)} tensor(s) fell back to another type: "
            "their row length is not a multiple of the type's block size",
            markup=False, highlight=False, soft_wrap=True,
        )
