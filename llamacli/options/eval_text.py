"""The options `llama perplexity` and `llama imatrix` share (llama.cpp's names and defaults for
these tools): the text, how it is cut into chunks and batched, the threads and numerics.
One group, built into `EvalOptions` by `@eval_options`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from llamacli.options.common import NUMERICS, THREADS
from llamacli.options.groups import Opt, option_group


@dataclass(frozen=True)
class EvalOptions:
    file: str | None  # -f
    prompt: str | None  # -p
    ctx_size: int  # -c: tokens per chunk
    batch_size: int  # -b
    ubatch_size: int  # -ub
    chunks: int  # --chunks (-1: all)
    threads: int
    numerics: str


OPTIONS: list[Opt] = [
    Opt("file", Optional[str], None, ("-f", "--file"), "The text to evaluate (one trailing newline is dropped, as llama.cpp).",
        metavar="FNAME"),
    Opt("prompt", Optional[str], None, ("-p", "--prompt"), "The text itself, instead of -f.", metavar="TEXT"),
    Opt("ctx_size", int, 512, ("-c", "--ctx-size"), "Tokens per chunk.", metavar="N"),
    Opt("batch_size", int, 2048, ("-b", "--batch-size"),
        "Logical batch size: max(1, N / ctx-size) chunks are evaluated side by side.", metavar="N"),
    Opt("ubatch_size", int, 512, ("-ub", "--ubatch-size"), "Physical batch size: tokens per forward pass.",
        metavar="N"),
    Opt("chunks", int, -1, ("--chunks",), "Max number of chunks to process (-1: all).", metavar="N"),
    THREADS,
    NUMERICS,
]


def _build(values: dict[str, Any]) -> EvalOptions:
    return EvalOptions(**values)


eval_options = option_group("opts", OPTIONS, _build, in_place=True)
