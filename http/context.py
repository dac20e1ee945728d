"""What every handler needs: the server's settings, the loaded model's facts, the engine.

`ServerState` starts empty (the model is still loading: every endpoint answers 503) and
becomes ready with `set_ready(engine, model_info)`. Handlers reach it as `current_state()`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llamacli.core.chat_templates import ChatTemplate
from llamacli.core.rerank import rerank_template
from llamacli.core.sampling import SamplingParams
from llamacli.core.speculative.config import DraftParams
from llamacli.core.runtime.tasks import Final, Partial, Result, Task, TaskParams
from llamacli.http.errors import LOADING, ApiError
from llamacli.http.tasklog import log_task

R = TypeVar("R")

PING = "ping"  # what `ServerState.results` yields (index -1) when a stream has been quiet

POOLING_BY_ID = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


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
    embeddings: bool = False
    pooling: str | None = None  # None: the model's own pooling type (mean when it has none)
    embd_normalize: int = 2
    ui: bool = True
    cors_origins: str = "*"  # "*": reflect any Origin; "localhost"; or a comma-separated list
    cors_methods: str = "GET, POST, DELETE, OPTIONS"
    cors_headers: str = "*"
    cors_credentials: bool = True
    ui_mcp_proxy: bool = False  # GET/POST /cors-proxy
    tools: list[str] = field(default_factory=list)  # --tools (names; "all")
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
    verbose: bool = False
    log_format: str = "text"
    build_info: str = "llamacli-0.1.0"


@dataclass
class ModelInfo:
    """Facts about the loaded model that the API reports or needs."""

    path: str
    tokenizer: Any
    template: ChatTemplate | None
    n_vocab: int
    n_ctx_train: int = 0
    n_embd: int = 0
    n_params: int = 0
    size: int = 0
    vocab_type: int = 0
    pooling: str = "mean"
    rerank_template: str | None = None  # the GGUF's tokenizer.chat_template.rerank
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


# llama_vocab_type numbers, as /v1/models reports them
_VOCAB_TYPES = {"none": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6}


def model_info(
    path: str, gguf: Any, model: Any, tokenizer: Any, chat_template: str | None = None, use_jinja: bool = True
) -> ModelInfo:
    """ModelInfo of a loaded model (a GGUFFile, a DecoderModel and its Tokenizer)."""
    md = gguf.metadata
    arch = md.get("general.architecture", "")
    vocab = tokenizer.vocab
    bos = tokenizer.token_to_piece(vocab.bos, True).decode("utf-8", "replace") if vocab.bos is not None else ""
    eos = tokenizer.token_to_piece(vocab.eos, True).decode("utf-8", "replace") if vocab.eos is not None else ""
    template = ChatTemplate.from_metadata(md, override=chat_template, bos_token=bos, eos_token=eos, use_jinja=use_jinja)
    pooling_id = md.get(f"{arch}.pooling_type")
    pooling = POOLING_BY_ID.get(int(pooling_id), "mean") if pooling_id is not None else "mean"
    if pooling == "rank" and not getattr(model, "n_cls_out", 0):
        pooling = "mean"  # no classification head to rank with
    n_params = 0
    for t in gguf.tensors.values():
        n_params += t.n_elements
    return ModelInfo(
        path=path,
        tokenizer=tokenizer,
        template=template,
        n_vocab=int(model.args.n_vocab),
        n_ctx_train=int(model.args.n_ctx_train),
        n_embd=int(model.args.n_embd),
        n_params=n_params,
        size=int(getattr(gguf, "file_size", 0)),
        vocab_type=_VOCAB_TYPES.get(str(md.get("tokenizer.ggml.model", "")), 0),
        pooling=pooling,
        rerank_template=rerank_template(md),
    )


class ServerState:
    """The engine, the model and the settings behind one app."""

    def __init__(self, config: ServerConfig | None = None) -> None:
        self.config = config or ServerConfig()
        self.engine: Any = None
        self.model: ModelInfo | None = None
        n = self.config.threads_http if self.config.threads_http > 0 else min(8, (os.cpu_count() or 2) + 2)
        self.executor = ThreadPoolExecutor(max_workers=n, thread_name_prefix="llama-http")
        self.tasks: dict[int, Task] = {}  # in flight by task id, for graceful shutdown
        self.controllable: dict[str, list[Task]] = {}  # completion id -> its tasks, for .../control
        self.closing = False  # set by cancel_all: responses end without waiting for the engine
        self._close_waiters: set[asyncio.Future[None]] = set()
        self.started = time.time()
        self.sleep: Any = None  # an IdleSleep with --sleep-idle-seconds (http/sleep.py)

    # ---- readiness ------------------------------------------------------------------------
    def set_ready(self, engine: Any, model: ModelInfo) -> None:
        self.model = model
        self.engine = engine

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.model is not None

    def require(self) -> tuple[Any, ModelInfo]:
        if self.engine is None or self.model is None:
            raise LOADING
        return self.engine, self.model

    # ---- identity -------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        """The name the API reports: the first alias in sorted order (llama-server keeps them in
        a std::set), else the model path."""
        if self.config.aliases:
            return sorted(self.config.aliases)[0]
        return self.model.path if self.model is not None else ""

    # A request may name any model: one model is served whatever the name (llama-server in
    # single-model mode ignores `model`, so OpenAI scripts keep their model names).

    # ---- running work ---------------------------------------------------------------------
    async def blocking(self, fn: Callable[[], R]) -> R:
        """Run fn (tokenizing, template rendering, engine.call) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    def submit(self, tasks: Sequence[Task]) -> list[Task]:
        """Submit tasks (all or none: if one is refused, the others are cancelled)."""
        engine, _ = self.require()
        done: list[Task] = []
        try:
            for t in tasks:
                engine.submit(t)
                done.append(t)
                self.tasks[t.id] = t
        except BaseException:
            for t in done:
                t.cancel()
                self.tasks.pop(t.id, None)
            raise
        return done

    def control(self, cmpl_id: str, tasks: Sequence[Task]) -> None:
        """Make `tasks` reachable by /v1/chat/completions/control under `cmpl_id` while they
        run (entries of finished completions are dropped here)."""
        for k in [k for k, ts in self.controllable.items() if not any(t.id in self.tasks for t in ts)]:
            del self.controllable[k]
        self.controllable[cmpl_id] = list(tasks)

    def running(self, cmpl_id: str) -> list[Task]:
        """The tasks of completion `cmpl_id` that are still running."""
        return [t for t in self.controllable.get(cmpl_id, []) if t.id in self.tasks]

    def base_params(self) -> TaskParams:
        """The server's defaults for a request that sets nothing."""
        c = self.config
        return TaskParams(n_predict=c.n_predict, sampling=c.sampling, cache_prompt=c.cache_prompt, n_keep=c.n_keep,
                          speculative=c.speculative)

    def task_params(self, body: Any) -> TaskParams:
        from llamacli.http.params import lora_scales, task_params

        engine, model = self.require()
        params = task_params(body, self.base_params(), model.tokenizer, model.n_vocab)
        if "lora" in body and body.raw("lora"):  # [] (or null): the server's current scales
            params.lora = lora_scales(body.raw("lora"), len(getattr(engine, "loras", ())))
        return params

    def ping_interval(self, body: Any) -> float | None:
        """The request's `sse_ping_interval` (else the server's); None when pings are off."""
        v = body.float("sse_ping_interval", self.config.sse_ping_interval)
        return v if v > 0 else None

    def cancel_all(self) -> None:
        """Cancel every task in flight and end their HTTP responses now (server shutdown):
        a response does not wait for the engine to finish its current step."""
        self.closing = True
        for f in list(self._close_waiters):  # cancel_all runs on the event loop's thread
            if not f.done():
                f.set_result(None)
        for t in list(self.tasks.values()):
            t.cancel()

    async def results(self, tasks: Sequence[Task], ping: float | None = None) -> AsyncIterator[tuple[int, Any]]:
        """(index, result) of several tasks as they arrive. Leaving early (client gone, error)
        cancels every task that has not finished: its slot is free within one step. On
        shutdown (`cancel_all`) the tasks still running end at once with a `cancelled` Final.
        With `ping` (seconds), `(-1, PING)` comes whenever nothing else did for that long."""
        queue: asyncio.Queue[tuple[int, Result | None]] = asyncio.Queue()

        async def pump(i: int, task: Task) -> None:
            async for r in task.results:
                await queue.put((i, r))
            await queue.put((i, None))

        pumps = [asyncio.ensure_future(pump(i, t)) for i, t in enumerate(tasks)]
        closing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.closing:
            closing.set_result(None)
        self._close_waiters.add(closing)
        texts: list[list[str]] = [[] for _ in tasks]
        toks: list[list[int]] = [[] for _ in tasks]
        done = [False] * len(tasks)
        getter: asyncio.Future[Any] | None = None
        try:
            while not all(done):
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait((getter, closing), timeout=ping, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done() and not closing.done():
                    getter.cancel()
                    yield -1, PING
                    continue
                if not getter.done():
                    getter.cancel()
                    for i, t in enumerate(tasks):
                        if not done[i]:
                            done[i] = True
                            yield i, Final("".join(texts[i]), toks[i], list(t.prompt_tokens), "cancelled")
                    return
                i, r = getter.result()
                if r is None:
                    done[i] = True
                    self.tasks.pop(tasks[i].id, None)
                    continue
                if isinstance(r, Partial):
                    texts[i].append(r.content)
                    toks[i].extend(r.tokens)
                elif isinstance(r, Final) and r.embedding is None:
                    log_task(tasks[i].id, r, self.config.log_format)
                yield i, r
        finally:
            self._close_waiters.discard(closing)
            if getter is not None:
                getter.cancel()
            for t in tasks:
                if not t.results.closed:
                    t.cancel()
                self.tasks.pop(t.id, None)
            for p in pumps:
                p.cancel()

    async def collect(self, tasks: Sequence[Task]) -> list[tuple[list[Partial], Final]]:
        """Wait for every task; per task its Partials and its Final (errors raised)."""
        parts: list[list[Partial]] = [[] for _ in tasks]
        finals: list[Final | None] = [None] * len(tasks)
        async for i, r in self.results(tasks):
            if isinstance(r, Final):
                finals[i] = r
            else:
                parts[i].append(r)
        out = []
        for p, f in zip(parts, finals):
            assert f is not None
            if f.error is not None:
                raise f.error
            out.append((p, f))
        return out


def current_state() -> ServerState:
    """The ServerState of the app handling the current request."""
    from quart import current_app

    state: ServerState = current_app.extensions["llama"]
    return state


async def request_json() -> dict[str, Any]:
    """The request body as a JSON object (400 on anything else)."""
    from quart import request

    from llamacli.http.params import parse_json_body

    return parse_json_body(await request.get_data(as_text=False))
