"""What `llama perplexity` and `llama imatrix` share around core/quality: the text as
llama.cpp reads it, the model, the tokens, and a progress bar for the chunks."""

from __future__ import annotations

import sys
import time
from types import TracebackType

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from llamacli.cli import err
from llamacli.core.errors import InvalidRequest
from llamacli.core.quality.chunks import ChunkPlan
from llamacli.loading import OpenedModel, open_model
from llamacli.options.eval_text import EvalOptions
from llamacli.options.model_source import ModelSource


def info(line: str) -> None:
    """An informational line on stderr (llama.cpp's LOG_INF)."""
    err.print(line, markup=False, highlight=False, soft_wrap=True)


def read_text(opts: EvalOptions) -> bytes:
    """The text of -f (its bytes, one trailing newline dropped, as common/arg.cpp) or -p."""
    if opts.file is not None and opts.prompt is not None:
        raise InvalidRequest("give the text with -f or -p, not both")
    if opts.file is not None:
        with open(opts.file, "rb") as f:
            data = f.read()
        return data[:-1] if data.endswith(b"\n") else data
    if opts.prompt is not None:
        return opts.prompt.encode("utf-8")
    raise InvalidRequest("no text: pass -f FILE (or -p TEXT)")


def open_eval_model(source: ModelSource, opts: EvalOptions) -> OpenedModel:
    """The model, without its chat template."""
    return open_model(source.path(), opts.numerics, opts.threads, with_template=False)


def bos_token(m: OpenedModel) -> int | None:
    """The token put first in every chunk: BOS when the vocabulary adds it (llama_vocab_get_add_bos)."""
    v = m.tokenizer.vocab
    return int(v.bos) if v.add_bos and v.bos is not None and v.bos >= 0 else None


def tokenize(tool: str, m: OpenedModel, text: bytes, parse_special: bool = False) -> np.ndarray:
    """common_tokenize(ctx, text, add_special=true, parse_special), with llama.cpp's log lines."""
    info(f"{tool}: tokenizing the input ..")
    t0 = time.perf_counter()
    toks = np.asarray(m.tokenizer.tokenize(text, add_special=True, parse_special=parse_special), dtype=np.int64)
    info(f"{tool}: tokenization took {1e3 * (time.perf_counter() - t0):g} ms")
    return toks


class ChunkBar:
    """A progress bar of chunks (or tasks) on stderr, shown only on a terminal (`active`)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), console=err, transient=True, disable=not err.is_terminal,
            redirect_stdout=False, redirect_stderr=False,
        )
        self.task = self.progress.add_task(label, total=None)
        self.active = err.is_terminal

    def __enter__(self) -> ChunkBar:  # noqa: PYI034
        self.progress.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.__exit__(exc_type, exc, tb)

    def start(self, total: int) -> None:
        """`total` steps (chunks, tasks) to come."""
        self.progress.update(self.task, total=total, completed=0)

    def update(self, done: int, text: str = "") -> None:
        self.progress.update(self.task, completed=done, description=f"{self.label} {text}".rstrip())


class PassOutput:
    """A pass's output: llama.cpp's stderr lines, the progress bar, and its stdout text,
    streamed as it comes when no bar is shown, else (or with --json: never) written at the end."""

    def __init__(self, tool: str, what: str, label: str, as_json: bool) -> None:
        self.tool, self.what = tool, what
        self.bar = ChunkBar(label)
        self.as_json = as_json
        self.kept: list[str] = []
        self.plan: ChunkPlan | None = None

    def __enter__(self) -> PassOutput:  # noqa: PYI034
        self.bar.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.bar.__exit__(exc_type, exc, tb)

    @property
    def streaming(self) -> bool:
        return not self.bar.active and not self.as_json

    def emit(self, text: str) -> None:
        """stdout text (newlines included by the caller)."""
        self.kept.append(text)
        if self.streaming:
            sys.stdout.write(text)
            sys.stdout.flush()

    def on_start(self, plan: ChunkPlan) -> None:
        from llamacli.quality_report import plan_line

        self.plan = plan
        info(plan_line(self.tool, self.what, plan))
        self.bar.start(plan.n_chunk)

    def on_first_group(self, seconds: float) -> None:
        from llamacli.quality_report import eta_line

        assert self.plan is not None
        info(eta_line(self.tool, seconds, self.plan.n_chunk / self.plan.n_seq))

    def flush_kept(self) -> None:
        """What was kept back while the bar was shown (nothing with --json)."""
        if not self.streaming and not self.as_json:
            sys.stdout.write("".join(self.kept))

    def speed(self, n_tokens: int, seconds: float) -> None:
        if seconds > 0:
            info(f"{self.tool}: {n_tokens} tokens in {seconds:.2f} s ({n_tokens / seconds:.2f} tokens per second)")
