"""The HTTP server's settings, from `llama serve`'s options (the model's facts are
core/model/loaded.py's ModelInfo)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llamacli.core.sampling import SamplingLimits, SamplingParams
from llamacli.core.speculative.config import DraftParams
from llamacli.http.limits import StopLimits


@dataclass
class ServerConfig:
    """`llama serve`'s options that the HTTP layer uses (engine options go to EngineConfig)."""

    aliases: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)  # informational, listed by /v1/models
    api_keys: list[str] = field(default_factory=list)
    metrics: bool = False
    slots: bool = True
    props: bool = False
    slot_save_path: str | None = None
    media_path: str | None = None  # file:// media URLs are read under it (None: refused)
    embeddings: bool = False
    pooling: str | None = None  # None: the model's own pooling type (mean when it has none)
    embd_normalize: int = 2
    ui: bool = True
    cors_origins: str = "*"  # "*": reflect any Origin; "localhost"; or a comma-separated list
    cors_methods: str = "GET, POST, DELETE, OPTIONS"
    cors_headers: str = "*"
    cors_credentials: bool = True
    ui_mcp_proxy: bool = False  # GET/POST /cors-proxy
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n_predict: int = -1
    n_keep: int = 0
    cache_prompt: bool = True
    spm_infill: bool = False
    prefill_assistant: bool = True
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_format: str = "auto"  # none, auto, deepseek, deepseek-legacy (requests may override)
    reasoning_budget: int = -1  # thinking tokens before the end tag is forced (-1: unlimited)
    reasoning_budget_message: str = ""  # written before the forced end tag
    threads_http: int = -1
    sse_ping_interval: float = 30.0  # seconds of silence before an SSE comment; <= 0: never
    n_batch: int = 2048  # logical batch: bounds the context /infill builds
    sleep_idle_seconds: float = -1  # > 0: release the model after that long with no task (http/sleep.py)
    speculative: DraftParams | None = None  # speculative decoding on: its draft bounds
    # limits (llama-server has none; these keep one request from tying the server up)
    max_body_size: int = 10 * 1024 * 1024  # bytes; a larger body is a 413 before it is parsed
    max_prompts: int = 128  # completion tasks per request (prompts x n)
    max_embd_inputs: int = 2048  # inputs per embeddings request (OpenAI's limit)
    sampling_limits: SamplingLimits = field(default_factory=SamplingLimits)  # --max-dry-breakers, ...
    stop_limits: StopLimits = field(default_factory=StopLimits)  # --max-stop-strings, --max-stop-length
    verbose: bool = False
    log_format: str = "text"
    build_info: str = "llamacli-0.1.0"
