"""Router mode's supervisor: one child `llama serve` process per loaded model.

Each child runs on a loopback port it picks itself (`--port 0`; the router reads the URL from
the child's first log line), with the router's settings plus the model's own. The supervisor
lives on the router's event loop: it starts children as asyncio subprocesses, reads their
output line by line (kept as each model's last log lines, and echoed on the router's stderr
prefixed with the model's name), polls `/health` until the model is ready, and waits for the
process to exit. A child that exits without being asked is reported failed, with its exit code
and last log lines, and can be loaded again; the router carries on.

Status values and events follow llama-server (`GET /models`, `GET /models/sse`): unloaded,
loading, loaded, sleeping (a child with --sleep-idle-seconds says so on its output, see
http/router_child.py), plus unloading (asked to stop, not yet exited). At most `models_max`
children run; loading one more first unloads the least recently used (the one whose last POST
request is oldest). A request that races an unload waits for the child to exit and loads the
model again (autoload permitting) instead of failing.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamacli.http.errors import ApiError
from llamacli.http.router_child import ENV as CHILD_ENV
from llamacli.http.router_child import parse_state

URL_LINE = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
LOG_LINES = 20  # last lines of a child's output kept for GET /models
HEALTH_POLL = 0.1  # seconds between /health polls while a child loads
DEFAULT_STOP_TIMEOUT = 10.0  # seconds a child may take to exit after SIGTERM (then SIGKILL)
READY_TRIES = 3  # loads a request waiting for its model tries when unloads keep racing it


@dataclass
class ModelSpec:
    """A model the router can serve, and how to start its child."""

    name: str
    args: list[str]  # `llama serve` arguments: the model (-m PATH, -hf REPO) and its settings
    path: str = ""  # the model file, as listed
    source: str = "preset"  # cache, models_dir, preset
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    load_on_startup: bool = False
    stop_timeout: float = DEFAULT_STOP_TIMEOUT


@dataclass
class Instance:
    """The state of one model: its status and, while it runs, its child process."""

    spec: ModelSpec
    status: str = "unloaded"  # unloaded, loading, loaded, sleeping, unloading
    proc: asyncio.subprocess.Process | None = None
    url: str = ""
    args: list[str] = field(default_factory=list)  # the child's command line, as last started
    last_used: float = 0.0
    exit_code: int | None = None
    failed: bool = False  # the last child exited without being asked to (or never got ready)
    stopping: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # the child's /v1/models entry, once loaded
    log: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def running(self) -> bool:
        """A child process exists (it may be on its way out: unloading)."""
        return self.status in ("loading", "loaded", "sleeping", "unloading")

    def status_json(self) -> dict[str, Any]:
        """`status` of GET /models: llama-server's shape, plus the last log lines of a failure."""
        out: dict[str, Any] = {"value": self.status, "args": self.args}
        if self.failed and self.status == "unloaded":
            out.update(failed=True, exit_code=self.exit_code, log=list(self.log))
        return out


