"""The server's state behind one app: the engine (typed by `ServingEngine`, the part of the
engine the HTTP layer uses), the model's facts, the tasks in flight and the executor.

`ServerState` starts empty (the model is still loading: every endpoint answers 503) and
becomes ready with `set_ready(engine, model_info)`. Importing this module loads no engine code
(`llama serve` imports it before it opens its port).

Every task's end (finished, or cancelled: a client that went away, a shutdown) is logged when
the engine reports it (http/tasklog.py), whether or not a response still reads the task.
"""

from __future__ import annotations

from llamacli.core.multimodal.limits import MediaLimits  # light: no numba before the port opens

import asyncio
import dataclasses
import os
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from llamacli.core.model.loaded import ModelInfo
from llamacli.http.config import ServerConfig

if TYPE_CHECKING:
    from llamacli.core.multimodal.media_encoder import Encoders
    from llamacli.core.tools import ToolBox
    from llamacli.core.model.state.lora import LoraAdapter
    from llamacli.core.runtime.engine import EngineConfig, Metrics
    from llamacli.core.runtime.slot import Slot
    from llamacli.core.runtime.slot_store import SaveResult
    from llamacli.core.runtime.tasks import Final, Partial, Result, Task, TaskParams

R = TypeVar("R")

PING = "ping"  # what `ServerState.results` yields (index -1) when a stream has been quiet


@runtime_checkable
class ServingEngine(Protocol):
    """What the HTTP layer uses of core.runtime.engine.Engine (the tests' fake has the same)."""

    config: EngineConfig
    n_ctx_slot: int
    slots: list[Slot]
    metrics: Metrics
    loras: list[LoraAdapter]

    @property
    def n_queued(self) -> int: ...

    @property
    def lora_scales(self) -> tuple[float, ...]: ...

    def submit(self, task: Task) -> Task: ...

    def prepare(self, task: Task) -> Future[Any] | None: ...

    def call(self, fn: Callable[[], R]) -> R: ...

    def set_lora_scales(self, scales: tuple[float, ...]) -> None: ...

    def save_slot(self, slot_id: int, directory: str, filename: str) -> SaveResult: ...

    def restore_slot(self, slot_id: int, directory: str, filename: str) -> SaveResult: ...

    def erase_slot(self, slot_id: int) -> int: ...

    def stop(self, cancel: bool = True) -> None: ...


