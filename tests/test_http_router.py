"""Router mode (`llama serve --models-dir/--models-preset`, http/router*.py): real routers on
127.0.0.1 whose children are real `llama serve` processes.

Two routers for the module: one serves a folder holding the demo model (a link to it) and a tiny
model (the openai client, streaming, a client disconnect, load/unload and the event stream); one
serves tiny models only with --models-max 2 and a preset (LRU, per-model arguments, a killed
child, a failed load, load-on-startup). Each lists only what it was given: no demo model of its own.
Each router is stopped by its PID, and every child it started must be gone after it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from tests.http_server import LlamaServer
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.slow

DEMO = "gemma-3-270m-q4_k_m"  # the demo model's name in the folder: its file name
STARTED = re.compile(r"model (\S+): starting \(pid (\d+)\)")


def _router(*args: str, cache: Path) -> LlamaServer:
    # an empty model cache of its own: the router lists only what the test gives it
    return LlamaServer(*args, env={"LLAMA_CACHE": str(cache)}, timeout=120)


def _child_pids(srv: LlamaServer) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for name, pid in STARTED.findall(srv.log()):
        out.setdefault(name, []).append(int(pid))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def _stop(srv: LlamaServer) -> None:
    """Stop the router by its PID; its children must have stopped with it (else they are
    killed by their PIDs and the test fails)."""
    srv.stop()
    left = [pid for pids in _child_pids(srv).values() for pid in pids if _alive(pid)]
    deadline = time.monotonic() + 10
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"children outlived their router: {left}\n{srv.log()}"


def _models(srv: LlamaServer) -> dict[str, dict[str, Any]]:
    status, body = srv.get("/models")
    assert status == 200, body
    return {m["id"]: m for m in body["data"]}


def _wait_status(srv: LlamaServer, name: str, value: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        m = _models(srv)[name]
        if m["status"]["value"] == value:
            return m
        assert time.monotonic() < deadline, f"{name} never became {value}: {m}\n{srv.log()}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def router(demo_model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    d = tmp_path_factory.mktemp("models")
    write_tiny_model("qwen3", "Q8_0", d / "tiny-qwen3.gguf")
    (d / f"{DEMO}.gguf").symlink_to(demo_model)
    srv = _router("--models-dir", str(d), "-c", "512", "-np", "1", cache=tmp_path_factory.mktemp("cache"))
    srv.models_dir = d  # type: ignore[attr-defined]
    srv.start()
    try:
        yield srv
    finally:
        _stop(srv)


@pytest.fixture(scope="module")
def client(router: LlamaServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url + "/v1", api_key="sk-none", max_retries=0, timeout=120)


def test_lists_the_folder(router: LlamaServer) -> None:
    models = _models(router)
    assert set(models) == {DEMO, "tiny-qwen3"}
    assert models[DEMO]["source"] == models["tiny-qwen3"]["source"] == "models_dir"
    for m in models.values():
        assert m["object"] == "model" and m["status"]["value"] in ("unloaded", "loading", "loaded")
        # the child's command line: the router's own settings are passed on
        args = m["status"]["args"]
        assert args[args.index("--ctx-size") + 1] == "512" and args[args.index("--alias") + 1] == m["id"]
    status, v1 = router.get("/v1/models")
    assert status == 200 and {m["id"] for m in v1["data"]} == set(models)


def test_requests_reach_the_model_they_name(router: LlamaServer, client: openai.OpenAI) -> None:
    tiny = client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=4, temperature=0)
    demo = client.completions.create(model=DEMO, prompt="The capital of France is", max_tokens=4, temperature=0)
    assert tiny.model == "tiny-qwen3" and tiny.usage.completion_tokens == 4
    assert demo.model == DEMO and demo.usage.completion_tokens == 4
    models = _models(router)
    assert models["tiny-qwen3"]["status"]["value"] == "loaded" and models[DEMO]["status"]["value"] == "loaded"
    # each child's own metadata is merged into the listing: two different vocabularies
    assert models["tiny-qwen3"]["meta"]["n_vocab"] != models[DEMO]["meta"]["n_vocab"]
    assert models[DEMO]["meta"]["n_vocab"] == 262144


def test_request_errors(router: LlamaServer) -> None:
    body = {"prompt": "x", "n_predict": 1}
    status, err = router.post("/completion", body)
    assert status == 400 and err["error"]["message"] == "model name is missing from the request"
    status, err = router.post("/completion", {**body, "model": "nope"})
    assert status == 400 and err["error"]["message"] == "model 'nope' not found"
    status, err = router.get("/slots")
    assert status == 400 and err["error"]["type"] == "invalid_request_error"


def test_stream_passes_through_and_disconnect_cancels(router: LlamaServer) -> None:
    body = {"model": DEMO, "prompt": "Write a long story about a dragon.", "n_predict": 2000, "stream": True,
            "temperature": 0}
    with httpx2.Client(timeout=120) as http:
        with http.stream("POST", router.url + "/completion", json=body) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            lines = resp.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert "content" in json.loads(first[len("data: "):])
            # a token came through while the child is still generating: nothing is buffered
            status, slots = router.get(f"/slots?model={DEMO}")
            assert status == 200 and slots[0]["is_processing"]
        # leaving the block closed the connection mid-stream: the child cancels its task
    deadline = time.monotonic() + 20
    while True:
        status, slots = router.get(f"/slots?model={DEMO}")
        if status == 200 and not slots[0]["is_processing"]:
            break
        assert time.monotonic() < deadline, "the child kept generating after the client left"
        time.sleep(0.2)
    # stopped early: the 512-token context would have let it write about 500 tokens
    assert slots[0]["next_token"][0]["n_decoded"] < 250, slots


def test_openai_stream_through_the_router(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=6, temperature=0, stream=True))
    text = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(text) >= 2 and all(c.model == "tiny-qwen3" for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_load_unload_and_events(router: LlamaServer) -> None:
    if _models(router)["tiny-qwen3"]["status"]["value"] != "unloaded":
        assert router.post("/models/unload", {"model": "tiny-qwen3"}) == (200, {"success": True})
        _wait_status(router, "tiny-qwen3", "unloaded")
    events: list[dict[str, Any]] = []
    connected = threading.Event()

    def listen() -> None:
        with httpx2.Client(timeout=60) as http, http.stream("GET", router.url + "/models/sse") as resp:
            connected.set()
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: "):]))
                    if events[-1]["model"] == "tiny-qwen3" and events[-1]["data"]["status"] == "unloaded":
                        return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert connected.wait(10)
    assert router.post("/models/load", {"model": "tiny-qwen3"}) == (200, {"success": True})
    _wait_status(router, "tiny-qwen3", "loaded")
    status, err = router.post("/models/load", {"model": "tiny-qwen3"})
    assert status == 400 and err["error"]["message"] == "model is already running"
    assert router.post("/models/unload", {"model": "tiny-qwen3"}) == (200, {"success": True})
    m = _wait_status(router, "tiny-qwen3", "unloaded")
    assert "failed" not in m["status"]  # asked to stop: not a failure
    status, err = router.post("/models/unload", {"model": "tiny-qwen3"})
    assert status == 400 and err["error"]["message"] == "model is not running"
    status, err = router.post("/models/load", {"model": "nope"})
    assert status == 404 and err["error"]["type"] == "not_found_error"

    t.join(30)
    mine = [(e["event"], e["data"]["status"]) for e in events if e["model"] == "tiny-qwen3"]
    # `unloading` from the request to the child's exit (llama-server says `loaded` until then)
    assert mine == [("model_status", "loading"), ("model_status", "loaded"), ("model_status", "unloading"),
                    ("model_status", "unloaded")]
    loaded = next(e for e in events if e["model"] == "tiny-qwen3" and e["data"]["status"] == "loaded")
    assert loaded["data"]["info"]["id"] == "tiny-qwen3"


def test_autoload_off_per_request(router: LlamaServer) -> None:
    if _models(router)["tiny-qwen3"]["status"]["value"] != "unloaded":
        router.post("/models/unload", {"model": "tiny-qwen3"})
        _wait_status(router, "tiny-qwen3", "unloaded")
    status, err = router.post("/completion?autoload=false", {"model": "tiny-qwen3", "prompt": "x", "n_predict": 1})
    assert status == 400 and err["error"]["message"] == "model is not loaded"
    assert _models(router)["tiny-qwen3"]["status"]["value"] == "unloaded"


def test_reload_reads_the_folder_again(router: LlamaServer) -> None:
    late = router.models_dir / "late.gguf"  # type: ignore[attr-defined]
    write_tiny_model("llama", "Q8_0", late)
    assert "late" not in _models(router)  # the list is read at startup...
    status, body = router.get("/models?reload=1")  # ...and again on request
    assert status == 200 and "late" in {m["id"] for m in body["data"]}
    assert _models(router)["late"]["status"]["value"] == "unloaded"
    assert _complete(router, "late")["model"] == "late"
    late.unlink()
    router.get("/models?reload=1")  # its file is gone: the running model is unloaded and dropped
    models = _models(router)
    assert "late" not in models and {DEMO, "tiny-qwen3"} <= set(models)


# ---- a router of tiny models: --models-max, presets, failures ---------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    d = tmp_path_factory.mktemp("small")
    for name, arch in (("a", "llama"), ("b", "qwen2"), ("c", "qwen3")):
        write_tiny_model(arch, "Q8_0", d / f"{name}.gguf")
    (d / "broken.gguf.txt").write_text("not a model")
    preset = d / "models.ini"
    preset.write_text(
        "version = 1\n"
        "[*]\n"
        "np = 2\n"  # the router's own -np 1 takes precedence
        "n-predict = 3\n"
        "[a]\n"
        "c = 128\n"
        "alias = first\n"
        "[b]\n"
        "sleep-idle-seconds = 1\n"
        "[c]\n"
        "load-on-startup = true\n"
        "[broken]\n"
        f"model = {d / 'broken.gguf.txt'}\n"
    )
    srv = _router("--models-dir", str(d), "--models-preset", str(preset), "--models-max", "2", "-np", "1",
                  cache=tmp_path_factory.mktemp("cache"))
    srv.start()
    try:
        yield srv
    finally:
        _stop(srv)


def _complete(srv: LlamaServer, model: str) -> dict[str, Any]:
    status, body = srv.post("/completion", {"model": model, "prompt": "hello", "temperature": 0})
    assert status == 200, (body, srv.log())
    return body


def test_preset_arguments_and_aliases(small: LlamaServer) -> None:
    models = _models(small)
    assert set(models) == {"a", "b", "c", "broken"}  # what it was given: the demo model is not listed
    assert models["a"]["aliases"] == ["first"] and models["a"]["source"] == "preset"
    assert models["c"]["status"]["value"] in ("loading", "loaded")  # load-on-startup
    # the log says what loads at startup, and what waits for its first request
    assert "loading at startup (load-on-startup): c" in small.log()
    assert "loading on first request: a, b, broken" in small.log()
    assert re.search(r"model c: starting \(pid \d+\), loading \S+c\.gguf \(load-on-startup\)", small.log()), small.log()
    assert models["b"]["status"]["value"] == "unloaded"
    out = _complete(small, "first")  # by its alias
    assert out["model"] == "a" and out["tokens_predicted"] == 3  # [*] n-predict = 3
    status, props = small.get("/props?model=a")
    assert status == 200 and props["default_generation_settings"]["n_ctx"] == 128  # [a] c = 128
    assert props["total_slots"] == 1  # the router's -np 1 over the preset's np = 2


def test_a_child_sleeps_on_idle_and_wakes(small: LlamaServer) -> None:
    first = _complete(small, "b")
    _wait_status(small, "b", "sleeping", timeout=30)
    for _ in range(3):  # neither the router's listing nor the model's /props wakes it
        status, props = small.get("/props?model=b")
        assert status == 200 and props["is_sleeping"] is True
        assert _models(small)["b"]["status"]["value"] == "sleeping"
        time.sleep(0.2)
    assert _complete(small, "b")["content"] == first["content"]  # a task wakes it: same greedy answer
    assert _models(small)["b"]["status"]["value"] == "loaded"


def test_models_max_unloads_the_least_recently_used(small: LlamaServer) -> None:
    _complete(small, "a")
    _complete(small, "b")
    _complete(small, "a")  # a is now more recent than b
    _complete(small, "c")  # a third model: b goes
    running = {k for k, m in _models(small).items() if m["status"]["value"] in ("loading", "loaded")}
    assert running == {"a", "c"}
    assert "models_max (2) reached: unloading the least recently used, b" in small.log()


def test_killed_child_is_reported_failed_and_reloads(small: LlamaServer) -> None:
    _complete(small, "c")
    pid = _child_pids(small)["c"][-1]
    os.kill(pid, signal.SIGKILL)
    m = _wait_status(small, "c", "unloaded")
    assert m["status"]["failed"] is True and m["status"]["exit_code"] == 128 + signal.SIGKILL
    assert any("model loaded" in line for line in m["status"]["log"])  # its last log lines
    assert small.get("/health") == (200, {"status": "ok"})  # the router lives on
    _complete(small, "c")  # loads again (a new child)
    assert _models(small)["c"]["status"]["value"] == "loaded"
    assert _child_pids(small)["c"][-1] != pid


def test_a_model_that_cannot_load_fails_with_its_log(small: LlamaServer) -> None:
    status, err = small.post("/completion", {"model": "broken", "prompt": "x"})
    assert status == 500 and "failed to load" in err["error"]["message"]
    st = _models(small)["broken"]["status"]
    assert st["value"] == "unloaded" and st["failed"] is True and st["exit_code"] == 2
    assert any("broken.gguf.txt" in line for line in st["log"])


def test_a_projector_beside_a_model_goes_to_its_child_only(demo_model: str, tmp_path: Path) -> None:
    """--models-dir: `vision/` holds the demo model and an mmproj file (llama-server's pairing):
    its child takes images; the same model loose in the folder has no projector (400), and the
    projector file is never listed as a model."""
    from tests.tiny_mmproj import SPECS, write_projector

    d = tmp_path / "models"
    (d / "vision").mkdir(parents=True)
    (d / "vision" / "gemma.gguf").symlink_to(demo_model)
    write_projector(SPECS["gemma3"], d / "vision" / "mmproj-gemma3-F16.gguf")
    (d / "plain.gguf").symlink_to(demo_model)
    write_projector(SPECS["gemma3"], d / "mmproj-loose-F16.gguf")
    srv = _router("--models-dir", str(d), "-c", "256", "-np", "1", "--no-warmup", cache=tmp_path / "cache")
    srv.start()
    try:
        assert set(_models(srv)) == {"vision", "plain"}
        url = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR4nGNkZGJmYGBgYmBgYGBgAAAAcAAKM8X3iAAAAABJRU5ErkJggg=="
        msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "what?"}]}]
        status, out = srv.post("/v1/chat/completions", {"model": "vision", "messages": msgs, "max_tokens": 1})
        assert status == 200, out
        assert out["usage"]["prompt_tokens"] >= 16  # the image's positions count
        args = _models(srv)["vision"]["status"]["args"]
        assert args[args.index("-mm") + 1] == str(d / "vision" / "mmproj-gemma3-F16.gguf")
        status, out = srv.post("/v1/chat/completions", {"model": "plain", "messages": msgs, "max_tokens": 1})
        assert status == 400 and "provide the mmproj" in out["error"]["message"]
        assert "-mm" not in _models(srv)["plain"]["status"]["args"]
    finally:
        _stop(srv)
