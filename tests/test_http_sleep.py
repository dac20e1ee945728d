"""`llama serve --sleep-idle-seconds N` (http/sleep.py): a real server with the demo model
releases its model after N idle seconds and reloads it for the next task."""

from __future__ import annotations

import os
import time

from tests.http_server import LlamaServer
from tests.pages import rss_kb

IDLE = 2.0
PROMPT = {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0.0, "cache_prompt": False}


def _sleeping(srv: LlamaServer) -> bool:
    status, body = srv.get("/props")
    assert status == 200, body
    return body["is_sleeping"]


def test_sleep_releases_memory_and_wakes_with_the_same_answer(demo_model: str) -> None:
    with LlamaServer("-m", demo_model, "-c", "256", "-np", "1", "--metrics", "--sleep-idle-seconds", str(IDLE)) as srv:
        assert srv.proc is not None
        status, first = srv.post("/completion", PROMPT)
        assert status == 200, first
        assert not _sleeping(srv)
        awake_kb = rss_kb(srv.proc.pid)  # a forward has touched every weight page of the file

        # /props polled far more often than IDLE: exempt requests do not reset the timer
        t0 = time.monotonic()
        while not _sleeping(srv):
            assert time.monotonic() - t0 < 30, srv.log()
            time.sleep(0.2)
        assert time.monotonic() - t0 >= IDLE - 0.5
        # /props says sleeping as soon as the engine is detached; the release itself (engine
        # stop, unmapping, malloc_trim) runs off the event loop and logs when it is done
        while "model and KV cache released" not in srv.log():
            assert time.monotonic() - t0 < 30, srv.log()
            time.sleep(0.1)
        asleep_kb = rss_kb(srv.proc.pid)
        # the weights are views of the mapped file: releasing the model unmaps it
        file_kb = os.path.getsize(demo_model) // 1024
        assert asleep_kb < awake_kb - file_kb // 2, (awake_kb, asleep_kb, file_kb)

        # health, models and metrics (and unknown paths) answer while asleep and do not wake the model
        assert srv.get("/health") == (200, {"status": "ok"})
        status, models = srv.get("/v1/models")
        assert status == 200 and models["data"][0]["id"] == demo_model
        status, metrics = srv.get("/metrics")
        assert status == 200 and "llamacpp:tokens_predicted_total 8" in metrics
        assert srv.get("/no-such-path")[0] == 404  # no route, no task
        assert _sleeping(srv)
        assert "awake" not in srv.log()

        # the next task reloads the model transparently; greedy gives the same answer
        status, again = srv.post("/completion", PROMPT)
        assert status == 200, again
        assert again["content"] == first["content"]
        assert not _sleeping(srv)
        assert "llama serve: awake: model reloaded" in srv.log()
        status, metrics = srv.get("/metrics")
        assert "llamacpp:tokens_predicted_total 16" in metrics  # the counters survived the sleep


def test_lora_scales_survive_sleep(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Scales set with POST /lora-adapters are the server's after it wakes, as llama-server
    reloads with its current adapter list; and they still act (the first-token log-probs with
    them differ from the base model's)."""
    from tests.tiny_lora import write_tiny_lora
    from tests.tiny_models import write_tiny_model

    model = write_tiny_model("llama", "F32", tmp_path / "m.gguf")
    a = write_tiny_lora("llama-F32-a", tmp_path / "a.gguf")
    probe = {"prompt": "hello", "n_predict": 1, "n_probs": 3, "temperature": 0.0, "cache_prompt": False}
    with LlamaServer("-m", str(model), "-c", "256", "-np", "1", "--lora-scaled", f"{a}:0", "--sleep-idle-seconds", str(IDLE)) as srv:
        status, base = srv.post("/completion", probe)
        assert status == 200, base
        assert srv.post("/lora-adapters", [{"id": 0, "scale": 0.5}])[0] == 200
        status, scaled = srv.post("/completion", probe)
        assert status == 200, scaled
        assert scaled["completion_probabilities"] != base["completion_probabilities"]
        t0 = time.monotonic()
        while not _sleeping(srv):
            assert time.monotonic() - t0 < 30, srv.log()
            time.sleep(0.2)
        status, after = srv.post("/completion", probe)  # wakes the model
        assert status == 200, after
        assert "llama serve: awake: model reloaded" in srv.log()
        assert [x["scale"] for x in srv.get("/lora-adapters")[1]] == [0.5]
        assert after["completion_probabilities"] == scaled["completion_probabilities"]
