"""The `llama` command: a typer app that only parses options and dispatches.

Every command turns its options into plain values for core/ and maps engine errors to one
line on stderr and an exit code: 0 ok, 1 usage or request error, 2 model/load error,
130 interrupted.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, Optional, TypeVar

import typer
from rich.console import Console

from llamacli import __version__
from llamacli.core.errors import LlamaError

app = typer.Typer(
    name="llama",
    help="Chat with, serve and script local GGUF models (a NumPy engine, token-exact with llama.cpp).",
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
        except LlamaError as e:
            err.print(f"[bold red]error:[/] {e}", markup=True, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except OSError as e:
            err.print(f"[bold red]error:[/] {e.strerror or e}: {e.filename or ''}".rstrip(": "), soft_wrap=True)
            raise typer.Exit(2 if e.filename else 1) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        print(f"llama (llamacli) {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Chat with, serve and script local GGUF models."""


ModelOpt = typer.Option(None, "-m", "--model", help="GGUF model file (default: the demo model, Gemma 3 270M, if installed).")
NumericsOpt = typer.Option(
    "ggml", "--numerics", help="ggml: emulate llama.cpp's CPU roundings (token-exact); f32: plain float32 maths."
)
ThreadsOpt = typer.Option(2, "-t", "--threads", help="Threads used to dequantize weights at load.")


def _read_prompt(prompt: Optional[str], file: Optional[str]) -> str:
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


@app.command()
@guarded
def complete(
    model: Optional[str] = ModelOpt,
    prompt: Optional[str] = typer.Option(None, "-p", "--prompt", help="Prompt text (also read from stdin when piped)."),
    file: Optional[str] = typer.Option(None, "-f", "--file", help="Read the prompt from a file."),
    n_predict: int = typer.Option(-1, "-n", "--n-predict", help="Tokens to generate (-1: until end of text or context)."),
    ctx_size: int = typer.Option(4096, "-c", "--ctx-size", help="Context size (0: the model's training context)."),
    batch_size: int = typer.Option(512, "-b", "--batch-size", help="Prompt tokens per forward pass."),
    temp: float = typer.Option(0.8, "--temp", help="Temperature; 0 = greedy."),
    top_k: int = typer.Option(40, "--top-k", help="Top-k sampling (0 = off)."),
    top_p: float = typer.Option(0.95, "--top-p", help="Top-p sampling (1.0 = off)."),
    min_p: float = typer.Option(0.05, "--min-p", help="Min-p sampling (0.0 = off)."),
    seed: int = typer.Option(-1, "-s", "--seed", help="RNG seed (-1: random)."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Keep generating past end-of-text tokens."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: prompt_tokens, tokens, content, timings."),
    numerics: str = NumericsOpt,
    threads: int = ThreadsOpt,
) -> None:
    """Continue a raw prompt (no chat template), like llama.cpp's llama-completion."""
    from llamacli.core.generate import generate
    from llamacli.core.sampling import DEFAULT_SEED, Sampler, SamplingParams
    from llamacli.runtime import open_model

    text = _read_prompt(prompt, file)
    rt = open_model(model, numerics=numerics, threads=threads)
    n_ctx = ctx_size if ctx_size > 0 else rt.model.args.n_ctx_train
    toks = rt.tokenizer.tokenize(text, add_special=True, parse_special=True)
    sampler = Sampler(
        SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=DEFAULT_SEED if seed < 0 else seed)
    )

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    res = generate(
        rt.model, rt.tokenizer, toks, sampler, n_predict=n_predict, n_ctx=n_ctx, n_batch=batch_size,
        ignore_eos=ignore_eos, on_text=None if as_json else stream,
    )
    if as_json:
        obj = {
            "prompt_tokens": res.prompt_tokens,
            "tokens": res.tokens,
            "content": res.content,
            "stop_type": res.stop_type,
            "seed": sampler.seed,
            "timings": res.timings.to_dict(),
        }
        print(json.dumps(obj, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        t = res.timings.to_dict()
        err.print(
            f"[dim]prompt {res.timings.prompt_n} tok, {t['prompt_per_second']:.1f} tok/s | "
            f"generated {res.timings.predicted_n} tok, {t['predicted_per_second']:.1f} tok/s[/]"
        )


@app.command()
@guarded
def bench(
    model: Optional[str] = ModelOpt,
    n_prompt: int = typer.Option(512, "-p", "--n-prompt", help="Prompt tokens of the pp test."),
    n_gen: int = typer.Option(128, "-n", "--n-gen", help="Generated tokens of the tg test."),
    parallel: str = typer.Option("1,4,8,16", "--parallel", help="Sequence counts for aggregate decode."),
    reps: int = typer.Option(2, "-r", "--repetitions", help="Repetitions of the pp test (best is kept)."),
    reference: bool = typer.Option(True, "--reference/--no-reference", help="Also run llama.cpp (llama-cpp-python) when installed."),
    numerics: str = NumericsOpt,
    threads: int = typer.Option(2, "-t", "--threads", help="Threads for llama.cpp and for loading."),
) -> None:
    """Prompt processing and generation speed, like llama-bench, beside llama.cpp's."""
    from llamacli.benchmark import run_bench

    try:
        seqs = [int(s) for s in parallel.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"--parallel must be a comma-separated list of integers, got {parallel!r}") from None
    run_bench(model, n_prompt, n_gen, seqs, reps, reference, numerics, threads)


def main() -> None:
    """Console-script entry point."""
    try:
        rv = app(standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("interrupted")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:
        # typer's (vendored click's) usage errors: bad option values, missing arguments
        show = getattr(e, "show", None)
        if show is None or not hasattr(e, "exit_code"):
            raise
        show()
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)
