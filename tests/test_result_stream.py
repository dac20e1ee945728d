"""ResultStream: an asyncio consumer woken by another thread's writes; inside
`batched_wakeups` a step's writes wake each event loop once, when the block ends."""

from __future__ import annotations

import asyncio
import threading

from llamacli.core.runtime.result_stream import ResultStream, batched_wakeups


class CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the wake-ups other threads send it."""

    def __init__(self) -> None:
        super().__init__()
        self.wakeups = 0

    def call_soon_threadsafe(self, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        self.wakeups += 1
        return super().call_soon_threadsafe(*args, **kwargs)


def _read_all(streams: list[ResultStream[int]], write: threading.Event) -> tuple[list[list[int]], int]:
    """Each stream's items, read by one asyncio task per stream, while another thread writes;
    and how many wake-ups the loop received."""
    loop = CountingLoop()

    async def read(s: ResultStream[int]) -> list[int]:
        return [x async for x in s]

    async def main() -> list[list[int]]:
        readers = [asyncio.ensure_future(read(s)) for s in streams]
        await asyncio.sleep(0.05)  # every reader awaits an empty stream
        write.set()
        return list(await asyncio.gather(*readers))

    try:
        return loop.run_until_complete(main()), loop.wakeups
    finally:
        loop.close()


def _writer(streams: list[ResultStream[int]], write: threading.Event, batched: bool) -> threading.Thread:
    def run() -> None:
        write.wait()
        for step in range(3):  # three "steps", each putting one item into every stream
            if batched:
                with batched_wakeups():
                    for i, s in enumerate(streams):
                        s.put(10 * i + step)
            else:
                for i, s in enumerate(streams):
                    s.put(10 * i + step)
        with batched_wakeups():
            for s in streams:
                s.close()

    t = threading.Thread(target=run)
    t.start()
    return t


def test_batched_wakeups_wake_the_loop_once_per_block_and_lose_nothing() -> None:
    for batched in (False, True):
        streams: list[ResultStream[int]] = [ResultStream() for _ in range(8)]
        write = threading.Event()
        t = _writer(streams, write, batched)
        got, wakeups = _read_all(streams, write)
        t.join()
        assert got == [[10 * i + step for step in range(3)] for i in range(8)]
        if batched:  # at most one per block: 3 steps + the closing block
            assert 1 <= wakeups <= 4
        else:  # unbatched, the first step alone wakes each of the 8 waiting readers
            assert wakeups >= 8


def test_batched_wakeups_hold_back_until_the_block_ends() -> None:
    s: ResultStream[int] = ResultStream()
    loop = asyncio.new_event_loop()
    inside = threading.Event()
    release = threading.Event()
    woke_inside: list[bool] = []

    def writer() -> None:
        with batched_wakeups():
            s.put(1)
            inside.set()
            release.wait(5)
        s.close()

    async def main() -> list[int]:
        reader = asyncio.ensure_future(s.aget())
        await asyncio.sleep(0.02)  # the reader awaits
        threading.Thread(target=writer).start()
        await loop.run_in_executor(None, inside.wait, 5)
        await asyncio.sleep(0.05)
        woke_inside.append(reader.done())
        release.set()
        first = await reader
        return [first] + [x async for x in s]

    try:
        assert loop.run_until_complete(main()) == [1]
    finally:
        loop.close()
    assert woke_inside == [False]


def test_nested_blocks_send_at_the_outer_end() -> None:
    s: ResultStream[int] = ResultStream()
    loop = CountingLoop()

    async def main() -> list[int]:
        reader = asyncio.ensure_future(s.aget())
        await asyncio.sleep(0.02)

        def writer() -> None:
            with batched_wakeups():
                with batched_wakeups():
                    s.put(7)
                assert not reader.done()
            s.close()

        await loop.run_in_executor(None, writer)
        return [await reader]

    try:
        assert loop.run_until_complete(main()) == [7]
    finally:
        loop.close()
    assert loop.wakeups >= 1
