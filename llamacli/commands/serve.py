"""`llama serve`: llama-server's HTTP API (OpenAI, Anthropic and native endpoints) over the
engine, on Quart + Hypercorn. Options follow llama-server; the options are turned into an
EngineConfig and a ServerConfig here and go no deeper."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

import typer

from llamacli.cli import app, guarded
from llamacli.options.llama_flags import llama_cpp_flags, note
from llamacli.core.model.kernels.pooling import POOLING_TYPES
from llamacli.core.text.reasoning import REASONING_FORMATS
from llamacli.core.sampling import SamplingParams
from llamacli.options.model_source import ModelSource, model_options
from llamacli.options.common import (
    LoraOpt, LoraScaledOpt, NumericsOpt, ThreadsOpt, lora_specs,
)
from llamacli.options.sampling import sampling_options
from llamacli.options.speculative import SpecOptions, speculative_options

def _read_api_keys(keys: list[str], key_file: Optional[str]) -> list[str]:
    out = [k.strip() for arg in keys for k in arg.split(",") if k.strip()]
    if key_file:
        with open(key_file, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    out.append(line)
        if not out:
            raise typer.BadParameter(f"--api-key-file {key_file}: no keys in the file")
    return out


def template_kwargs(
    chat_template_kwargs: Optional[str], reasoning: str, effort: str, preserve: Optional[bool]
) -> dict[str, Any]:
    """The chat template's extra variables from --chat-template-kwargs (JSON; it wins), -rea
    (enable_thinking), --reasoning-effort (reasoning_effort; none: enable_thinking false) and
    --reasoning-preserve (preserve_reasoning), as llama-server sets them."""
    kwargs: dict[str, Any] = {}
    if chat_template_kwargs:
        try:
            kwargs = json.loads(chat_template_kwargs)
        except ValueError as e:
            raise typer.BadParameter(f"--chat-template-kwargs is not valid JSON: {e}") from None
        if not isinstance(kwargs, dict):
            raise typer.BadParameter("--chat-template-kwargs must be a JSON object")
        from llamacli.core.errors import InvalidRequest
        from llamacli.core.text.tool_calls.setup import check_template_kwargs

        try:
            check_template_kwargs(kwargs)
        except InvalidRequest as e:
            raise typer.BadParameter(f"--chat-template-kwargs: {e}") from None
    if reasoning != "auto":
        kwargs.setdefault("enable_thinking", reasoning == "on")
    if effort == "none":
        kwargs.setdefault("enable_thinking", False)
    elif effort and effort != "default":
        kwargs.setdefault("reasoning_effort", effort)
    if preserve is not None:
        kwargs.setdefault("preserve_reasoning", preserve)
    return kwargs


def _size(text: str, flag: str) -> int:
    """Bytes from "4096", "512K", "10M", "1G" (powers of 1024)."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if mult > 1 else t) * mult)
    except (ValueError, OverflowError):
        raise typer.BadParameter(f"{flag} must be a size such as 4096, 512K or 10M, got {text!r}") from None
    if n <= 0:
        raise typer.BadParameter(f"{flag} must be positive, got {text!r}")
    return n


