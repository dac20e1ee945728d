"""Where grammars compile: a few daemon threads with a large stack.

llguidance builds a grammar recursively in native code. On a thread with the default stack
(8 MiB) a chain of 4,000 GBNF rules or of 3,000 JSON-schema `$ref`s overflows it, and a stack
overflow is a SIGSEGV that takes the whole process down. These threads have `STACK_SIZE`
(virtual memory: only the pages a compilation touches become resident), far more than the
inputs `limits.py` lets through can use. A matcher built here is used elsewhere through
`LLMatcher.deep_copy()`, which does not recompile; masks and token steps need no deep stack.

    fut = submit(fn, timeout_s)     # a Future: fn()'s value, or CompileTimeout after timeout_s

A caller that gives up (time limit, cancel) cancels the work if it has not started; work that
has started runs to its end (native code cannot be interrupted), and at most `N_WORKERS` run
at once, so a flood of slow grammars queues behind them instead of taking every core.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import TypeVar

R = TypeVar("R")

STACK_SIZE = 256 * 1024 * 1024
N_WORKERS = 2

_stack_lock = threading.Lock()  # threading.stack_size is process-wide: set it only around our starts


class CompileTimeout(Exception):
    """The work did not finish within the caller's time limit."""


class _Workers:
    def __init__(self, n: int, stack_size: int) -> None:
        self.n = n
        self.stack_size = stack_size
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Future[object]]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()

    def submit(
        self, fn: Callable[[], R], timeout_s: float | None, on_timeout: Callable[[], BaseException]
    ) -> Future[R]:
        out: Future[R] = Future()
        if threading.current_thread() in self._threads:  # already on a compile thread
            _settle(out, fn)
            return out
        job: Future[R] = Future()
        self._jobs.put((fn, job))  # type: ignore[arg-type]
        self._grow()
        timer: threading.Timer | None = None
        if timeout_s is not None:
            def expire() -> None:
                job.cancel()  # no effect once started: it then finishes in the background
                _set(out, exc=on_timeout())

            timer = threading.Timer(timeout_s, expire)
            timer.daemon = True
            timer.start()

        def done(f: Future[R]) -> None:
            if timer is not None:
                timer.cancel()
            if f.cancelled():
                _set(out, exc=on_timeout())
            elif f.exception() is not None:
                _set(out, exc=f.exception())
            else:
                _set(out, value=f.result())

        job.add_done_callback(done)
        out.add_done_callback(lambda f: job.cancel() if f.cancelled() else None)  # the caller gave up
        return out

    def _grow(self) -> None:
        with self._lock:
            if self._jobs.qsize() <= self._idle or len(self._threads) >= self.n:
                return
            with _stack_lock:
                old = threading.stack_size()
                try:
                    threading.stack_size(self.stack_size)
                except (ValueError, RuntimeError):  # pragma: no cover - a platform without it
                    pass
                try:
                    t = threading.Thread(target=self._loop, name=f"llama-grammar-{len(self._threads)}", daemon=True)
                    self._threads.append(t)
                    self._idle += 1
                    t.start()
                finally:
                    threading.stack_size(old)

    def _loop(self) -> None:
        while True:
            fn, fut = self._jobs.get()
            with self._lock:
                self._idle -= 1
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn())
                    except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                        fut.set_exception(e)
            finally:
                with self._lock:
                    self._idle += 1


def _settle(out: Future[R], fn: Callable[[], R]) -> None:
    try:
        out.set_result(fn())
    except BaseException as e:  # noqa: BLE001 - handed to whoever waits on `out`
        out.set_exception(e)


def _set(out: Future[R], value: object = None, exc: BaseException | None = None) -> None:
    """Complete ``out`` unless the other side (result or time limit) already did."""
    try:
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(value)  # type: ignore[arg-type]
    except InvalidStateError:
        pass


_workers = _Workers(N_WORKERS, STACK_SIZE)


def submit(
    fn: Callable[[], R],
    timeout_s: float | None = None,
    on_timeout: Callable[[], BaseException] = lambda: CompileTimeout("the compilation took too long"),
) -> Future[R]:
    """Run ``fn()`` on a compile thread (large stack). The future holds its value or its
    exception, or ``on_timeout()`` when ``timeout_s`` seconds pass first (None: no limit).
    Cancelling the future cancels the work if it has not started."""
    return _workers.submit(fn, timeout_s, on_timeout)

