"""http/state.py: the result streams of ServerState: leaving early cancels, shutdown ends
responses at once, SSE pings while the engine is quiet."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.http.config import ServerConfig
from llamacli.http.state import ServerState, ServingEngine
from tests.fakes import BOS, FakeEngine, FakeTokenizer, fake_model
from tests.http_app_client import make


def test_leaving_a_stream_early_cancels_its_tasks() -> None:
    tok = FakeTokenizer()
    eng = FakeEngine(tokenizer=tok, delay=0.05, reply="x" * 200)
    st = ServerState(ServerConfig())
    st.set_ready(eng, fake_model(tok))

    async def go() -> Task:
        (task,) = st.submit([Task([BOS, 20], TaskParams())])
        agen = st.results([task])
        await agen.__anext__()
        await agen.aclose()  # what Quart does when the client disconnects
        while not task.results.closed:  # let the engine finish while this loop still runs
            await asyncio.sleep(0.01)
        return task

    task = asyncio.run(go())
    assert task.cancelled.is_set()
    finals = [r for r in task.results if isinstance(r, Final)]
    assert finals and finals[0].stop_type == "cancelled" and not st.tasks


def test_shutdown_ends_responses_without_waiting_for_the_engine() -> None:
    tok = FakeTokenizer()
    eng = FakeEngine(tokenizer=tok, delay=0.2, reply="x" * 100)
    st = ServerState(ServerConfig())
    st.set_ready(eng, fake_model(tok))

    async def go() -> list[Any]:
        (task,) = st.submit([Task([BOS, 20], TaskParams())])
        out = []
        async for _, r in st.results([task]):
            out.append(r)
            if len(out) == 1:
                asyncio.get_running_loop().call_soon(st.cancel_all)  # what a shutdown signal does
        while not task.results.closed:
            await asyncio.sleep(0.05)
        return out

    t0 = time.monotonic()
    out = asyncio.run(go())
    assert isinstance(out[-1], Final) and out[-1].stop_type == "cancelled" and out[-1].content == "x"
    assert time.monotonic() - t0 < 2


def test_sse_pings_while_the_engine_is_quiet() -> None:
    c, _ = make(ServerConfig(), delay=0.3, reply="ab")
    _, text, _ = c.post("/completion", {"prompt": "a", "stream": True, "sse_ping_interval": 0.1})
    assert ": ping\n\n" in text and text.count("data: ") == 3
    _, text, _ = c.post("/v1/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": "a"}], "stream": True,
                                         "sse_ping_interval": 0.1})
    assert text.count("event: ping") >= 2
    _, text, _ = c.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "stream": True,
                                                 "sse_ping_interval": -1})
    assert ": ping" not in text and text.endswith("data: [DONE]\n\n")


def test_the_fake_engine_is_a_serving_engine() -> None:
    """The tests' fake has every member of the engine surface the HTTP layer types (the real
    Engine is checked statically by mypy in llamacli/commands/serve.py and on a tiny model in
    tests/test_models_loaded.py)."""
    assert isinstance(FakeEngine(), ServingEngine)
