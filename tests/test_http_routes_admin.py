"""http/routes_admin.py and http/metrics.py: /health, /v1/models, /props, /slots and /metrics
over the fake engine."""

from __future__ import annotations

from typing import Any

from llamacli.http.config import ServerConfig
from llamacli.http.metrics import prometheus_text
from tests.http_app_client import Client, client, make  # noqa: F401 (a fixture)


def test_prometheus_names() -> None:
    from llamacli.core.runtime.engine import Metrics

    text = prometheus_text(Metrics(prompt_tokens_total=10, prompt_seconds_total=2.0, n_decode_total=4, n_busy_slots_total=6))
    for name in ("prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total", "tokens_predicted_seconds_total",
                 "n_decode_total", "n_tokens_max", "n_busy_slots_per_decode", "prompt_tokens_seconds",
                 "predicted_tokens_seconds", "requests_processing", "requests_deferred"):
        assert f"# TYPE llamacpp:{name} " in text and f"\nllamacpp:{name} " in text
    assert "llamacpp:prompt_tokens_seconds 5.0" in text and "llamacpp:n_busy_slots_per_decode 1.5" in text


def test_health_models_props_slots_metrics(client: Client) -> None:
    assert client.get("/health")[:2] == (200, {"status": "ok"})
    _, d, _ = client.get("/v1/models")
    assert d["object"] == "list" and d["data"][0]["id"] == "fake" and d["data"][0]["meta"]["n_vocab"] == 70000
    assert client.get("/models")[1]["data"] == d["data"]
    _, d, _ = client.get("/props")
    assert d["total_slots"] == 2 and d["model_path"] == "/models/fake.gguf" and d["chat_template"] == "chatml"
    assert d["default_generation_settings"]["params"]["temperature"] == 0.8
    _, d, _ = client.get("/slots")
    # an idle slot that never served a task has no id_task/params/next_token (llama-server)
    assert [s["id"] for s in d] == [0, 1] and not d[0]["is_processing"] and "params" not in d[0]
    assert set(d[0]) == {"id", "n_ctx", "speculative", "is_processing"}
    code, text, h = client.get("/metrics")
    assert code == 200 and h["Content-Type"].startswith("text/plain") and "llamacpp:n_decode_total" in text


def test_props_post_changes_defaults() -> None:
    c, _ = make(ServerConfig(props=True))
    code, d, _ = c.post("/props", {"default_generation_settings": {"params": {"temperature": 0.1, "n_predict": 4}}})
    assert code == 200 and d == {"success": True}
    _, d, _ = c.get("/props")
    assert d["default_generation_settings"]["params"]["temperature"] == 0.1
    _, d, _ = c.post("/completion", {"prompt": "a"})
    assert d["content"] == "Hell"
    assert c.post("/props", {"top_p": 7})[0] == 400


def test_slot_actions(tmp_path: Any) -> None:
    c, _ = make(ServerConfig(slot_save_path=str(tmp_path)))
    code, d, _ = c.post("/slots/0?action=save", {"filename": "a.bin"})
    assert code == 200 and d == {"id_slot": 0, "filename": "a.bin", "n_saved": 3, "n_written": 100, "timings": {"save_ms": 0.5}}
    code, d, _ = c.post("/slots/1?action=restore", {"filename": "a.bin"})
    assert code == 200 and d["n_restored"] == 3 and d["timings"] == {"restore_ms": 0.5}
    assert c.post("/slots/0?action=erase")[1] == {"id_slot": 0, "n_erased": 7}
    assert c.post("/slots/0?action=restore", {"filename": "missing.bin"})[0] == 400
    assert c.post("/slots/0?action=save", {"filename": "../x"})[0] == 400
    assert c.post("/slots/0?action=save", {})[0] == 400
    assert c.post("/slots/0?action=fly", {})[0] == 400
    assert c.post("/slots/9?action=erase")[0] == 400


def test_models_aliases_and_tags() -> None:
    """--alias a,b,c / --tags: /v1/models lists both (sorted, as llama-server's std::set) and the
    id is the first alias in that order; responses name the same id."""
    c, _ = make(ServerConfig(aliases=["tinyllama-2", "fim", "code"], tags=["small", "chat", "fim"]))
    _, d, _ = c.get("/v1/models")
    (m,) = d["data"]
    assert m["id"] == "code" and m["aliases"] == ["code", "fim", "tinyllama-2"] and m["tags"] == ["chat", "fim", "small"]
    assert m["meta"]["n_ctx"] == 128
    assert c.get("/props")[1]["model_alias"] == "code"
    _, d, _ = c.post("/v1/chat/completions", {"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": "hi"}]})
    assert d["model"] == "code"


def test_metrics_header_and_counters() -> None:
    c, _ = make(ServerConfig(metrics=True))
    c.post("/completion", {"prompt": "a", "n_predict": 2})
    code, text, h = c.get("/metrics")
    assert code == 200 and int(h["Process-Start-Time-Unix"]) > 0
    for name, kind in [("prompt_tokens_cached_total", "counter"), ("spec_decode_num_drafts_total", "counter"),
                       ("spec_decode_num_accepted_tokens_total", "counter"), ("n_busy_slots_per_decode", "gauge")]:
        assert f"# TYPE llamacpp:{name} {kind}" in text and f"# HELP llamacpp:{name} " in text


def test_slot_shows_its_last_task() -> None:
    """After a task the idle slot shows that task's params, with next_token as a list whose
    budget does not leak (n_remain -1, n_decoded 0)."""
    from llamacli.core.runtime.slot import Slot
    from llamacli.core.runtime.tasks import Task, TaskParams
    from llamacli.http.native import slot_json

    s = Slot(0, 64)
    s.task = Task([1, 2, 3], TaskParams(n_predict=8))
    s.generated = [5, 6]
    busy = slot_json(s, 64, TaskParams())
    assert busy["is_processing"] and busy["next_token"][0]["n_remain"] == 6 and busy["params"]["n_predict"] == 8
    s.release()
    idle = slot_json(s, 64, TaskParams())
    assert not idle["is_processing"] and idle["id_task"] == busy["id_task"] and idle["params"]["n_predict"] == 8
    assert idle["next_token"][0]["n_remain"] == -1 and idle["next_token"][0]["n_decoded"] == 0