class Supervisor:
    """Every model's Instance; starts, watches and stops the children (on the event loop)."""

    def __init__(
        self,
        specs: list[ModelSpec],
        command: list[str],
        models_max: int = 4,
        log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
        http: Any = None,
    ) -> None:
        self._names = name_index(specs)  # name or alias -> name
        self.command = command  # how to run `llama serve` (argv prefix)
        self.instances = {spec.name: Instance(spec, args=self.child_args(spec)) for spec in specs}
        self.models_max = models_max
        self.log = log
        self.http = http  # an httpx.AsyncClient for health polls
        self._changed = asyncio.Condition()
        self._starting = asyncio.Lock()  # one load decision at a time (two requests, one child)
        self._subscribers: set[asyncio.Queue[dict[str, Any] | None]] = set()

    def child_args(self, spec: ModelSpec) -> list[str]:
        """The child's command line: on loopback, a port of its choosing, the model's name."""
        return [*self.command, *spec.args, "--host", "127.0.0.1", "--port", "0", "--alias", spec.name]

    # ---- lookup -----------------------------------------------------------------------------
    def get(self, name: str) -> Instance | None:
        canonical = self._names.get(name)
        return self.instances[canonical] if canonical is not None else None

    def running(self) -> list[Instance]:
        return [i for i in self.instances.values() if i.running]

    # ---- events (GET /models/sse) ---------------------------------------------------------
    def subscribe(self) -> asyncio.Queue[dict[str, Any] | None]:
        """A queue of status events; None ends the stream."""
        q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[dict[str, Any] | None]) -> None:
        self._subscribers.discard(q)

    def end_streams(self) -> None:
        """End every event stream (router shutdown: the server need not wait for them)."""
        for q in self._subscribers:
            q.put_nowait(None)

    def _broadcast(self, event: dict[str, Any]) -> None:
        for q in self._subscribers:
            q.put_nowait(event)

    async def _set(self, inst: Instance, status: str, **data: Any) -> None:
        inst.status = status
        self._broadcast({"model": inst.spec.name, "event": "model_status", "data": {"status": status, **data}})
        async with self._changed:
            self._changed.notify_all()

    # ---- GET /models?reload=1 ----------------------------------------------------------------
    async def reload(self, specs: list[ModelSpec]) -> None:
        """Take a freshly read model list, as llama-server: a running model whose source is gone
        or whose settings changed is unloaded; the others take their new settings (and lose a
        past failure); new models are added, and loaded when marked load-on-startup. Raises
        ValueError (nothing changed) when two models claim one name."""
        names = name_index(specs)
        fresh = {s.name: s for s in specs}
        added: list[str] = []
        async with self._starting:
            for inst in self.running():
                if fresh.get(inst.spec.name) != inst.spec:
                    await self.unload(inst.spec.name, wait=True)
            instances: dict[str, Instance] = {}
            for name, spec in fresh.items():
                old = self.instances.get(name)
                if old is None:
                    inst = Instance(spec)
                    added.append(name)
                else:
                    inst = old
                    if not inst.running:
                        inst.failed, inst.exit_code = False, None
                inst.spec = spec
                if not inst.running:
                    inst.args = self.child_args(spec)
                instances[name] = inst
            self.instances, self._names = instances, names
        self._broadcast({"model": "*", "event": "models_reload"})
        for name in added:
            if self.instances[name].spec.load_on_startup:
                await self.load(name)

    # ---- load / unload ----------------------------------------------------------------------
    async def load(self, name: str, why: str = "") -> Instance:
        """Start the model's child (after unloading the least recently used one when
        models_max children run; after the old child exited when it is unloading). Returns at
        once; the child loads in the background. `why` goes in the log line."""
        inst = self.get(name)
        if inst is None:
            raise ApiError(404, "model is not found", "not_found_error")
        async with self._starting:
            if inst.status == "unloading":
                await self.wait_until(inst, lambda i: i.status != "unloading")
            if not inst.running:
                await self._make_room(inst)
                await self._start(inst, why)
        return inst

    async def _start(self, inst: Instance, why: str = "") -> None:
        inst.args = self.child_args(inst.spec)
        inst.last_used = time.monotonic()
        inst.failed, inst.exit_code, inst.stopping, inst.url, inst.info = False, None, False, "", {}
        inst.log.clear()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{CHILD_ENV: "1"})
        try:
            inst.proc = await asyncio.create_subprocess_exec(
                *inst.args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=env,
            )
        except OSError as e:
            inst.failed, inst.exit_code = True, None
            inst.log.append(f"cannot start {inst.args[0]}: {e}")
            raise ApiError(500, f"cannot start a server for model {inst.spec.name!r}: {e}") from None
        what = f", loading {inst.spec.path}" if inst.spec.path else ""
        self.log(f"model {inst.spec.name}: starting (pid {inst.proc.pid}){what}{f' ({why})' if why else ''}")
        await self._set(inst, "loading")
        inst.tasks = [asyncio.ensure_future(self._read(inst, inst.proc)), asyncio.ensure_future(self._watch(inst, inst.proc))]

    async def _make_room(self, inst: Instance) -> None:
        if self.models_max <= 0:
            return
        while True:
            others = [i for i in self.running() if i is not inst]
            if len(others) < self.models_max:
                return
            lru = min(others, key=lambda i: i.last_used)
            self.log(f"models_max ({self.models_max}) reached: unloading the least recently used, {lru.spec.name}")
            await self.unload(lru.spec.name, wait=True)

    async def unload(self, name: str, wait: bool = False) -> None:
        """Ask the child to stop (SIGTERM; SIGKILL after the model's stop timeout)."""
        inst = self.get(name)
        if inst is None or inst.proc is None or not inst.running:
            return
        proc = inst.proc
        if not inst.stopping:
            inst.stopping = True
            _signal(proc, signal.SIGTERM)
            inst.tasks.append(asyncio.ensure_future(self._kill_after(inst, proc, inst.spec.stop_timeout)))
            self.log(f"model {inst.spec.name}: unloading (pid {proc.pid})")
            await self._set(inst, "unloading")  # until the child has exited (_watch says unloaded)
        if wait:
            await self.wait_until(inst, lambda i: i.proc is not proc or not i.running)

    async def _kill_after(self, inst: Instance, proc: asyncio.subprocess.Process, seconds: float) -> None:
        try:
            await asyncio.wait_for(proc.wait(), seconds)
        except asyncio.TimeoutError:
            self.log(f"model {inst.spec.name}: no exit {seconds:g} s after SIGTERM; killing it")
            _signal(proc, signal.SIGKILL)

    async def stop_all(self) -> None:
        """Stop every child and wait for them (router shutdown)."""
        for inst in self.running():
            await self.unload(inst.spec.name)
        for inst in list(self.instances.values()):
            if inst.tasks:
                await asyncio.gather(*inst.tasks, return_exceptions=True)

    async def wait_until(self, inst: Instance, pred: Callable[[Instance], bool]) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: pred(inst))

    async def ready(self, name: str, autoload: bool, why: str = "") -> Instance:
        """The model's instance, ready for requests: loaded (or sleeping: the child wakes
        itself). Loads it when autoload allows; waits while it loads. A model unloaded while
        the request waited (an unload raced it) is waited for and loaded again, a few times at
        most; only a child that failed is reported as a failure."""
        inst = self.get(name)
        if inst is None:
            raise ApiError(400, f"model '{name}' not found")
        for _ in range(READY_TRIES):
            if inst.status == "unloading":
                await self.wait_until(inst, lambda i: i.status != "unloading")
            if not inst.running:
                if not autoload:
                    raise ApiError(400, "model is not loaded")
                await self.load(inst.spec.name, why)
            proc = inst.proc
            await self.wait_until(inst, lambda i: i.status != "loading" or i.proc is not proc)
            if inst.status in ("loaded", "sleeping"):
                return inst
            if inst.failed and inst.status == "unloaded":
                why_failed = f" (exit code {inst.exit_code}): {inst.log[-1]}" if inst.log else ""
                raise ApiError(500, f"model '{inst.spec.name}' failed to load{why_failed}", "server_error")
        raise ApiError(503, f"model '{inst.spec.name}' was unloaded while this request waited for it", "unavailable_error")

    # ---- watching a child ------------------------------------------------------------------
    async def _read(self, inst: Instance, proc: asyncio.subprocess.Process) -> None:
        """The child's output: echoed, kept, and scanned for its URL and state lines."""
        assert proc.stdout is not None
        while True:
            try:
                raw = await proc.stdout.readline()
            except ValueError:  # a line over the reader's limit: take it in pieces
                raw = await proc.stdout.read(1 << 16)
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            state = parse_state(line)
            if state is not None:
                if inst.proc is proc and inst.status in ("loaded", "sleeping"):
                    await self._set(inst, "sleeping" if state == "sleeping" else "loaded")
                continue
            inst.log.append(line)
            print(f"[{inst.spec.name}] {line}", file=sys.stderr, flush=True)
            m = URL_LINE.search(line)
            if m and not inst.url and inst.proc is proc:
                inst.url = m.group(1)
                inst.tasks.append(asyncio.ensure_future(self._poll_health(inst, proc)))

    async def _poll_health(self, inst: Instance, proc: asyncio.subprocess.Process) -> None:
        while inst.proc is proc and inst.status == "loading" and proc.returncode is None:
            try:
                r = await self.http.get(inst.url + "/health", timeout=5.0)
                if r.status_code == 200:
                    inst.info = await self._child_info(inst)
                    if inst.proc is proc and inst.status == "loading":
                        self.log(f"model {inst.spec.name}: loaded at {inst.url}")
                        await self._set(inst, "loaded", info=inst.info)
                    return
            except Exception:  # noqa: BLE001 - not up yet, or exiting: _watch reports that
                pass
            await asyncio.sleep(HEALTH_POLL)

    async def _child_info(self, inst: Instance) -> dict[str, Any]:
        """The child's own /v1/models entry (its metadata), merged into GET /models."""
        try:
            r = await self.http.get(inst.url + "/v1/models", timeout=5.0)
            data = r.json().get("data") or [{}]
            return dict(data[0])
        except Exception:  # noqa: BLE001 - informational only
            return {}

    async def _watch(self, inst: Instance, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if inst.proc is not proc:
            return
        exit_code = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as shells say
        inst.exit_code = exit_code
        inst.failed = not inst.stopping
        inst.proc, inst.url = None, ""
        if inst.failed:
            self.log(f"model {inst.spec.name}: the server exited unexpectedly (exit code {exit_code}); "
                     f"last output: {inst.log[-1] if inst.log else '(none)'}")
        else:
            self.log(f"model {inst.spec.name}: unloaded")
        data: dict[str, Any] = {"exit_code": exit_code}
        if inst.failed:
            data.update(failed=True, log=list(inst.log))
        await self._set(inst, "unloaded", **data)


def name_index(specs: list[ModelSpec]) -> dict[str, str]:
    """Every name and alias -> the model's name; ValueError when two models claim one."""
    names: dict[str, str] = {}
    for spec in specs:
        for n in (spec.name, *spec.aliases):
            if n in names:
                raise ValueError(f"model name {n!r} is given twice (by {names[n]!r} and {spec.name!r})")
            names[n] = spec.name
    return names


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    if proc.returncode is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
