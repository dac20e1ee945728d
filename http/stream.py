"""A streamed request, written once: its tasks' results as typed events, and the SSE response
that runs a route's mapping of those events to its wire format.

    task_events(st, tasks, ping)   Ping | Piece | Done | Failed, as the results arrive
    response(st, tasks, ping, f)   the text/event-stream Response; f(events) yields the bytes

A route writes only `f`: an async generator over the events that yields SSE frames (its own
opening and closing frames included; it may return early, after an error). What happens when
the client goes away is decided here: the response body is closed, which closes the route's
generator and then the events; every task not yet finished is cancelled (its slot is free
within one engine step), also when no result had been read yet.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from quart import Response

from llamacli.core.runtime.tasks import Final, Partial, Task
from llamacli.http.state import ServerState
from llamacli.http.errors import ApiError, to_api_error
from llamacli.http.sse import PING_COMMENT, data, stream_response


@dataclass(frozen=True)
class Ping:
    """Nothing arrived for the ping interval: send a keep-alive."""


@dataclass(frozen=True)
class Piece:
    """A partial result of task `index` (text now final, its tokens, probs, timings, progress)."""

    index: int
    part: Partial


@dataclass(frozen=True)
class Done:
    """Task `index` finished; `final` has the whole answer, why it stopped and its timings."""

    index: int
    final: Final


@dataclass(frozen=True)
class Failed:
    """Task `index` failed after the response had started: the error goes in the stream."""

    index: int
    error: ApiError


Event = Ping | Piece | Done | Failed
Events = AsyncIterator[Event]
Frames = AsyncGenerator[bytes, None]  # what a route's mapping yields: whole SSE messages


def server_frame(ev: Ping | Failed) -> bytes:
    """A Ping or a Failed as llama-server writes them on its native and OpenAI streams: an SSE
    comment; the error JSON as a data message (the other choices of the request go on)."""
    return PING_COMMENT if isinstance(ev, Ping) else data(ev.error.body())


async def task_events(st: ServerState, tasks: Sequence[Task], ping: float | None) -> AsyncGenerator[Event, None]:
    """The results of `tasks` as events, in arrival order (`index`: the task's position)."""
    results = st.results(tasks, ping)
    async with aclosing(results):
        async for i, r in results:
            if i < 0:
                yield Ping()
            elif not isinstance(r, Final):
                yield Piece(i, r)
            elif r.error is not None:
                yield Failed(i, to_api_error(r.error))
            else:
                yield Done(i, r)


async def body(st: ServerState, tasks: Sequence[Task], ping: float | None,
               frames: Callable[[Events], Frames]) -> Frames:
    """The bytes of the response: `frames` over the tasks' events. Closed early (the client
    went away), it closes `frames` first, then the events, which cancels the tasks."""
    try:
        async with aclosing(task_events(st, tasks, ping)) as events, aclosing(frames(events)) as out:
            async for chunk in out:
                yield chunk
    finally:
        # closed while `frames` wrote its opening frames, before any result was read (so
        # ServerState.results, which cancels what it leaves, never ran): cancel them here
        for t in tasks:
            if not t.results.closed:
                t.cancel()
            st.tasks.pop(t.id, None)


def response(st: ServerState, tasks: Sequence[Task], ping: float | None,
             frames: Callable[[Events], Frames]) -> Response:
    """The text/event-stream response of a streamed request."""
    return stream_response(body(st, tasks, ping, frames))
