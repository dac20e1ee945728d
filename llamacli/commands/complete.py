"""`llama complete`: raw continuation of a prompt (llama.cpp's llama-completion)."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from llamacli.cli import app, err, guarded
from llamacli.options import ModelOpt, NumericsOpt, ThreadsOpt, read_prompt


@app.command()
@guarded
def complete(
    model: Optional[str] = ModelOpt,
    prompt: Optional[str] = typer.Option(
        None, "-p", "--prompt", help="Prompt text (also read from stdin when piped)."
    ),
    file: Optional[str] = typer.Option(
        None, "-f", "--file", help="Read the prompt from a file."
    ),
    n_predict: int = typer.Option(
        -1,
        "-n",
        "--n-predict",
        help="Tokens to generate (-1: until end of text or context).",
    ),
    ctx_size: int = typer.Option(
        4096, "-c", "--ctx-size", help="Context size (0: the model's training context)."
    ),
    batch_size: int = typer.Option(
        512, "-b", "--batch-size", help="Prompt tokens per forward pass."
    ),
    temp: float = typer.Option(0.8, "--temp", help="Temperature; 0 = greedy."),
    top_k: int = typer.Option(40, "--top-k", help="Top-k sampling (0 = off)."),
    top_p: float = typer.Option(0.95, "--top-p", help="Top-p sampling (1.0 = off)."),
    min_p: float = typer.Option(0.05, "--min-p", help="Min-p sampling (0.0 = off)."),
    seed: int = typer.Option(-1, "-s", "--seed", help="RNG seed (-1: random)."),
    ignore_eos: bool = typer.Option(
        False, "--ignore-eos", help="Keep generating past end-of-text tokens."
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object: prompt_tokens, tokens, content, timings.",
    ),
    numerics: str = NumericsOpt,
    threads: int = ThreadsOpt,
) -> None:
    """Continue a raw prompt (no chat template), like llama.cpp's llama-completion."""
    from llamacli.core.generate import generate
    from llamacli.core.sampling import DEFAULT_SEED, Sampler, SamplingParams
    from llamacli.runtime import open_model

    text = read_prompt(prompt, file)
    rt = open_model(model, numerics=numerics, threads=threads)
    n_ctx = ctx_size if ctx_size > 0 else rt.model.args.n_ctx_train
    toks = rt.tokenizer.tokenize(text, add_special=True, parse_special=True)
    sampler = Sampler(
        SamplingParams(
            temperature=temp,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            seed=DEFAULT_SEED if seed < 0 else seed,
        )
    )

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    res = generate(
        rt.model,
        rt.tokenizer,
        toks,
        sampler,
        n_predict=n_predict,
        n_ctx=n_ctx,
        n_batch=batch_size,
        ignore_eos=ignore_eos,
        on_text=None if as_json else stream,
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
