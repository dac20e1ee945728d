"""`llama pull` and `llama list`: models in the Hugging Face cache (llamacli/hub.py)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from llamacli.cli import app, err, guarded
from llamacli.options.model_source import HfFileOpt, HfTokenOpt


@app.command()
@guarded
def pull(
    repo: str = typer.Argument(..., metavar="USER/REPO[:QUANT]", help="Hugging Face repository, optionally with a quant tag (default Q4_K_M)."),
    hf_file: Optional[str] = HfFileOpt,
    hf_token: Optional[str] = HfTokenOpt,
    mmproj: bool = typer.Option(True, "--mmproj-auto/--no-mmproj", help="Also download the repository's multimodal projector (mmproj file), as -hf does."),
) -> None:
    """Download a GGUF model into the Hugging Face cache (like `ollama pull`; `-hf` does the same on first use).

    The quant tag picks the file as llama.cpp's -hf does: the .gguf file whose name contains it
    (case-insensitive); without one Q4_K_M, else the repository's first .gguf. An interrupted
    transfer resumes; a file already in the cache is not downloaded again. The repository's
    mmproj file, if it has one, comes too (the one llama-server's -hf picks). Prints the model's
    local path (the projector's on stderr).
    """
    from llamacli.hub import resolve

    got = resolve(repo, hf_file, hf_token, mmproj=mmproj)
    err.print(f"{got.repo}: {got.file}", markup=False, highlight=False)
    if got.mmproj is not None:
        err.print(f"{got.repo}: {got.mmproj_file} (projector) {got.mmproj}", markup=False, highlight=False, soft_wrap=True)
    print(got.path)


@app.command("list")
@guarded
def list_models(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array of objects (repo, file, path, size, type, architecture, source)."),
) -> None:
    """List the GGUF models at hand: repository, file, size, type and architecture.

    The models in the cache (the Hugging Face cache: HF_HUB_CACHE, HF_HOME; or LLAMA_CACHE when
    set), the demo model, and the files opened with -m lately (repository `(-m)`). Type and
    architecture are read from each file's GGUF header.
    """
    from llamacli.hub import cache_location, human_size, listed_models

    models = listed_models()
    if as_json:
        print(json.dumps([m.__dict__ for m in models], indent=2))
        return
    if not models:
        err.print(f"no models in {cache_location()}; get one with `llama pull USER/REPO[:QUANT]`", markup=False, highlight=False)
        return
    rows = [("REPO", "FILE", "SIZE", "TYPE", "ARCH")] + [
        (m.repo, m.file, human_size(m.size), m.type, m.architecture) for m in models
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
