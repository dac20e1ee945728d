"""`llama serve`: llama-server's HTTP API (OpenAI, Anthropic and native endpoints) over the
engine, on Quart + Hypercorn. Options follow llama-server (llamacli/options/serve_options.py);
they are turned into an EngineConfig, a ServerConfig and a Listen there and go no deeper."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING

import typer

from llamacli.cli import app, guarded
from llamacli.core.sampling import SamplingParams
from llamacli.options.llama_flags import llama_cpp_flags, note
from llamacli.options.model_source import ModelSource, model_options
from llamacli.options.ray_serve import RayOptions, ray_options
from llamacli.options.sampling import sampling_options
from llamacli.options.serve_options import ServeOptions, engine_config, listen_config, serve_options, server_config
from llamacli.options.mmproj import MmprojOptions, fetch_model, mmproj_options
from llamacli.options.speculative import SpecOptions, speculative_options
from llamacli.options.tools import open_toolbox
from llamacli.scaleout.replica import ReplicaSpec

if TYPE_CHECKING:
    from llamacli.core.model.loaded import ModelInfo
    from llamacli.http.state import ServerState, ServingEngine
    from llamacli.options.router_args import RouterOptions
    from llamacli.scaleout.models import ModelDeployment


@app.command(context_settings={"allow_extra_args": True})
@guarded
@llama_cpp_flags("serve")
@sampling_options
@speculative_options
@ray_options
@mmproj_options
@model_options
@serve_options
def serve(
    ctx: typer.Context,
    source: ModelSource,  # -m, -hf, -hff, -hft, --offline (@model_options)
    opts: ServeOptions,  # the server's own options (@serve_options)
    sampling: SamplingParams = None,  # type: ignore[assignment]  # set by @sampling_options
    speculative: SpecOptions = None,  # type: ignore[assignment]  # set by @speculative_options
    ray: RayOptions = None,  # type: ignore[assignment]  # set by @ray_options
    mmproj: MmprojOptions = None,  # type: ignore[assignment]  # set by @mmproj_options
) -> None:
    """Serve the model over llama-server's HTTP API (OpenAI, Anthropic and native endpoints).

    The API answers 503 while the model loads; SIGINT/SIGTERM stop it gracefully (exit 0).

    llama-server options that mean nothing to a NumPy CPU engine (-ngl, -fa, --mlock, --no-mmap, --swa-full, -tb, --numa, -ctk/-ctv, -cb, ...) are accepted with a one-line note.
    """
    from llamacli.http.router_child import watch_router
    from llamacli.http.server import run_server
    from llamacli.http.state import ServerState

    router = opts.router
    if router.enabled and source.given:
        raise typer.BadParameter("--models-dir/--models-preset start a router over many models: give no -m/-hf")
    parsed = _RAY_MODEL.get()
    if parsed is not None:  # a router model's command line, read for its deployment (_ray_models)
        parsed.append((ReplicaSpec(source, opts, sampling, speculative, mmproj), ray))
        return
    if ray.enabled:
        _serve_on_ray(ctx, ReplicaSpec(source, opts, sampling, speculative, mmproj), ray)
        return
    model, mmproj = (None, mmproj) if router.enabled else fetch_model(source, mmproj)
    config, listen, log = server_config(opts, sampling, speculative), listen_config(opts), _logger(opts.listen.log_format)
    if router.enabled:
        from llamacli.router_models import serve_router

        if opts.tools_on:
            note("--tools/--agent/--mcp-servers-*: router mode serves no tools (its models' servers have no web page); ignored")
        serve_router(ctx, config, listen, router.models_dir, router.models_preset, router.models_max, router.models_autoload, log)
        return

    state = ServerState(config, None)
    state.media_limits = mmproj.limits

    def load() -> tuple[ServingEngine, ModelInfo]:
        return load_engine(model, opts, speculative, log, mmproj, state)

    tools = open_toolbox(opts.tools, log, all_builtin=opts.endpoints.agent)
    state.tools = tools
    if tools is not None:
        log(f"tools on: {', '.join(t.name for t in tools.tools) or 'MCP servers only'} (working directory {tools.sandbox.root}); "
            "do not expose this server to untrusted clients")
    watch_router()
    run_server(state, listen, load, log, describe=f"model: {model or 'the demo model'}; loading")


def _serve_on_ray(ctx: typer.Context, spec: ReplicaSpec, ray: RayOptions) -> None:
    """--ray: the same server as a Ray Serve application (llamacli/scaleout/); with
    --models-dir/--models-preset, one engine deployment per model behind the router's ingress."""
    from llamacli.scaleout.deploy import application, models_application, replicas_text, serve_on_ray

    opts = spec.opts
    if opts.tools_on:
        raise typer.BadParameter("--ray: the tools (--tools, --agent, --mcp-servers-*) run on one machine; not with --ray")
    assert ray.address is not None
    config = server_config(opts, spec.sampling, spec.speculative)  # the options' own checks, before anything is deployed
    if opts.router.enabled:
        models = _ray_models(ctx, opts.router)
        what = ", ".join(f"{m.spec.name}: {replicas_text(m.scaling)}" for m in models)
        app = models_application(models, config.api_keys)
    else:
        what, app = replicas_text(ray), application(spec, ray)
    serve_on_ray(app, ray.address, what, opts.listen.host, opts.listen.port, _logger(opts.listen.log_format))


