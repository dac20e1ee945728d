"""`llama serve`'s own options (all but -m/-hf, sampling and speculative decoding), as groups that
each build one dataclass, and what they become: a ServerConfig for the HTTP layer, a Listen for
the server, an EngineConfig for the engine. The options go no deeper than these configs.

`serve` takes `opts: ServeOptions` and decorates itself with `@serve_options`. The options keep
their plain names (host, ctx_size, ...): the router passes them on to its children by name
(options/router_args.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from llamacli.core.runtime.engine_config import EngineConfig
from llamacli.core.sampling import SamplingParams
from llamacli.options import endpoints, listen, model_load, reasoning, request_bounds, router_args, slots, tools
from llamacli.options.endpoints import EndpointOptions
from llamacli.options.groups import in_order, option_group, values_of
from llamacli.options.listen import ListenOptions
from llamacli.options.model_load import LoadOptions
from llamacli.options.reasoning import ReasoningOptions
from llamacli.options.request_bounds import RequestBounds
from llamacli.options.router_args import RouterOptions
from llamacli.options.slots import SlotOptions
from llamacli.options.speculative import SpecOptions
from llamacli.options.tools import ToolOptions

if TYPE_CHECKING:
    from llamacli.http.config import ServerConfig
    from llamacli.http.server import Listen


@dataclass(frozen=True)
class ServeOptions:
    listen: ListenOptions
    endpoints: EndpointOptions
    slots: SlotOptions
    reasoning: ReasoningOptions
    load: LoadOptions
    router: RouterOptions
    tools: ToolOptions
    bounds: RequestBounds

    @property
    def tools_on(self) -> bool:
        """Whether any tool is served (built-in, MCP, or all with --agent)."""
        return self.tools.enabled or self.endpoints.agent


# The groups' options in --help's order (each option is shown in its panel: Common, Server, ...).
HELP_ORDER = (
    # Common
    "ctx_size", "n_predict", "batch_size", "ubatch_size", "keep", "threads", "numerics", "lora", "lora_scaled",
    "lora_init_without_apply",
    # Server
    "host", "port", "api_key", "api_key_file", "ssl_key_file", "ssl_cert_file", "timeout", "threads_http", "cors_origins",
    "cors_methods", "cors_headers", "max_body_size", "max_prompts", "max_embd_inputs", "sse_ping_interval", "log_format",
    "verbose", "warmup",
    # Slots
    "parallel", "kv_unified", "cache_prompt", "cache_reuse", "context_shift", "ctx_checkpoints", "slot_prompt_similarity", "n_predict_max",
    "sleep_idle_seconds",
    # Endpoints
    "alias", "tags", "metrics", "props", "slots", "slot_save_path", "media_path", "embeddings", "pooling", "rerank", "embd_normalize", "ui",
    "ui_mcp_proxy", "spm_infill", "prefill_assistant",
    # Tools
    "tools", "tools_runtime", "agent", "mcp_servers_config", "mcp_servers_json",
    # Chat template and reasoning
    "chat_template", "chat_template_file", "jinja", "chat_template_kwargs", "reasoning", "reasoning_format",
    "reasoning_effort", "reasoning_preserve", "reasoning_budget", "reasoning_budget_message",
    # Request limits
    "max_grammar_bytes", "max_grammar_rules", "max_grammar_depth", "max_grammar_seconds", "max_dry_breakers",
    "max_logit_bias", "max_logit_bias_chars", "max_n_probs", "max_stop_strings", "max_stop_length",
    # Router mode
    "models_dir", "models_preset", "models_max", "models_autoload",
)
OPTIONS = in_order(HELP_ORDER, listen.OPTIONS, endpoints.OPTIONS, slots.OPTIONS, reasoning.OPTIONS, model_load.OPTIONS,
                   router_args.OPTIONS, tools.OPTIONS, request_bounds.OPTIONS)


def build(values: dict[str, Any]) -> ServeOptions:
    """Every group's dataclass from the options' values; validated."""
    return ServeOptions(
        listen=listen.build(values_of(values, listen.OPTIONS)),
        endpoints=endpoints.build(values_of(values, endpoints.OPTIONS)),
        slots=slots.build(values_of(values, slots.OPTIONS)),
        reasoning=reasoning.build(values_of(values, reasoning.OPTIONS)),
        load=model_load.build(values_of(values, model_load.OPTIONS)),
        router=router_args.build(values_of(values, router_args.OPTIONS)),
        tools=tools.build(values_of(values, tools.OPTIONS)),
        bounds=request_bounds.build(values_of(values, request_bounds.OPTIONS)),
    )


# Replace fn's `opts` parameter with the OPTIONS, where it stands; call fn with a ServeOptions.
serve_options = option_group("opts", OPTIONS, build, in_place=True, prefixed=False)


def server_config(opts: ServeOptions, sampling: SamplingParams, speculative: SpecOptions) -> ServerConfig:
    """What the HTTP layer needs of the options."""
    from llamacli.http.config import ServerConfig

    from llamacli.core.errors import InvalidRequest

    net, api, slot, thinking = opts.listen, opts.endpoints, opts.slots, opts.reasoning
    try:  # the server's own defaults within its bounds (or no request could pass)
        sampling.validate(opts.bounds.sampling)
    except InvalidRequest as e:
        raise typer.BadParameter(f"the sampling defaults are over a --max-... bound: {e}") from None
    cors_origins = net.cors_origins
    if cors_origins is None:
        cors_origins = "localhost" if opts.tools_on else "*"
    return ServerConfig(
        aliases=api.aliases, tags=api.tags, api_keys=net.api_keys, metrics=api.metrics, slots=api.slots, props=api.props,
        slot_save_path=api.slot_save_path, media_path=api.media_path, embeddings=api.embeddings, pooling=api.pooling, embd_normalize=api.embd_normalize,
        ui=api.ui, cors_origins=cors_origins, cors_methods=net.cors_methods, cors_headers=net.cors_headers,
        ui_mcp_proxy=api.ui_mcp_proxy, sampling=sampling, n_predict=slot.n_predict, n_keep=slot.keep,
        cache_prompt=slot.cache_prompt, spm_infill=api.spm_infill, prefill_assistant=api.prefill_assistant,
        chat_template_kwargs=thinking.template_kwargs, reasoning_format=thinking.reasoning_format,
        reasoning_budget=thinking.reasoning_budget, reasoning_budget_message=thinking.reasoning_budget_message,
        threads_http=net.threads_http, sse_ping_interval=net.sse_ping_interval, n_batch=slot.batch_size,
        sleep_idle_seconds=slot.sleep_idle_seconds, speculative=speculative.config.draft if speculative.config.enabled else None,
        max_body_size=net.max_body_size, max_prompts=net.max_prompts, max_embd_inputs=net.max_embd_inputs,
        sampling_limits=opts.bounds.sampling, stop_limits=opts.bounds.stop, verbose=net.verbose, log_format=net.log_format,
    )


def listen_config(opts: ServeOptions) -> Listen:
    """Where and how the server listens."""
    from llamacli.http.server import Listen

    net = opts.listen
    return Listen(host=net.host, port=net.port, ssl_key_file=net.ssl_key_file, ssl_cert_file=net.ssl_cert_file, timeout=net.timeout)


def engine_config(opts: ServeOptions, n_ctx_train: int, speculative: SpecOptions) -> EngineConfig:
    """The engine's settings for a model trained with n_ctx_train tokens of context."""
    s = opts.slots
    return EngineConfig(
        n_ctx=s.ctx_size if s.ctx_size > 0 else n_ctx_train, n_parallel=s.n_parallel, n_batch=s.ubatch_size,
        slot_prompt_similarity=s.slot_prompt_similarity, context_shift=s.context_shift, kv_unified=s.kv_unified,
        ctx_checkpoints=s.ctx_checkpoints,
        speculative=speculative.config, n_predict_max=s.n_predict_max, grammar_limits=opts.bounds.grammar,
        sampling_limits=opts.bounds.sampling,
    )
