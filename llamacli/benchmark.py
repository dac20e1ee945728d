"""`llama bench`: our throughput beside llama.cpp's, measured in the same run."""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table

from llamacli import bench_reference
from llamacli.core.model import bench as B
from llamacli.core.model.bench import BenchResult
from llamacli.core.model.load import load_model, rss_bytes, rss_file_bytes
from llamacli.options.model_path import resolve_model
from llamacli.loading import prepare_kernels, weight_types
from llamacli.recent_models import remember


def memory_line(file_bytes: int, copied_bytes: int, rss_bytes: int, rss_file_bytes: int = 0, packed_bytes: int = 0,
                cached_bytes: int = 0) -> str:
    """What the weights take: the file is mapped (its pages are read as they are used and
    shared with the page cache); the ggml numerics pack some matrices for the kernels (a copy
    in memory, the file's pages of them handed back); numerics other than ggml hold float32
    copies. Resident: the process's memory in RAM after loading (the mapped pages touched so
    far included), and where known how much of it is file-backed (the rest is the process's
    own memory). A model with experts maps its packed matrices from a cache file instead
    (core/model/weights/pack_cache.py): file-backed pages too."""
    mib = 2**20
    weights = f"weights mapped from the file {file_bytes / mib:.0f} MiB"
    copies = round(copied_bytes / mib)  # the norms' small vectors are copied in every mode
    if copies:
        weights += f" + float32 copies {copies} MiB"
    elif packed_bytes:
        weights += f" ({packed_bytes / mib:.0f} MiB of it packed for the kernels, the rest used in place)"
    elif cached_bytes:
        weights += f" ({cached_bytes / mib:.0f} MiB of it packed for the kernels in a mapped cache file, the rest used in place)"
    else:
        weights += " (used in place, not copied)"
    line = f"{weights}, process resident {rss_bytes / mib:.0f} MiB"
    return line + (f" ({rss_file_bytes / mib:.0f} MiB file-backed)" if rss_file_bytes else "")


def run_bench(
    model_path: str | None, n_prompt: int, n_gen: int, seqs: list[int], reps: int, reference: bool, numerics: str, threads: int,
    batch_invariant: bool = False,
    flash_attn: str = "auto",
) -> None:
    console = Console()
    path = resolve_model(model_path)
    if threads <= 0:
        threads = os.cpu_count() or 1
    model, gguf, stats = load_model(path, numerics=numerics, threads=threads, batch_invariant=batch_invariant)
    if model_path:
        remember(path)  # for `llama list`
    prepare_kernels(numerics, weight_types(gguf), model)
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    console.print(
        f"model {os.path.basename(path)} ({model.args.arch}), numerics {numerics}"
        f"{', batch-invariant' if batch_invariant else ''}: loaded in {stats.seconds:.2f} s; "
        f"{memory_line(gguf.file_size, stats.weight_bytes, stats.rss_bytes, stats.rss_file_bytes, stats.packed_bytes, stats.pack_cache.nbytes)}; "
        f"load average {load1:.2f}, {os.cpu_count()} cpus",
        markup=False, highlight=False,
    )
    ours: list[BenchResult] = [B.bench_pp(model, n_prompt, reps), B.bench_tg(model, n_gen)]
    ours += [B.bench_parallel(model, n) for n in seqs]
    console.print(f"after our runs: process resident {rss_bytes() / 2**20:.0f} MiB ({rss_file_bytes() / 2**20:.0f} MiB "
                  "file-backed: the mapped pages read so far)", markup=False, highlight=False)
    ref: list[BenchResult | None] = [None] * len(ours)
    if reference and bench_reference.available():
        # in a child process: a crash of llama-cpp-python costs only its column
        run = bench_reference.run_in_child(path, n_prompt, n_gen, seqs, reps, threads, flash_attn)
        if run.results is not None:
            ref = list(run.results)
            if run.rss_bytes:
                mib = 2**20
                console.print(f"llama.cpp after loading: process resident {run.rss_bytes / mib:.0f} MiB "
                              f"({run.rss_file_bytes / mib:.0f} MiB file-backed)", markup=False, highlight=False)
        else:
            console.print(f"[dim]{run.missing_reason}: llama.cpp's figures are missing[/]")
    elif reference:
        console.print("[dim]llama-cpp-python is not installed: llama.cpp's figures are skipped[/]")
    table = Table(title="tokens/s")
    table.add_column("test")
    table.add_column("llamacli", justify="right")
    table.add_column(f"llama.cpp (fa {flash_attn})", justify="right")
    table.add_column("ratio", justify="right")
    for o, r in zip(ours, ref):
        rt = f"{r.tokens_per_second:.1f}" if r else "-"
        ratio = f"{o.tokens_per_second / r.tokens_per_second:.2f}x" if r and r.tokens_per_second else "-"
        table.add_row(o.test, f"{o.tokens_per_second:.1f}", rt, ratio)
    console.print(table)
