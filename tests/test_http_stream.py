"""http/stream.py: a streamed request's results as events, and the response body that closes
everything when the client leaves. Tasks are fed by hand (no engine, no model)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from llamacli.core.errors import InvalidRequest
from llamacli.core.runtime.tasks import Final, Partial, Task
from llamacli.http import stream
from llamacli.http.state import ServerState
from llamacli.http.errors import ApiError
from llamacli.http.stream import Done, Event, Events, Failed, Frames, Piece, Ping


def running(st: ServerState, n: int) -> list[Task]:
    """n tasks as ServerState.submit leaves them: in flight, nothing produced yet."""
    tasks = [Task([1, 2, 3]) for _ in range(n)]
    for t in tasks:
        st.tasks[t.id] = t
    return tasks


def finish(task: Task, *results: Partial | Final) -> None:
    for r in results:
        task.results.put(r)
    task.results.close()


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [ev async for ev in events]


def test_results_become_pieces_done_and_failed_per_task() -> None:
    st = ServerState()
    ok, bad = running(st, 2)
    part = Partial("Hi", [7])
    final = Final("Hi", [7], [1, 2, 3], "eos")
    finish(ok, part, final)
    finish(bad, Final("", [], [1, 2, 3], "error", error=InvalidRequest("the prompt is empty")))

    got = asyncio.run(collect(stream.task_events(st, [ok, bad], None)))
    # each task's events keep their order; the two tasks may interleave
    assert [ev for ev in got if getattr(ev, "index", None) == 0] == [Piece(0, part), Done(0, final)]
    (failed,) = [ev for ev in got if getattr(ev, "index", None) == 1]
    assert isinstance(failed, Failed) and failed.index == 1
    assert (failed.error.status, failed.error.message) == (400, "the prompt is empty")
    assert st.tasks == {}  # both ended: no longer in flight


def test_a_quiet_stream_pings() -> None:
    st = ServerState()
    (task,) = running(st, 1)
    final = Final("", [], [1, 2, 3], "eos")

    async def go() -> list[Event]:
        asyncio.get_running_loop().call_later(0.3, finish, task, final)
        return await collect(stream.task_events(st, [task], ping=0.05))

    got = asyncio.run(go())
    assert got[-1] == Done(0, final)
    assert len(got) >= 2 and all(ev == Ping() for ev in got[:-1])


def test_server_frame_is_llama_servers_ping_comment_and_error_message() -> None:
    assert stream.server_frame(Ping()) == b": ping\n\n"
    err = ApiError(400, "bad \u00e9", "invalid_request_error")
    assert stream.server_frame(Failed(0, err)) == (
        b'data: {"error":{"code":400,"message":"bad \xc3\xa9","type":"invalid_request_error"}}\n\n'
    )


def test_a_client_that_leaves_closes_the_route_and_cancels_the_tasks() -> None:
    st = ServerState()
    tasks = running(st, 2)
    closed: list[str] = []

    async def frames(events: Events) -> Frames:
        yield b"head\n\n"
        try:
            async for ev in events:
                yield repr(ev).encode()
        finally:
            closed.append("frames")

    async def go() -> tuple[bytes, list[str], list[bool]]:
        tasks[0].results.put(Partial("a", [5]))  # one piece, then nothing: the tasks still run
        body = stream.body(st, tasks, None, frames)
        head = await body.__anext__()
        piece = await body.__anext__()
        await body.aclose()  # what the server does when the client goes away
        # at once, not when the event loop gets round to finalizing abandoned generators
        return head + piece, list(closed), [t.cancelled.is_set() for t in tasks]

    sent, closed_then, cancelled = asyncio.run(go())
    assert sent == b"head\n\n" + repr(Piece(0, Partial("a", [5]))).encode()
    assert closed_then == ["frames"]
    assert cancelled == [True, True]  # the engine frees their slots
    assert st.tasks == {}


def test_a_client_that_leaves_during_the_opening_frames_cancels_the_tasks() -> None:
    """Before any result was read (ServerState.results never started), the tasks are still
    cancelled and no longer counted in flight."""
    st = ServerState()
    tasks = running(st, 1)

    async def frames(events: Events) -> Frames:
        yield b"head\n\n"
        async for ev in events:
            yield repr(ev).encode()

    async def go() -> list[bool]:
        body = stream.body(st, tasks, None, frames)
        assert await body.__anext__() == b"head\n\n"
        await body.aclose()
        return [t.cancelled.is_set() for t in tasks]

    assert asyncio.run(go()) == [True]
    assert st.tasks == {}


def test_a_route_that_ends_after_an_error_cancels_the_other_tasks() -> None:
    st = ServerState()
    failing, other = running(st, 2)
    finish(failing, Final("", [], [1, 2, 3], "error", error=RuntimeError("boom")))

    async def frames(events: Events) -> Frames:
        async for ev in events:
            if isinstance(ev, Failed):
                yield ev.error.message.encode()
                return

    async def go() -> list[bytes]:
        return [chunk async for chunk in stream.body(st, [failing, other], None, frames)]

    # an unknown exception is a 500 that names only its type (http/errors.py)
    assert asyncio.run(go()) == [b"internal server error (RuntimeError); see the server log"]
    assert other.cancelled.is_set() and not failing.cancelled.is_set()
    assert st.tasks == {}


def test_the_response_is_an_uncached_event_stream_without_a_time_limit() -> None:
    st = ServerState()
    (task,) = running(st, 1)
    finish(task, Final("", [], [1, 2, 3], "eos"))

    async def frames(events: Events) -> Frames:
        async for ev in events:
            if isinstance(ev, Done):
                yield b"data: done\n\n"

    async def go() -> tuple[str, str | None, object, bytes]:
        resp = stream.response(st, [task], None, frames)
        return resp.content_type, resp.headers.get("Cache-Control"), resp.timeout, await resp.get_data(as_text=False)

    ctype, cache, timeout, data = asyncio.run(go())
    assert ctype.startswith("text/event-stream") and cache == "no-cache" and timeout is None
    assert data == b"data: done\n\n"