@app.command(context_settings={"allow_extra_args": True})
@guarded
@llama_cpp_flags("serve")
@sampling_options
@speculative_options
@model_options
def serve(
    ctx: typer.Context,
    source: ModelSource,  # -m, -hf, -hff, -hft, --offline (@model_options)
    alias: Optional[str] = typer.Option(None, "-a", "--alias", help="Model name(s) for the API, comma-separated (default: the model path)."),
    tags: Optional[str] = typer.Option(None, "--tags", help="Model tags, comma-separated (informational: listed by /v1/models)."),
    ctx_size: int = typer.Option(0, "-c", "--ctx-size", help="Context size shared by the slots (0: the model's training context)."),
    parallel: int = typer.Option(-1, "-np", "--parallel", help="Number of slots (-1: auto, 4 with a unified KV cache)."),
    batch_size: int = typer.Option(2048, "-b", "--batch-size", help="Logical batch size (limits /infill context)."),
    ubatch_size: int = typer.Option(512, "-ub", "--ubatch-size", help="Most tokens in one forward pass."),
    n_predict: int = typer.Option(-1, "-n", "--predict", "--n-predict", help="Tokens per request when the request gives none or -1 (-1: no limit)."),
    keep: int = typer.Option(0, "--keep", help="Prompt tokens kept by a context shift (-1: all)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address(es) to listen on, comma-separated; a path ending in .sock is a UNIX socket."),
    port: int = typer.Option(8080, "--port", help="Port to listen on (0: any free port, printed at startup)."),
    api_key: list[str] = typer.Option([], "--api-key", help="API key (repeatable, or comma-separated); requests then need `Authorization: Bearer KEY`."),
    api_key_file: Optional[str] = typer.Option(None, "--api-key-file", help="File of API keys, one per line (# starts a comment)."),
    metrics: bool = typer.Option(False, "--metrics", help="Enable GET /metrics (Prometheus)."),
    props: bool = typer.Option(False, "--props", help="Enable changing default settings via POST /props."),
    slots: bool = typer.Option(True, "--slots/--no-slots", help="Expose GET /slots."),
    slot_save_path: Optional[str] = typer.Option(None, "--slot-save-path", help="Directory for POST /slots/ID?action=save|restore|erase."),
    chat_template: Optional[str] = typer.Option(None, "--chat-template", help="Chat template: a built-in name or Jinja source."),
    chat_template_file: Optional[str] = typer.Option(None, "--chat-template-file", help="Read the Jinja chat template from a file."),
    chat_template_kwargs: Optional[str] = typer.Option(None, "--chat-template-kwargs", help="JSON object of extra template variables."),
    jinja: bool = typer.Option(True, "--jinja/--no-jinja", help="Run Jinja templates (off: built-in formats only)."),
    embeddings: bool = typer.Option(False, "--embedding", "--embeddings", help="Enable the embeddings endpoints."),
    pooling: Optional[str] = typer.Option(None, "--pooling", help="Embedding pooling: none, mean, cls, last, rank (default: the model's, else mean)."),
    rerank: bool = typer.Option(False, "--rerank", "--reranking", help="Enable the reranking endpoints (/rerank, /v1/rerank): embeddings with rank pooling."),
    embd_normalize: int = typer.Option(2, "--embd-normalize", help="Embedding normalization for /embedding (-1 none, 0 max-abs, 1 taxicab, 2 Euclidean, >2 p-norm)."),
    context_shift: bool = typer.Option(False, "--context-shift/--no-context-shift", help="Shift the context instead of stopping when it fills."),
    cache_prompt: bool = typer.Option(True, "--cache-prompt/--no-cache-prompt", help="Reuse cached prompt prefixes across requests."),
    cache_reuse: int = typer.Option(0, "--cache-reuse", help="Accepted; prefixes are reused, chunks after a difference are not."),
    kv_unified: Optional[bool] = typer.Option(None, "-kvu/-no-kvu", "--kv-unified/--no-kv-unified", help="Every slot may use the whole context (default: on when -np is auto)."),
    slot_prompt_similarity: float = typer.Option(0.10, "-sps", "--slot-prompt-similarity", help="Prompt overlap needed to prefer a slot's cache."),
    sampling: SamplingParams = None,  # type: ignore[assignment]  # set by @sampling_options
    speculative: SpecOptions = None,  # type: ignore[assignment]  # set by @speculative_options
    timeout: float = typer.Option(3600, "-to", "--timeout", help="Connection read timeout, seconds."),
    sse_ping_interval: float = typer.Option(30.0, "--sse-ping-interval", help="Seconds of stream silence before an SSE ping comment (-1: never)."),
    max_body_size: str = typer.Option("10M", "--max-body-size", help="Largest request body (bytes; K, M, G suffixes): a larger one is a 413 before it is read."),
    max_prompts: int = typer.Option(128, "--max-prompts", help="Most completions one request may ask for (prompts x n; 0: no limit)."),
    max_embd_inputs: int = typer.Option(2048, "--max-embd-inputs", help="Most inputs in one embeddings request (OpenAI's limit; 0: no limit)."),
    n_predict_max: int = typer.Option(-1, "--n-predict-max", help="Cap on any request's tokens to generate (-1: none; generation always stops when the slot's context is full, unless --context-shift)."),
    threads_http: int = typer.Option(-1, "--threads-http", help="Threads for tokenizing and templating requests (-1: auto)."),
    ssl_key_file: Optional[str] = typer.Option(None, "--ssl-key-file", help="PEM private key (serve HTTPS)."),
    ssl_cert_file: Optional[str] = typer.Option(None, "--ssl-cert-file", help="PEM certificate (serve HTTPS)."),
    cors_origins: Optional[str] = typer.Option(None, "--cors-origins", help="Allowed CORS origins: *, localhost, or a comma-separated list (default: *, localhost with --tools)."),
    cors_methods: str = typer.Option("GET, POST, DELETE, OPTIONS", "--cors-methods", help="Access-Control-Allow-Methods of a preflight."),
    cors_headers: str = typer.Option("*", "--cors-headers", help="Access-Control-Allow-Headers of a preflight."),
    tools: Optional[str] = typer.Option(None, "--tools", help="llama-server's built-in web-UI tools (names or all): not provided here; only limits --cors-origins to localhost by default, as llama-server does."),
    tools_runtime: Optional[str] = typer.Option(None, "--tools-runtime", help="Runtime for --tools (accepted; there are no built-in tools to run)."),
    ui_mcp_proxy: bool = typer.Option(False, "--ui-mcp-proxy/--no-ui-mcp-proxy", "--webui-mcp-proxy/--no-webui-mcp-proxy", help="Enable GET/POST /cors-proxy?url=... for the web UI's MCP client (forwards only x-llama-server-proxy-header-* headers)."),
    ui: bool = typer.Option(True, "--ui/--no-ui", "--webui/--no-webui", help="Serve the chat page at /."),
    spm_infill: bool = typer.Option(False, "--spm-infill", help="Suffix/prefix/middle order for /infill."),
    prefill_assistant: bool = typer.Option(True, "--prefill-assistant/--no-prefill-assistant", help="A final assistant message is continued."),
    warmup: bool = typer.Option(True, "--warmup/--no-warmup", help="Run one token through the model before serving."),
    log_format: str = typer.Option("text", "--log-format", help="Request log lines: text or json."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Log /health requests too; responses carry __verbose (the prompt, the settings)."),
    models_dir: Optional[str] = typer.Option(None, "--models-dir", help="Router mode: serve the GGUF models in this folder (one server process per loaded model; see docs/http-api.md)."),
    models_preset: Optional[str] = typer.Option(None, "--models-preset", help="Router mode: an INI file of models and their settings (llama-server's preset format)."),
    models_max: int = typer.Option(4, "--models-max", help="Router mode: most models loaded at once; loading another unloads the least recently used (0: no limit)."),
    models_autoload: bool = typer.Option(True, "--models-autoload/--no-models-autoload", help="Router mode: load a model when a request names it (off: 400 until POST /models/load)."),
    sleep_idle_seconds: float = typer.Option(-1, "--sleep-idle-seconds", help="Seconds with no task after which the model and its KV cache are released (the next task reloads it; -1: never)."),
    reasoning: str = typer.Option("auto", "-rea", "--reasoning", help="Reasoning of thinking models: on, off (the prompt ends with an empty thinking block) or auto."),
    lora: list[str] = LoraOpt,
    lora_scaled: list[str] = LoraScaledOpt,
    lora_init_without_apply: bool = typer.Option(False, "--lora-init-without-apply", help="Load the LoRA adapters with scale 0 (apply them later with POST /lora-adapters)."),
    reasoning_effort: str = typer.Option("default", "--reasoning-effort", help="Reasoning effort given to the chat template (reasoning_effort): default keeps the template's; minimal, low, medium, high, ...; none turns thinking off."),
    reasoning_preserve: Optional[bool] = typer.Option(None, "--reasoning-preserve/--no-reasoning-preserve", help="Ask templates that can (preserve_reasoning) to keep earlier turns' reasoning in the history."),
    reasoning_format: str = typer.Option("auto", "--reasoning-format", help="Where thoughts go: none (left in message.content), deepseek or auto (message.reasoning_content), deepseek-legacy (both)."),
    reasoning_budget: int = typer.Option(-1, "--reasoning-budget", help="Thinking tokens before the end tag is forced (-1: unrestricted, 0: end at once)."),
    reasoning_budget_message: str = typer.Option("", "--reasoning-budget-message", help="Text written before the forced end-of-thinking tag when the budget runs out."),
    numerics: str = NumericsOpt,
    threads: int = ThreadsOpt,
) -> None:
    """Serve the model over llama-server's HTTP API (OpenAI, Anthropic and native endpoints).

    The API answers 503 while the model loads; SIGINT/SIGTERM stop it gracefully (exit 0).

    llama-server options that mean nothing to a NumPy CPU engine (-ngl, -fa, --mlock, --no-mmap, --swa-full, -tb, --numa, -ctk/-ctv, -cb, ...) are accepted with a one-line note.
    """
    from llamacli.core.model.loaded import ModelInfo
    from llamacli.http.config import ServerConfig
    from llamacli.http.state import ServerState, ServingEngine
    from llamacli.http.router_child import watch_router
    from llamacli.http.server import Listen, run_server

    if log_format not in ("text", "json"):
        raise typer.BadParameter("--log-format must be text or json")
    if pooling is not None and pooling not in POOLING_TYPES:
        raise typer.BadParameter("--pooling must be none, mean, cls, last or rank")
    if rerank:  # as llama-server: embeddings on, rank pooling
        embeddings, pooling = True, "rank"
    if bool(ssl_key_file) != bool(ssl_cert_file):
        raise typer.BadParameter("--ssl-key-file and --ssl-cert-file go together")
    tool_names = [t.strip() for t in (tools or "").split(",") if t.strip()]
    if tool_names:
        note("--tools: llama-server's built-in tools are not provided; the flag limits --cors-origins to localhost by default")
    if tools_runtime:
        note("--tools-runtime has no effect here (no built-in tools); ignored")
    if cors_origins is None:
        cors_origins = "localhost" if tool_names else "*"
    if cache_reuse > 0:
        note("--cache-reuse: cached prefixes are reused; chunks after the first difference are recomputed")
    if reasoning not in ("on", "off", "auto"):
        raise typer.BadParameter("--reasoning must be on, off or auto")
    if reasoning_format not in REASONING_FORMATS:
        raise typer.BadParameter(f"--reasoning-format must be one of: {', '.join(REASONING_FORMATS)}")
    if reasoning_budget < -1:
        raise typer.BadParameter("--reasoning-budget must be -1 (unrestricted) or a number of tokens")
    kwargs = template_kwargs(chat_template_kwargs, reasoning, reasoning_effort, reasoning_preserve)
    template_override = chat_template
    if chat_template_file:
        with open(chat_template_file, encoding="utf-8") as f:
            template_override = f.read()
    adapters = [(p, 0.0 if lora_init_without_apply else s) for p, s in lora_specs(lora, lora_scaled)]
    router = bool(models_dir or models_preset)
    if router and source.given:
        raise typer.BadParameter("--models-dir/--models-preset start a router over many models: give no -m/-hf")
    model = None if router else source.path()
    config = ServerConfig(
        aliases=[a.strip() for a in (alias or "").split(",") if a.strip()],
        tags=[t.strip() for t in (tags or "").split(",") if t.strip()],
        cors_methods=cors_methods, cors_headers=cors_headers, ui_mcp_proxy=ui_mcp_proxy, tools=tool_names,
        api_keys=_read_api_keys(api_key, api_key_file),
        metrics=metrics, slots=slots, props=props, slot_save_path=slot_save_path, embeddings=embeddings,
        pooling=pooling, embd_normalize=embd_normalize, ui=ui, cors_origins=cors_origins, sampling=sampling,
        n_predict=n_predict, n_keep=keep, cache_prompt=cache_prompt, spm_infill=spm_infill,
        prefill_assistant=prefill_assistant, chat_template_kwargs=kwargs, threads_http=threads_http, sse_ping_interval=sse_ping_interval,
        verbose=verbose, log_format=log_format, n_batch=batch_size, sleep_idle_seconds=sleep_idle_seconds, reasoning_format=reasoning_format,
        reasoning_budget=reasoning_budget, reasoning_budget_message=reasoning_budget_message,
        speculative=speculative.config.draft if speculative.config.enabled else None,
        max_body_size=_size(max_body_size, "--max-body-size"), max_prompts=max_prompts, max_embd_inputs=max_embd_inputs,
    )

    def _log(msg: str) -> None:
        if log_format == "json":
            print(json.dumps({"ts": round(time.time(), 3), "level": "info", "msg": msg}), file=sys.stderr, flush=True)
        else:
            print(f"llama serve: {msg}", file=sys.stderr, flush=True)

    listen = Listen(host=host, port=port, ssl_key_file=ssl_key_file, ssl_cert_file=ssl_cert_file, timeout=timeout)
    if router:
        from llamacli.router_models import serve_router

        serve_router(ctx, config, listen, models_dir, models_preset, models_max, models_autoload, _log)
        return
    n_parallel = 4 if parallel < 0 else parallel
    unified = (parallel < 0) if kv_unified is None else kv_unified

    def load() -> tuple[ServingEngine, ModelInfo]:
        from llamacli.core.runtime.engine import Engine, EngineConfig, Metrics
        from llamacli.core.runtime.tasks import Task, TaskParams
        from llamacli.loading import open_draft, open_model

        t0 = time.perf_counter()
        rt = open_model(model, numerics=numerics, threads=threads, loras=adapters, chat_template=template_override, use_jinja=jinja)
        draft = open_draft(speculative.draft_model, rt, numerics, threads) if speculative.draft_model else None
        n_ctx = ctx_size if ctx_size > 0 else rt.model.args.n_ctx_train
        engine = Engine(
            rt.model, rt.tokenizer,
            EngineConfig(n_ctx=n_ctx, n_parallel=n_parallel, n_batch=ubatch_size, slot_prompt_similarity=slot_prompt_similarity,
                         context_shift=context_shift, kv_unified=unified, speculative=speculative.config,
                         n_predict_max=n_predict_max),
            rt.loras,
            draft_model=draft,
        ).start()
        if warmup:
            first = rt.tokenizer.vocab.bos if rt.tokenizer.vocab.bos is not None else 0
            if rt.model.has_lm_head:
                engine.run(Task([first], TaskParams(n_predict=1, sampling=SamplingParams(temperature=0.0), cache_prompt=False)))
            else:  # an encoder: one embedding
                engine.run(Task([first], kind="embedding", pooling="mean"))
            engine.call(lambda: engine.erase_slot(0))
            engine.metrics = Metrics()
        _log(f"loaded {rt.path} in {time.perf_counter() - t0:.1f} s")
        return engine, rt.info

    watch_router()
    run_server(ServerState(config), listen, load, _log, describe=f"model: {model or 'the demo model'}; loading")
