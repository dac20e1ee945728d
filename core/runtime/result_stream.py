"""A one-producer, one-consumer stream of results that a thread can read by blocking and an
asyncio task can read by awaiting, without busy-waiting either way.

The engine thread `put`s; the consumer iterates (`for r in stream`) or async-iterates
(`async for r in stream`). `close()` ends the iteration after the buffered items.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class ResultStream(Generic[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._closed = False
        self._cond = threading.Condition()
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

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
            loop, fut = self._waiter
            self._waiter = None
            try:
                loop.call_soon_threadsafe(_set_done, fut)
            except RuntimeError:  # the consumer's event loop is already closed: nobody waits
                pass

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


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
