"""http/state.py: the result streams of ServerState: leaving early cancels, shutdown ends
responses at once, SSE pings while the engine is quiet."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.http.config import ServerConfig
from llamacli.http.state import ServerState, ServingEngine
from tests.fakes import BOS, FakeEngine, FakeTokenizer, fake_model
from tests.http_app_client import make


def test_leaving_a_stream_early_cancels_its_tasks_and_logs_them(capsys: pytest.CaptureFixture[str]) -> None:
    """A client that goes away (Quart closes the response's generator) cancels its task; the
    engine's `cancelled` Final still gets the task's log line."""
    tok = FakeTokenizer()
    eng = FakeEngine(tokenizer=tok, delay=0.05, reply="x" * 200)
    st = ServerState(ServerConfig())
    st.set_ready(eng, fake_model(tok))

    async def go() -> Task:
        (task,) = await st.submit([Task([BOS, 20], TaskParams())])
        agen = st.results([task])
        await agen.__anext__()
        await agen.aclose()  # what Quart does when the client disconnects
        for _ in range(300):  # the engine ends the task within a step: this loop must still run
            logged.append(capsys.readouterr().err)
            if f"task {task.id} " in "".join(logged):
                break
            await asyncio.sleep(0.01)
        return task

    logged: list[str] = []
    task = asyncio.run(go())
    err = "".join(logged)
    assert task.cancelled.is_set() and task.results.closed and not st.tasks
    assert any(line.startswith(f"task {task.id} ") and line.endswith("stop: cancelled") for line in err.splitlines()), err


def test_shutdown_ends_responses_without_waiting_for_the_engine() -> None:
    tok = FakeTokenizer()
    eng = FakeEngine(tokenizer=tok, delay=0.2, reply="x" * 100)
    st = ServerState(ServerConfig())
    st.set_ready(eng, fake_model(tok))

    async def go() -> list[Any]:
        (task,) = await st.submit([Task([BOS, 20], TaskParams())])
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
    assert out[-1].error is not None and "shutting down" in str(out[-1].error)  # cut, not finished
    assert time.monotonic() - t0 < 2


ASK = [{"role": "user", "content": "a"}]


@pytest.mark.parametrize("path, body, cut", [
    ("/completion", {"prompt": "a"}, 'data: {"error":{"code":503,'),
    ("/v1/completions", {"prompt": "a"}, 'data: {"error":{"code":503,'),
    ("/v1/chat/completions", {"messages": ASK}, 'data: {"error":{"code":503,'),
    ("/v1/messages", {"messages": ASK, "max_tokens": 500}, 'event: error\ndata: {"type":"error","error":{"type":"unavailable_error"'),
    ("/v1/responses", {"input": "a"}, 'event: error\ndata: {"type":"error","code":"unavailable_error"'),
])
def test_a_stream_cut_by_shutdown_says_so(path: str, body: dict[str, Any], cut: str) -> None:
    """A stream still running at shutdown ends with the API's error event, never with a finish
    reason that reads like a finished answer (it was `stop` / `end_turn`), and a non-streamed
    request cut the same way is a 503 (it was a 200 with the partial answer)."""
    for streamed in (True, False):
        c, _ = make(ServerConfig(), delay=0.05, reply="x" * 400)
        st = c.app.extensions["llama"]

        async def go() -> tuple[int, str]:
            asyncio.get_running_loop().call_later(0.3, st.cancel_all)  # what a shutdown signal does
            r = await c.app.test_client().post(path, json={**body, "stream": streamed})
            return r.status_code, await r.get_data(as_text=True)

        status, text = asyncio.run(go())
        if not streamed:
            assert status == 503 and json.loads(text)["error"]["type"] == "unavailable_error", text
            continue
        assert status == 200 and cut in text and "shutting down" in text, text[-600:]
        for finished in ('"finish_reason":"stop"', '"stop_type":"eos"', '"stop":true', "end_turn", "response.completed"):
            assert finished not in text, (finished, text[-600:])
        if path.startswith("/v1/c"):  # OpenAI's streams still close with [DONE]
            assert text.endswith("data: [DONE]\n\n")


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
