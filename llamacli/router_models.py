"""The models a router serves (`llama serve --models-dir DIR / --models-preset FILE.ini`).

Sources, as llama-server's, later ones taking precedence for the same name (the demo model is
not one: a router lists what it was given, as llama-server's does):
- the cache (`llama list`): named `user/repo:QUANT`;
- `--models-dir DIR`: every `NAME.gguf` in DIR is `NAME`; a subfolder holding one model (a
  split model's parts) is named after the folder, and an `mmproj*.gguf` beside it is its
  projector (the child gets `-mm FILE`, as llama-server's router sets LLAMA_ARG_MMPROJ; the
  first by name when there are several). A file whose name contains `mmproj` is never a model;
  loose in DIR it pairs with nothing;
- `--models-preset FILE.ini`: a section named after a model above adds settings to it; another
  section is a model of its own and needs `model = PATH` (or `hf-repo = USER/REPO[:QUANT]`).

A child's arguments: its model, then the preset's `[*]` settings, the model's own section, and
the router's own command line (highest precedence: the last value of an option wins).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any
from pathlib import Path


from llamacli.hub import _SPLIT, DEFAULT_QUANT, _first_part, _is_model, cached_models, quant_of
from llamacli.http.config import ServerConfig
from llamacli.http.router import DEFAULT_STOP_TIMEOUT, ModelSpec
from llamacli.http.server import Listen
from llamacli.options.router_args import Preset, PresetError, inherited_args, option_table, read_preset, truthy


def _cache_specs() -> list[ModelSpec]:
    out: list[ModelSpec] = []
    for m in cached_models():
        tag = quant_of(m.file) or Path(m.file).stem
        out.append(ModelSpec(f"{m.repo}:{tag}", ["-m", m.path], m.path, "cache"))
    return out


def _dir_specs(models_dir: str) -> list[ModelSpec]:
    try:
        entries = sorted(os.scandir(models_dir), key=lambda e: e.name)
    except OSError as err:
        raise PresetError(f"--models-dir {models_dir}: {err.strerror or err}") from None
    out: list[ModelSpec] = []
    loose: list[str] = []
    for entry in entries:
        if entry.is_dir():
            names = sorted(f.name for f in os.scandir(entry.path) if f.is_file() and f.name.endswith(".gguf"))
            files = [n for n in names if _is_model(n)]
            if files:
                path = os.path.join(entry.path, _first_part(files))
                projector = [["-mm", os.path.join(entry.path, n)] for n in names if "mmproj" in n][:1]
                out.append(ModelSpec(entry.name, ["-m", path, *(projector[0] if projector else [])], path, "models_dir"))
        elif entry.is_file() and _is_model(entry.name):
            loose.append(entry.name)
    for name in loose:
        split = _SPLIT.search(name)
        if split is not None and int(split.group(1)) != 1:
            continue  # a later part of a split model: its first part names it
        path = os.path.join(models_dir, name)
        stem = name[: split.start()] if split is not None else name[: -len(".gguf")]
        out.append(ModelSpec(stem, ["-m", path], path, "models_dir"))
    return out


def _apply(spec: ModelSpec, glob: Preset, own: Preset | None, inherited: list[str], path: str) -> ModelSpec:
    """The spec with the preset's settings and the router's arguments."""
    only = {**glob.only, **(own.only if own else {})}
    params = {**glob.params, **(own.params if own else {})}
    model_args = spec.args
    if own is not None and ("model" in own.params or "hf_repo" in own.params):
        model_args = _model_args(own.params)
    aliases = tuple(a.strip() for a in params.get("alias", "").split(",") if a.strip())
    tags = tuple(t.strip() for t in params.get("tags", "").split(",") if t.strip())
    try:
        stop_timeout = float(only.get("stop-timeout", DEFAULT_STOP_TIMEOUT))
    except ValueError:
        raise PresetError(f"--models-preset {path} [{spec.name}]: stop-timeout must be a number of seconds") from None
    args = [*model_args, *glob.args, *(own.args if own else []), *inherited]
    if own is None:
        return ModelSpec(spec.name, args, spec.path, spec.source, aliases, tags, truthy(only.get("load-on-startup")), stop_timeout)
    path_ = own.params.get("model", spec.path)
    return ModelSpec(spec.name, args, path_, "preset", aliases, tags, truthy(only.get("load-on-startup")), stop_timeout)


def _cache_name(hf_repo: str) -> str:
    """`user/repo[:quant]` as the cache lists it (`user/repo:QUANT`, Q4_K_M when no tag)."""
    repo, _, quant = hf_repo.partition(":")
    return f"{repo}:{(quant or DEFAULT_QUANT).upper()}"


def _model_args(params: dict[str, str]) -> list[str]:
    if "model" in params:
        return ["-m", params["model"]]
    out = ["-hf", params["hf_repo"]]
    if "hf_file" in params:
        out += ["-hff", params["hf_file"]]
    return out


def discover(ctx: Any, models_dir: str | None, models_preset: str | None, inherited: list[str]) -> list[ModelSpec]:
    """Every model the router can serve, with its child's arguments."""
    found: dict[str, ModelSpec] = {}
    for spec in [*_cache_specs(), *(_dir_specs(models_dir) if models_dir else [])]:
        found[spec.name] = spec
    glob, sections = Preset(), dict[str, Preset]()
    if models_preset:
        glob, sections = read_preset(models_preset, option_table(ctx.command))
    for name, own in sections.items():
        if name not in found:
            if "model" not in own.params and "hf_repo" not in own.params:
                raise PresetError(f"--models-preset {models_preset} [{name}]: not a known model: give model = PATH or hf-repo = USER/REPO")
            found[name] = ModelSpec(name, [], own.params.get("model", own.params.get("hf_repo", "")), "preset")
        if truthy(own.only.get("dedup-cache-models", glob.only.get("dedup-cache-models"))) and "hf_repo" in own.params:
            found.pop(_cache_name(own.params["hf_repo"]), None)  # the cached entry this preset names is listed once
    return [_apply(s, glob, sections.get(s.name), inherited, models_preset or "") for s in found.values()]


def serve_router(
    ctx: Any, config: ServerConfig, listen: Listen, models_dir: str | None, models_preset: str | None,
    models_max: int, autoload: bool, log: Callable[[str], None],
) -> None:
    """`llama serve --models-dir/--models-preset`: list the models, start the router."""
    from llamacli.http.router import Supervisor
    from llamacli.http.router_routes import RouterState
    from llamacli.http.router_server import run_router

    inherited = inherited_args(ctx)

    def rediscover() -> list[ModelSpec]:
        return discover(ctx, models_dir, models_preset, inherited)

    specs = rediscover()
    on_startup = [s.name for s in specs if s.load_on_startup]
    if models_max > 0 and len(on_startup) > models_max:
        raise PresetError(f"{len(on_startup)} models are marked load-on-startup but --models-max is {models_max}")
    try:
        supervisor = Supervisor(specs, [sys.executable, "-m", "llamacli", "serve"], models_max, log)
    except ValueError as e:
        raise PresetError(str(e)) from None
    run_router(RouterState(config, supervisor, autoload, rediscover), listen, log)
