"""A one-producer, one-consumer stream of results that a thread can read by blocking and an
asyncio task can read by awaiting, without busy-waiting either way.

The engine thread `put`s; the consumer iterates (`for r in stream`) or async-iterates
(`async for r in stream`). `close()` ends the iteration after the buffered items.

An async consumer is woken through its event loop (`call_soon_threadsafe`: a write to the
loop's self-pipe, after which the writing thread may wait for the GIL while the loop runs).
Within `batched_wakeups()` those wake-ups are collected and sent when the block ends, one call
per event loop. The engine wraps the emission of a step's tokens in it, after the forward: the
16 tokens of a 16-slot step wake the loop once, not 16 times, and a Final written before the
forward (a cancelled task's) still wakes its reader at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class _Deferred(threading.local):
    """The wake-ups held back on this thread (None: outside `batched_wakeups`)."""

    pending: list[_Waiter] | None = None


_deferred = _Deferred()


@contextmanager
def batched_wakeups() -> Iterator[None]:
    """Hold back the async wake-ups of the streams this thread writes to until the block
    ends, then send them, in the order of the writes, with one call per event loop."""
    if _deferred.pending is not None:  # nested: the outer block sends them
        yield
        return
    pending: list[_Waiter] = []
    _deferred.pending = pending
    try:
        yield
    finally:
        _deferred.pending = None
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for loop, fut in pending:
            by_loop.setdefault(loop, []).append(fut)
        for loop, futs in by_loop.items():
            _wake(loop, futs)


def _wake(loop: asyncio.AbstractEventLoop, futs: list[asyncio.Future[None]]) -> None:
    try:
        loop.call_soon_threadsafe(_set_all_done, futs)
    except RuntimeError:  # the consumer's event loop is already closed: nobody waits
        pass


class ResultStream(Generic[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._closed = False
        self._cond = threading.Condition()
        self._waiter: _Waiter | None = None

    def put(self, item: T) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()
            self._wake_async()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._wake_async()

    @property
    def closed(self) -> bool:
        return self._closed

    def _wake_async(self) -> None:
        # called with the lock held
        if self._waiter is not None:
            waiter, self._waiter = self._waiter, None
            pending = _deferred.pending
            if pending is not None:
                pending.append(waiter)
            else:
                _wake(waiter[0], [waiter[1]])

    def get(self, timeout: float | None = None) -> T | None:
        """Next item, blocking; None once closed and drained (or on timeout)."""
        with self._cond:
            while not self._items and not self._closed:
                if not self._cond.wait(timeout):
                    return None
            return self._items.popleft() if self._items else None

    def __iter__(self) -> Iterator[T]:
        while True:
            item = self.get()
            if item is None:
                return
            yield item

    async def aget(self) -> T | None:
        """Next item, awaiting; None once closed and drained."""
        while True:
            with self._cond:
                if self._items:
                    return self._items.popleft()
                if self._closed:
                    return None
                loop = asyncio.get_running_loop()
                fut: asyncio.Future[None] = loop.create_future()
                self._waiter = (loop, fut)
            await fut

    async def __aiter__(self) -> AsyncIterator[T]:
        while True:
            item = await self.aget()
            if item is None:
                return
            yield item


def _set_all_done(futs: list[asyncio.Future[None]]) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_result(None)
