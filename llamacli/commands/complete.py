"""`llama complete`: raw continuation of a prompt (llama.cpp's llama-completion)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from typing import Any, Optional

import typer

from llamacli.cli import app, err, guarded
from llamacli.core.sampling import SamplingParams
from llamacli.options.llama_flags import llama_cpp_flags
from llamacli.options.mmproj import MmprojOptions, fetch_model, mmproj_options
from llamacli.options.sampling import sampling_options
from llamacli.options.speculative import SpecOptions, speculative_options
from llamacli.options.model_source import ModelSource, model_options
from llamacli.options.common import (
    BatchInvariantOpt, BatchSizeOpt, CtxSizeOpt, LoraOpt, LoraScaledOpt, NPredictOpt, NumericsOpt, ThreadsOpt, lora_specs,
    read_prompt,
)


@app.command(context_settings={"allow_extra_args": True})
@guarded
@llama_cpp_flags("complete")
@sampling_options
@speculative_options
@mmproj_options
@model_options
def complete(
    ctx: typer.Context,
    source: ModelSource,  # -m, -hf, -hff, -hft, --offline (@model_options)
    prompt: Optional[str] = typer.Option(
        None, "-p", "--prompt", help="Prompt text (also read from stdin when piped)."
    ),
    file: Optional[str] = typer.Option(
        None, "-f", "--file", help="Read the prompt from a file."
    ),
    image: list[str] = typer.Option(
        [], "--image", metavar="FILE",
        help="Image for the prompt's <__media__> markers, in order (repeatable; needs -mm). Without a marker, one per image goes before the prompt.",
    ),
    audio: list[str] = typer.Option(
        [], "--audio", metavar="FILE",
        help="Audio file (WAV, MP3, FLAC) for the <__media__> markers after the images' (repeatable; needs -mm with an audio projector).",
    ),
    n_predict: int = NPredictOpt,
    ctx_size: int = CtxSizeOpt,
    batch_size: int = BatchSizeOpt,
    display_prompt: bool = typer.Option(
        True, "--display-prompt/--no-display-prompt", help="Print the prompt before the continuation (as llama-completion does)."
    ),
    sampling: SamplingParams = None,  # type: ignore[assignment]  # set by @sampling_options
    speculative: SpecOptions = None,  # type: ignore[assignment]  # set by @speculative_options
    mmproj: MmprojOptions = None,  # type: ignore[assignment]  # set by @mmproj_options
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
    lora: list[str] = LoraOpt,
    lora_scaled: list[str] = LoraScaledOpt,
    numerics: str = NumericsOpt,
    batch_invariant: bool = BatchInvariantOpt,
    threads: int = ThreadsOpt,
) -> None:
    """Continue a raw prompt (no chat template), like llama.cpp's llama-completion."""
    import secrets

    from llamacli.core.runtime.engine import Engine, EngineConfig
    from llamacli.core.sampling import DEFAULT_SEED
    from llamacli.core.runtime.tasks import Final, Task, TaskParams
    from llamacli.loading import open_draft, open_model
    from llamacli.media import media_prompt, open_projector

    from llamacli.options.grammar import grammar_from_cli

    spec = grammar_from_cli(grammar, grammar_file, json_schema, json_schema_file)
    text = read_prompt(prompt, file)
    model, mmproj = fetch_model(source, mmproj)
    rt = open_model(
        model, numerics=numerics, threads=threads, batch_invariant=batch_invariant, loras=lora_specs(lora, lora_scaled),
        with_template=False,  # a completion renders no chat template
    )
    draft = open_draft(speculative.draft_model, rt, numerics, threads) if speculative.draft_model else None
    n_ctx = ctx_size if ctx_size > 0 else rt.model.args.n_ctx_train
    encoder = open_projector(mmproj, rt.model.args.n_embd, threads)
    toks, media = media_prompt(text, image, encoder, rt.tokenizer, mmproj.limits, audio)
    if sampling.seed == DEFAULT_SEED:  # random, but printed with --json so that a run can be repeated
        sampling = dataclasses.replace(sampling, seed=secrets.randbits(32) & 0x7FFFFFFF)
    seed = sampling.seed
    params = TaskParams(n_predict=n_predict, sampling=sampling, ignore_eos=sampling.ignore_eos, grammar=spec)
    engine = Engine(
        rt.model,
        rt.tokenizer,
        EngineConfig(n_ctx=n_ctx, n_parallel=1, n_batch=batch_size, speculative=speculative.config),
        rt.loras,
        draft_model=draft,
    )
    echo = display_prompt and not as_json
    if echo:
        sys.stdout.write(text)
        sys.stdout.flush()
    try:
        if n_predict == 0:  # nothing to generate (llama-completion -n 0 prints only the prompt)
            final = Final("", [], list(toks), "limit")
        else:
            final = _run(engine, Task(toks, params, media=media), as_json)
        if final.error is not None:
            raise final.error
    except BrokenPipeError:
        raise
    except BaseException:
        if echo:  # the error line goes on a line of its own, not after the prompt on a terminal
            with contextlib.suppress(OSError):
                sys.stdout.write("\n")
                sys.stdout.flush()
        raise
    if as_json:
        obj = {
            "prompt_tokens": [t if t >= 0 else -1 for t in final.prompt_tokens],  # media positions: -1 (LLAMA_TOKEN_NULL)
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
        drafts = f" | draft accepted {final.timings.draft_n_accepted}/{final.timings.draft_n}" if final.timings.draft_n else ""
        err.print(
            f"[dim]prompt {final.timings.prompt_n} tok, {t['prompt_per_second']:.1f} tok/s | "
            f"generated {final.timings.predicted_n} tok, {t['predicted_per_second']:.1f} tok/s{drafts}[/]"
        )


def _run(engine: Any, task: Any, as_json: bool) -> Any:
    """Stream the task's text to stdout (unless --json); its Final."""
    from llamacli.core.runtime.tasks import Final

    final = None
    with engine:
        task = engine.submit(task)
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
    return final
