"""Sleeping on idle (`--sleep-idle-seconds N`), as llama-server does.

After N seconds with no task, the engine is stopped and every reference to the model, its KV
cache and its tokenizer is dropped. The weights are read-only views of the memory-mapped GGUF
file, so once the last view is gone the mapping closes and the resident memory falls back to
about the interpreter's. The next request that needs the model reloads it (the same `load` the
server started with) before it is handled; requests that arrive meanwhile wait for that one
reload.

`GET /health`, `/props`, `/models`, `/v1/models` and `/metrics` (and the web UI's files) are not
tasks: they neither wake the server nor reset the timer. While asleep they answer from a
snapshot taken just before the model was released (`/props` then says `"is_sleeping": true`;
`/metrics` keeps its counters across the sleep).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from quart import g

from llamacli.core.model.loaded import ModelInfo
from llamacli.http.state import ServerState, ServingEngine
from llamacli.http.errors import ApiError
from llamacli.http.heap import return_freed_memory

# GET endpoints that do not count as tasks (llama-server's list, plus the UI's own files)
EXEMPT_PATHS = frozenset({"/health", "/v1/health", "/props", "/models", "/v1/models", "/metrics"})


class IdleSleep:
    """The idle timer of one ServerState and the release/reload of its model."""

    def __init__(
        self,
        state: ServerState,
        idle_seconds: float,
        load: Callable[[], tuple[ServingEngine, ModelInfo]],
        log: Callable[[str], None],
        on_change: Callable[[str], None] = lambda _state: None,
    ) -> None:
        self.state = state
        self.idle_seconds = idle_seconds
        self.load = load
        self.log = log
        self.on_change = on_change  # "sleeping" / "awake": a router child tells its router
        self.sleeping = False
        self.snapshot: dict[str, Any] = {}  # what the exempt endpoints answer while asleep
        self.metrics: Any = None  # the engine's counters, carried over to the reloaded engine
        self.lora_scales: tuple[float, ...] | None = None  # POST /lora-adapters' scales, carried over too
        self._active = 0  # requests being handled that count as tasks
        self._last = time.monotonic()
        self._waking: asyncio.Future[None] | None = None
        self._releasing: asyncio.Future[None] | None = None

    # ---- requests ---------------------------------------------------------------------------
    @staticmethod
    def exempt(method: str, path: str, no_task: bool = False) -> bool:
        return no_task or (method in ("GET", "HEAD") and path in EXEMPT_PATHS)

    async def enter(self, method: str, path: str, no_task: bool = False) -> bool:
        """Called before a request is handled (no_task: the UI's files, a path with no route).
        A task wakes the server (waiting for the reload) and holds the timer until `leave`;
        returns True for an exempt request while asleep (its handler answers from the snapshot)."""
        if self.exempt(method, path, no_task):
            return self.sleeping
        self._active += 1
        g.llama_sleep_counted = True
        self._last = time.monotonic()
        if self.sleeping:
            await self.wake()
        return False

    def leave(self) -> None:
        """Called when a request ends (teardown); streamed tasks are covered by state.tasks."""
        if g.pop("llama_sleep_counted", False):
            self._active -= 1
            self._last = time.monotonic()

    def _busy(self) -> bool:
        st = self.state
        engine = st.engine
        if self._active > 0 or st.tasks:
            return True
        return engine is not None and (engine.n_queued > 0 or any(s.task is not None for s in engine.slots))

    # ---- the timer --------------------------------------------------------------------------
    async def watch(self) -> None:
        """Run for the server's lifetime: put the model to sleep after idle_seconds idle."""
        tick = min(1.0, max(0.05, self.idle_seconds / 10))
        while True:
            await asyncio.sleep(tick)
            if self.sleeping or not self.state.ready or self._waking is not None:
                self._last = time.monotonic()
                continue
            if self._busy():
                self._last = time.monotonic()
            elif time.monotonic() - self._last >= self.idle_seconds:
                try:
                    await self.sleep()
                except Exception as e:  # noqa: BLE001 - stay awake, say why, try again later
                    self.log(f"cannot sleep: {type(e).__name__}: {e}")
                    self._last = time.monotonic()

    async def sleep(self) -> None:
        """Snapshot the exempt answers, detach the engine and model, release them off the loop."""
        from llamacli.http.routes_admin import dormant_snapshot

        st = self.state
        self.snapshot = dormant_snapshot(st)
        engine, _ = st.require()  # watch() sleeps only a ready server
        self.metrics = engine.metrics
        self.lora_scales = engine.lora_scales
        st.engine = None
        st.model = None
        self.sleeping = True
        loop = asyncio.get_running_loop()
        box = [engine]  # the executor's work item must not hold the engine past _release
        del engine
        self._releasing = loop.run_in_executor(None, _release, box)
        try:
            await self._releasing
        finally:
            self._releasing = None
        self.log(f"sleeping after {self.idle_seconds:g} s idle: model and KV cache released")
        self.on_change("sleeping")

    async def wake(self) -> None:
        """Reload the model (once, however many requests wait for it)."""
        if self._waking is None:
            self._waking = asyncio.ensure_future(self._reload())
        waking = self._waking
        try:
            await asyncio.shield(waking)
        finally:
            if waking.done() and self._waking is waking:
                self._waking = None

    async def _reload(self) -> None:
        releasing = self._releasing
        if releasing is not None:  # the model is being released: reload after it is gone
            with contextlib.suppress(Exception):  # a failed release was logged by sleep()
                await releasing
        t0 = time.perf_counter()
        try:
            engine, info = await asyncio.get_running_loop().run_in_executor(None, self.load)
        except Exception as e:  # noqa: BLE001 - the waiting requests get a 503 naming it
            self.log(f"cannot wake up: reloading the model failed: {type(e).__name__}: {e}")
            raise ApiError(503, f"the model could not be reloaded after sleeping: {e}", "unavailable_error") from None
        if self.metrics is not None:
            engine.metrics = self.metrics
        if self.lora_scales is not None and len(self.lora_scales) == len(engine.loras):
            # as llama-server, which reloads with its current adapter list (scales included)
            engine.set_lora_scales(self.lora_scales)
        self.state.set_ready(engine, info)
        self.sleeping = False
        self.snapshot = {}
        self._last = time.monotonic()
        self.log(f"awake: model reloaded in {time.perf_counter() - t0:.1f} s")
        self.on_change("awake")


def _release(box: list[Any]) -> None:
    """Stop the engine and give its memory back: the mapping closes with its last view; malloc
    returns freed heap pages to the system (glibc keeps them otherwise)."""
    engine = box.pop()
    engine.stop(cancel=True)
    del engine
    return_freed_memory()
