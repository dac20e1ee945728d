"""`llama serve --ray` on a two-node Ray cluster on loopback (tests/ray_cluster.py) with the demo
model: two replicas of three slots, the official openai client at the Serve proxy. Needs the
`ray` extra (skipped without it). The killed-replica test and the SIGTERM tests run late: they change the cluster; router mode
(one deployment per model) runs last, on the same cluster."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray.serve")
import httpx2  # noqa: E402
import openai  # noqa: E402

from tests.ray_cluster import RayServe  # noqa: E402

pytestmark = pytest.mark.slow
REPLICA = "x-llama-replica"


@pytest.fixture(scope="module")
def cluster(demo_model: str) -> Iterator[RayServe]:
    # -sps 0.5: a new conversation takes a free slot instead of one whose cache shares the chat
    # template's first tokens with it (llama-server's 10% default would evict a conversation)
    with RayServe("--replicas", "2", "-np", "3", "-sps", "0.5", "-t", "1", "-c", "2048", "--slots", "--metrics") as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster: RayServe) -> openai.OpenAI:
    return openai.OpenAI(base_url=cluster.url + "/v1", api_key="none", max_retries=0, timeout=120)


def _get(cluster: RayServe, path: str) -> Any:
    r = httpx2.get(cluster.url + path, timeout=30)
    assert r.status_code == 200, r.text
    return r.json() if "json" in r.headers.get("content-type", "") else r.text


def _chat(client: openai.OpenAI, messages: list[dict[str, str]], **kw: Any) -> tuple[str, str, dict[str, Any]]:
    """(reply, replica, timings) of one chat completion."""
    raw = client.chat.completions.with_raw_response.create(model="demo", messages=messages,  # type: ignore[arg-type]
                                                           temperature=0, **kw)
    resp = raw.parse()
    return resp.choices[0].message.content or "", raw.headers[REPLICA], (resp.model_extra or {})["timings"]


def test_plain_and_streamed_chat(cluster: RayServe, client: openai.OpenAI) -> None:
    reply, replica, _ = _chat(client, [{"role": "user", "content": "Say hello."}], max_tokens=8)
    assert reply and replica
    stream = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Count to ten."}],
                                            stream=True, max_tokens=48, extra_body={"ignore_eos": True})
    pieces = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
            if len(pieces) == 1:  # the first piece is here while the answer is still being generated
                assert any(s["is_processing"] for s in _get(cluster, "/slots"))
    assert len(pieces) > 10


def test_conversations_stay_on_the_replica_that_holds_their_cache(client: openai.OpenAI) -> None:
    """6 conversations x 4 turns, one after the other: each lands on one replica, every later
    turn reuses its cached prefix, and the conversations spread over both replicas (three each:
    a replica's three slots hold its three conversations)."""
    histories: list[list[dict[str, str]]] = [[] for _ in range(6)]
    where: dict[int, set[str]] = {}
    cached: list[int] = []
    for turn in range(4):
        for conv, history in enumerate(histories):
            history.append({"role": "user", "content": _question(conv, turn)})
            reply, replica, timings = _chat(client, history, max_tokens=4)
            history.append({"role": "assistant", "content": reply})
            where.setdefault(conv, set()).add(replica)
            if turn > 0:
                cached.append(timings["cache_n"])
    assert all(len(r) == 1 for r in where.values()), where
    per_replica = [sum(r == {x} for r in where.values()) for x in set().union(*where.values())]
    assert per_replica == [3, 3]
    assert all(n > 0 for n in cached), cached


TOPICS = ("apples", "rivers", "engines", "poems", "stars", "bridges")


def _question(conv: int, turn: int) -> str:
    """A conversation opens with a paragraph of its own, long enough that a later turn's prompt
    is mostly its cached prefix (the replica reuses a slot from half the prompt, -sps 0.5)."""
    if turn == 0:
        return f"Let us talk about {TOPICS[conv]}. " * 8 + "What do you know?"
    return f"And question {turn}?"


def test_the_aggregated_endpoints_answer_for_the_application(cluster: RayServe) -> None:
    assert _get(cluster, "/health") == {"status": "ok", "replicas": 2, "replicas_ok": 2}
    slots = _get(cluster, "/slots")
    assert len(slots) == 6 and len({s["replica"] for s in slots}) == 2
    assert _get(cluster, "/props")["total_slots"] == 6
    assert "llamacpp:replicas 2" in _get(cluster, "/metrics")
    assert len(_get(cluster, "/v1/models")["data"]) == 1


def test_a_killed_replica(cluster: RayServe, client: openai.OpenAI) -> None:
    """Replica R runs a stream (started) and a non-streamed request (nothing sent yet); R is
    killed: the stream ends with llama-server's error event, the other request is answered by
    the other replica, and Serve starts a new replica."""
    first = [{"role": "user", "content": "Tell me a long story about the sea."}]
    with httpx2.stream("POST", cluster.url + "/v1/chat/completions", timeout=120, json={
        "messages": first, "stream": True, "max_tokens": 1000, "ignore_eos": True, "temperature": 0,
    }) as stream:
        victim = stream.headers[REPLICA]
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        later: dict[str, Any] = {}
        second = [*first, {"role": "assistant", "content": "Once"}, {"role": "user", "content": "Go on."}]

        def ask() -> None:
            later["reply"], later["replica"], _ = _chat(client, second, max_tokens=200, extra_body={"ignore_eos": True})

        t = threading.Thread(target=ask, daemon=True)
        t.start()
        _wait(lambda: sum(s["is_processing"] for s in _get(cluster, "/slots") if s["replica"] == victim) == 2)
        assert not later  # still running on the victim: nothing sent
        os.kill(cluster.replica_pid(victim), signal.SIGKILL)
        rest = list(lines)
    events = [json.loads(x[6:]) for x in rest if x.startswith("data: {")]
    assert "error" in events[-1] and events[-1]["error"]["code"] == 500
    assert [x for x in rest if x][-1] == "data: [DONE]"
    t.join(120)
    assert later["reply"] and later["replica"] != victim
    _wait(lambda: _get(cluster, "/health")["replicas_ok"] == 2, timeout=180)  # Serve replaced the replica


def _wait(cond: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_sigterm_drains_the_application(cluster: RayServe) -> None:
    """SIGTERM to `llama serve --ray`: the application is deleted after the requests in flight
    finished (a started stream runs to its end), and the command exits 0. Runs last."""
    serve = next(p for p in cluster.procs if p.name == "serve")
    with httpx2.stream("POST", cluster.url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "Describe a forest."}], "stream": True, "max_tokens": 60,
        "ignore_eos": True, "temperature": 0,
    }) as stream:
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        serve.proc.send_signal(signal.SIGTERM)
        rest = [x for x in lines if x.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["choices"][0]["finish_reason"] == "length"
    assert serve.proc.wait(60) == 0
    assert "draining" in serve.log()


def test_sigterm_while_the_replicas_start(cluster: RayServe) -> None:
    """Three replicas, one per node, on two nodes: one waits for a node forever. The command
    says what it waits for, and SIGTERM stops it at once (the application deleted). Runs after
    the application of the other tests was deleted."""
    waiting = cluster.serve("serve-3", "--port", "0", "--replicas", "3", "-np", "1", "-t", "1", "-c", "512")
    waiting.wait_for(r"waiting for the replicas: ", 120)
    waiting.proc.send_signal(signal.SIGTERM)
    assert waiting.proc.wait(60) == 0
    assert "shutting down" in waiting.log() and "ready at" not in waiting.log()


def test_router_mode_one_deployment_per_model(cluster: RayServe, demo_model: str, tmp_path: Path) -> None:
    """`--models-dir` with the demo model under two names, one replica each (one per node), on
    the Serve proxy the earlier applications used: each request is answered by its model's
    replica, /v1/models lists both loaded, an unknown model is the router's 400. Runs after the
    application of the other tests was deleted."""
    for name in ("alpha", "beta"):
        (tmp_path / f"{name}.gguf").symlink_to(demo_model)
    port = cluster.url.rsplit(":", 1)[1]  # Serve keeps the proxy it started first
    serve = cluster.serve("serve-models", "--port", port, "--models-dir", str(tmp_path), "-np", "2", "-t", "1",
                          "-c", "512", "--slots")
    serve.wait_for(r"ready at http://", 300)
    client = openai.OpenAI(base_url=cluster.url + "/v1", api_key="none", max_retries=0, timeout=120)
    answered: dict[str, set[str]] = {"alpha": set(), "beta": set()}
    for name in ("alpha", "beta", "alpha", "beta"):
        raw = client.chat.completions.with_raw_response.create(
            model=name, messages=[{"role": "user", "content": f"Hello {name}."}], max_tokens=4, temperature=0)
        assert raw.parse().model == name  # its replicas serve it under the model's name
        answered[name].add(raw.headers[REPLICA])
    for name, replicas in answered.items():
        assert replicas == {s["replica"] for s in _get(cluster, f"/slots?model={name}")}  # that model's replica
    assert answered["alpha"].isdisjoint(answered["beta"])
    listed = {m.id: (m.model_extra or {})["status"]["value"] for m in client.models.list()}
    assert listed == {"alpha": "loaded", "beta": "loaded"}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="gamma", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert e.value.status_code == 400 and "model 'gamma' not found" in str(e.value)
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.proc.wait(60) == 0
