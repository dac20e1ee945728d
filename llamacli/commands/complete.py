"""`llama complete`: raw continuation of a prompt (llama.cpp's llama-completion)."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from llamacli.cli import app, err, guarded
from llamacli.options import BatchInvariantOpt, ModelOpt, NumericsOpt, ThreadsOpt, read_prompt


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
    grammar: Optional[str] = typer.Option(None, "--grammar", help="GBNF grammar to constrain generation."),
    grammar_file: Optional[str] = typer.Option(None, "--grammar-file", help="File to read the GBNF grammar from."),
    json_schema: Optional[str] = typer.Option(
        None, "-j", "--json-schema", help="JSON schema (or @file.json) to constrain generation."
    ),
    json_schema_file: Optional[str] = typer.Option(None, "-jf", "--json-schema-file", help="File with a JSON schema."),
    numerics: str = NumericsOpt,
    batch_invariant: bool = BatchInvariantOpt,
    threads: int = ThreadsOpt,
) -> None:
    """Continue a raw prompt (no chat template), like llama.cpp's llama-completion."""
    import secrets

    from llamacli.core.engine import Engine, EngineConfig
    from llamacli.core.sampling import SamplingParams
    from llamacli.core.tasks import Final, Task, TaskParams
    from llamacli.runtime import open_model

    from llamacli.core.grammar import grammar_from_cli

    spec = grammar_from_cli(grammar, grammar_file, json_schema, json_schema_file)
    text = read_prompt(prompt, file)
    rt = open_model(model, numerics=numerics, threads=threads, batch_invariant=batch_invariant)
    n_ctx = ctx_size if ctx_size > 0 else rt.model.args.n_ctx_train
    toks = rt.tokenizer.tokenize(text, add_special=True, parse_special=True)
    seed = seed if seed >= 0 else secrets.randbits(32)
    sampling = SamplingParams(
        temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed
    )
    params = TaskParams(n_predict=n_predict, sampling=sampling, ignore_eos=ignore_eos, grammar=spec)
    engine = Engine(
        rt.model,
        rt.tokenizer,
        EngineConfig(n_ctx=n_ctx, n_parallel=1, n_batch=batch_size),
    )
    final: Final | None = None
    with engine:
        task = engine.submit(Task(toks, params))
        try:
            for r in task.results:
                if isinstance(r, Final):
                    final = r
                elif not as_json and r.content:
                    sys.stdout.write(r.content)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            task.cancel()
            raise
    assert final is not None
    if final.error is not None:
        raise final.error
    if as_json:
        obj = {
            "prompt_tokens": final.prompt_tokens,
            "tokens": final.tokens,
            "content": final.content,
            "stop_type": final.stop_type,
            "truncated": final.truncated,
            "seed": seed,
            "timings": final.timings.to_dict(),
        }
        print(json.dumps(obj, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        t = final.timings.to_dict()
        err.print(
            f"[dim]prompt {final.timings.prompt_n} tok, {t['prompt_per_second']:.1f} tok/s | "
            f"generated {final.timings.predicted_n} tok, {t['predicted_per_second']:.1f} tok/s[/]"
        )