class ServerState:
    """The engine, the model and the settings behind one app."""

    def __init__(self, config: ServerConfig | None = None, tools: ToolBox | None = None) -> None:
        self.config = config or ServerConfig()
        self.tools = tools  # --tools / MCP servers: GET/POST /tools (http/routes_tools.py); None: 403
        self.engine: ServingEngine | None = None
        self.model: ModelInfo | None = None
        n = self.config.threads_http if self.config.threads_http > 0 else min(8, (os.cpu_count() or 2) + 2)
        self.executor = ThreadPoolExecutor(max_workers=n, thread_name_prefix="llama-http")
        self.tasks: dict[int, Task] = {}  # in flight by task id, for graceful shutdown
        self.controllable: dict[str, list[Task]] = {}  # completion id -> its tasks, for .../control
        self.closing = False  # set by cancel_all: responses end without waiting for the engine
        self._close_waiters: set[asyncio.Future[None]] = set()
        self.started = time.time()
        self.sleep: Any = None  # an IdleSleep with --sleep-idle-seconds (http/sleep.py)
        self._pumps: set[asyncio.Task[None]] = set()  # readers of task streams (`results`)
        self.mtmd: Encoders | None = None  # -mm: the projector's encoders (set by the loader)
        self.media_limits = MediaLimits()  # --image-max-pixels / --image-max-bytes / --audio-max-seconds

    @property
    def modalities(self) -> frozenset[str]:
        """The media kinds the projector takes ("image", "audio"); empty without one."""
        return self.mtmd.modalities if self.mtmd is not None else frozenset()

    # ---- readiness ------------------------------------------------------------------------
    def set_ready(self, engine: ServingEngine, model: ModelInfo) -> None:
        self.model = model
        self.engine = engine

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.model is not None

    def require(self) -> tuple[ServingEngine, ModelInfo]:
        if self.engine is None or self.model is None:
            from llamacli.http.errors import LOADING

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

    async def submit(self, tasks: Sequence[Task]) -> list[Task]:
        """Submit tasks (all or none: if one is refused, the others are cancelled). What is
        slow in a submission, compiling a grammar (seconds for a large one), runs off the
        event loop first (`Engine.prepare`): the loop, /health included, never waits for it."""
        engine, _ = self.require()
        compiled: dict[int, Any] = {}  # per params object: the n tasks of a request share one
        for t in tasks:
            if id(t.params) not in compiled:
                fut = engine.prepare(t)
                compiled[id(t.params)] = None if fut is None else await asyncio.wrap_future(fut)
        if self.require()[0] is engine:  # not put to sleep and woken meanwhile
            for t in tasks:
                t.compiled_grammar = compiled[id(t.params)]
        return self._submit_now(tasks)

    def _submit_now(self, tasks: Sequence[Task]) -> list[Task]:
        """`submit` on this thread: a grammar not compiled yet compiles here, waiting for it."""
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
        from llamacli.core.runtime.tasks import TaskParams

        c = self.config
        return TaskParams(n_predict=c.n_predict, sampling=c.sampling, cache_prompt=c.cache_prompt, n_keep=c.n_keep,
                          speculative=c.speculative)

    async def task_params(self, body: Any) -> TaskParams:
        """The request's TaskParams over the server's defaults, read off the event loop
        (string logit_bias keys are tokenized)."""
        from llamacli.http.params import lora_scales, task_params

        engine, model = self.require()
        base = self.base_params()
        c = self.config
        params = await self.blocking(
            lambda: task_params(body, base, model.tokenizer, model.n_vocab, c.sampling_limits, c.stop_limits)
        )
        if "lora" in body and body.raw("lora"):  # [] (or null): the server's current scales
            params.lora = lora_scales(body.raw("lora"), len(engine.loras))
        return params

    def text_limit(self) -> int:
        """The most characters of text one request may have tokenized (http/limits.py)."""
        from llamacli.http.limits import text_limit

        engine, model = self.require()
        return text_limit(engine.config.n_ctx, model.tokenizer)

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

    async def results(self, tasks: Sequence[Task], ping: float | None = None) -> AsyncGenerator[tuple[int, Any], None]:
        """(index, result) of several tasks as they arrive. Leaving early (client gone, error)
        cancels every task that has not finished: its slot is free within one step. On
        shutdown (`cancel_all`) the tasks still running end at once with a `cancelled` Final
        carrying a 503 error (errors.cut_by_shutdown), so that no route reports a cut answer as
        finished; a cancelled Final from the engine (it was stopped) carries the same error.
        With `ping` (seconds), `(-1, PING)` comes whenever nothing else did for that long.
        Each task's Final is logged as it arrives, also after the caller left (module docstring)."""
        from llamacli.core.runtime.tasks import Final, Partial
        from llamacli.http.errors import cut_by_shutdown
        from llamacli.http.tasklog import log_task

        queue: asyncio.Queue[tuple[int, Result | None]] = asyncio.Queue()

        async def pump(i: int, task: Task) -> None:
            """Reads the task's stream to its end (the engine ends a cancelled task within a step)."""
            async for r in task.results:
                if isinstance(r, Final) and r.embedding is None:
                    log_task(task.id, r, self.config.log_format)
                await queue.put((i, r))
            await queue.put((i, None))

        for i, t in enumerate(tasks):
            p = asyncio.ensure_future(pump(i, t))
            self._pumps.add(p)
            p.add_done_callback(self._pumps.discard)
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
                            yield i, Final("".join(texts[i]), toks[i], list(t.prompt_tokens), "cancelled",
                                           error=cut_by_shutdown())
                    return
                i, r = getter.result()
                if r is None:
                    done[i] = True
                    self.tasks.pop(tasks[i].id, None)
                    continue
                if isinstance(r, Partial):
                    texts[i].append(r.content)
                    toks[i].extend(r.tokens)
                elif isinstance(r, Final) and r.embedding is None and r.stop_type == "cancelled" and r.error is None:
                    # read here, a cancelled task was cut by the server (shutdown, the engine
                    # stopping), never by its client (who no longer reads): say so
                    r = dataclasses.replace(r, error=cut_by_shutdown())
                yield i, r
        finally:
            self._close_waiters.discard(closing)
            if getter is not None:
                getter.cancel()
            for t in tasks:
                if not t.results.closed:
                    t.cancel()
                self.tasks.pop(t.id, None)
            # the pumps of unfinished tasks run on to log their Final (asyncio.run cancels what
            # is left when the server's loop ends)

    async def collect(self, tasks: Sequence[Task]) -> list[tuple[list[Partial], Final]]:
        """Wait for every task; per task its Partials and its Final (errors raised)."""
        from llamacli.core.runtime.tasks import Final

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