# a router model's (ReplicaSpec, RayOptions), set while its command line is read (_ray_models)
_RAY_MODEL: ContextVar[list[tuple[ReplicaSpec, RayOptions]] | None] = ContextVar("_RAY_MODEL", default=None)


def _ray_models(ctx: typer.Context, router: RouterOptions) -> list[ModelDeployment]:
    """Router mode on Ray: the router's models (router_models.discover) but the cache's that no
    preset section names (each model takes replicas on the cluster: only those asked for), each
    with the options its child would be started with (read by this command), as deployments."""
    from llamacli.options.router_args import inherited_args
    from llamacli.router_models import discover
    from llamacli.scaleout.deploy import ENGINE
    from llamacli.scaleout.models import ModelDeployment, deployment_name

    specs = [s for s in discover(ctx, router.models_dir, router.models_preset, inherited_args(ctx)) if s.source != "cache"]
    if not specs:
        raise typer.BadParameter("--ray: --models-dir/--models-preset list no model")
    out: list[ModelDeployment] = []
    for i, model in enumerate(specs):
        parsed: list[tuple[ReplicaSpec, RayOptions]] = []
        token = _RAY_MODEL.set(parsed)
        try:
            code = ctx.command.main([*model.args, "--alias", model.name], prog_name=f"model {model.name}",
                                    standalone_mode=False)
        finally:
            _RAY_MODEL.reset(token)
        if not parsed:  # its options were refused (the error line is out)
            raise typer.Exit(code if isinstance(code, int) and code else 1)
        replica, scaling = parsed[0]
        server_config(replica.opts, replica.sampling, replica.speculative)
        out.append(ModelDeployment(model, replica, scaling, deployment_name(ENGINE, i)))
    return out


def _logger(log_format: str) -> Callable[[str], None]:
    """The server's log lines on stderr: `llama serve: msg`, or one JSON object a line."""

    def log(msg: str) -> None:
        if log_format == "json":
            print(json.dumps({"ts": round(time.time(), 3), "level": "info", "msg": msg}), file=sys.stderr, flush=True)
        else:
            print(f"llama serve: {msg}", file=sys.stderr, flush=True)

    return log


def load_engine(
    model: str | None, opts: ServeOptions, speculative: SpecOptions, log: Callable[[str], None],
    mmproj: MmprojOptions | None = None, state: ServerState | None = None,
) -> tuple[ServingEngine, ModelInfo]:
    """Open the model (and the draft model and the projector, which goes on `state`), start the
    engine and warm it up."""
    from llamacli.core.runtime.engine import Engine, Metrics
    from llamacli.core.runtime.tasks import Task, TaskParams
    from llamacli.core.model.kernels.jit_ir import release_llvm_pages
    from llamacli.http.heap import return_freed_memory, trim
    from llamacli.loading import open_draft, open_model
    from llamacli.media import open_projector

    t0 = time.perf_counter()
    lo = opts.load
    rt = open_model(
        model, numerics=lo.numerics, threads=lo.threads, loras=lo.loras, chat_template=lo.chat_template, use_jinja=lo.jinja
    )
    draft = open_draft(speculative.draft_model, rt, lo.numerics, lo.threads) if speculative.draft_model else None
    if mmproj is not None and state is not None:
        state.mtmd = open_projector(mmproj, rt.model.args.n_embd, lo.threads)
    engine = Engine(
        rt.model, rt.tokenizer, engine_config(opts, rt.model.args.n_ctx_train, speculative), rt.loras, draft_model=draft,
    ).start()
    if lo.warmup:
        first = rt.tokenizer.vocab.bos if rt.tokenizer.vocab.bos is not None else 0
        if rt.model.has_lm_head:
            engine.run(Task([first], TaskParams(n_predict=1, sampling=SamplingParams(temperature=0.0), cache_prompt=False)))
        else:  # an encoder: one embedding
            engine.run(Task([first], kind="embedding", pooling="mean"))
        engine.call(lambda: engine.erase_slot(0))
        engine.metrics = Metrics()
    engine.on_idle = trim
    return_freed_memory()
    release_llvm_pages()  # the kernels are loaded: LLVM's code runs again only to compile
    log(f"loaded {rt.path} in {time.perf_counter() - t0:.1f} s")
    return engine, rt.info
