"""llama serve --ray without a cluster: the routing text, the affinity ranking, the merged
answers of the aggregated endpoints, a request run through the Quart app in-process, and the
command line's errors. The cluster tests are in test_scaleout_ray.py."""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from llamacli.http.metrics import prometheus_text
from llamacli.core.runtime.metrics import Metrics
from llamacli.scaleout.affinity import AffinityPolicy, PrefixIndex, rank
from llamacli.scaleout.aggregate import Answer, merge, merge_metrics
from llamacli.scaleout.asgi_call import call_asgi
from llamacli.scaleout.request import ForwardedRequest
from llamacli.scaleout.routing_key import routing_key
from tests.fakes import FakeEngine, FakeTokenizer, fake_model
from tests.http_server import ROOT


def _chat(*turns: str) -> bytes:
    roles = ["user", "assistant"]
    return json.dumps({"messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]}).encode()


# ---- the routing text --------------------------------------------------------------------------


def test_a_conversations_next_turn_extends_its_routing_text() -> None:
    one, two = routing_key(_chat("Hi")), routing_key(_chat("Hi", "Hello!", "How are you?"))
    assert one and two.startswith(one) and len(two) > len(one)


def test_roles_and_boundaries_are_in_the_routing_text() -> None:
    """"ab" said by the user differs from "a" + "b" in two messages, and from the assistant's "ab"."""
    keys = {routing_key(_chat("ab")), routing_key(_chat("a", "b")),
            routing_key(json.dumps({"messages": [{"role": "assistant", "content": "ab"}]}).encode())}
    assert len(keys) == 3


@pytest.mark.parametrize("body, expected", [
    ({"prompt": "Once upon"}, "Once upon"),
    ({"prompt": [1, 2, 3]}, "1 2 3 "),  # a token prompt: its prefix is a text prefix too
    ({"content": "def f():"}, "def f():"),  # /infill, /tokenize
    ({"instructions": "Be brief. ", "input": "Hi"}, "Be brief. Hi"),  # the Responses API
    ({"system": "S", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]},
     "S\x1euser\x1fHi"),  # Anthropic: system prompt first, content parts' text
    ({"model": "x"}, ""),
])
def test_routing_text_of_each_api_family(body: dict[str, Any], expected: str) -> None:
    assert routing_key(json.dumps(body).encode()) == expected


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b"\xff\xfe"])
def test_a_body_without_a_prompt_has_no_routing_text(body: bytes) -> None:
    assert routing_key(body) == ""


# ---- the affinity ranking ---------------------------------------------------------------------


def test_the_replica_holding_the_longest_prefix_comes_first() -> None:
    index = PrefixIndex()
    index.insert("a", "conversation one, turn one")
    index.insert("b", "conversation two")
    ranks = rank(["a", "b"], {"a": 1, "b": 0}, "conversation one, turn one; turn two", index, AffinityPolicy(imbalance=2))
    assert ranks == [["a"], ["b"]]


def test_the_least_loaded_wins_when_loads_differ_beyond_the_threshold() -> None:
    """Ray Serve takes the least-loaded replica of a rank: one rank of all of them."""
    index = PrefixIndex()
    index.insert("a", "conversation one")
    assert rank(["a", "b"], {"a": 5, "b": 0}, "conversation one, again", index, AffinityPolicy(imbalance=2)) == [["a", "b"]]
    assert rank(["a", "b"], {"a": 2, "b": 0}, "conversation one, again", index, AffinityPolicy(imbalance=2))[0] == ["a"]


def test_new_text_goes_to_the_replicas_that_hold_the_least() -> None:
    """Fewest texts first (each is a conversation in a slot), then fewest characters."""
    index = PrefixIndex()
    index.insert("a", "x" * 100)
    assert rank(["a", "b", "c"], {}, "something new", index, AffinityPolicy()) == [["b", "c"], ["a"]]
    index.insert("b", "y")
    index.insert("b", "z")
    index.insert("c", "w" * 10)
    assert rank(["a", "b", "c"], {}, "something new", index, AffinityPolicy()) == [["c"], ["a", "b"]]


def test_a_conversations_earlier_turn_beats_a_longer_partial_match() -> None:
    index = PrefixIndex()
    index.insert("a", "System prompt. User: one")
    index.insert("b", "System prompt. User: two, and more")
    text = "System prompt. User: one. Assistant: ... User: next"
    assert rank(["a", "b"], {}, text, index, AffinityPolicy())[0] == ["a"]


def test_a_partial_match_counts_from_its_minimum_share() -> None:
    index = PrefixIndex()
    index.insert("a", "A long shared system prompt, then question one")
    index.insert("b", "zz")
    text = "A long shared system prompt, then question two"  # shares 44 of 46 characters with a's
    assert rank(["a", "b"], {}, text, index, AffinityPolicy(min_match=0.5))[0] == ["a"]
    short = "A long shared system prompt? No: a different text that goes on and on and on"  # 28 of 76
    assert rank(["a", "b"], {}, short, index, AffinityPolicy(min_match=0.5))[0] == ["b"]  # b holds less


def test_no_routing_text_routes_on_load_alone() -> None:
    assert rank(["a", "b"], {"a": 1}, "", PrefixIndex(), AffinityPolicy()) == [["a", "b"]]


def test_the_index_keeps_recent_texts_and_forgets_gone_replicas() -> None:
    index = PrefixIndex(capacity=2)
    index.insert("a", "one")
    index.insert("a", "one two")  # extends "one": replaces it
    assert list(index.texts["a"]) == ["one two"]
    index.insert("a", "three")
    index.insert("a", "four")
    assert list(index.texts["a"]) == ["three", "four"]
    assert index.matches("one two three", ["a"]) == {"a": 0}
    index.keep_only(["b"])
    assert "a" not in index.texts and index.size("b") == (0, 0)


# ---- the aggregated endpoints -----------------------------------------------------------------


def _metrics(**counts: int) -> str:
    m = Metrics()
    for k, v in counts.items():
        setattr(m, k, v)
    return prometheus_text(m)


def test_metrics_are_summed_maxed_or_averaged() -> None:
    merged = merge_metrics([_metrics(prompt_tokens_total=10, n_tokens_max=7, requests_processing=1),
                            _metrics(prompt_tokens_total=5, n_tokens_max=9, requests_processing=2)])
    values = dict(line.rsplit(" ", 1) for line in merged.splitlines() if not line.startswith("#"))
    assert values["llamacpp:prompt_tokens_total"] == "15"
    assert values["llamacpp:n_tokens_max"] == "9"
    assert values["llamacpp:requests_processing"] == "3"
    assert values["llamacpp:replicas"] == "2"
    assert merged.count("# TYPE llamacpp:prompt_tokens_total counter") == 1


def test_slots_of_every_replica_each_marked() -> None:
    a = Answer("r1", 200, json.dumps([{"id": 0}, {"id": 1}]).encode())
    b = Answer("r2", 200, json.dumps([{"id": 0}]).encode())
    slots = json.loads(merge("/slots", [a, b]).body)
    assert [(s["id"], s["replica"]) for s in slots] == [(0, "r1"), (1, "r1"), (0, "r2")]


def test_health_and_props_answer_for_the_application() -> None:
    ok = Answer("r1", 200, json.dumps({"status": "ok"}).encode())
    loading = Answer("r2", 503, json.dumps({"error": {"code": 503}}).encode())
    assert json.loads(merge("/health", [loading, ok]).body) == {"status": "ok", "replicas": 2, "replicas_ok": 1}
    assert merge("/health", [loading]).status == 503  # no replica ready: the replica's own answer
    props = [Answer(r, 200, json.dumps({"total_slots": 2, "model_path": "m"}).encode()) for r in ("r1", "r2")]
    merged = json.loads(merge("/props", props).body)
    assert merged["total_slots"] == 4 and merged["replicas"] == 2 and merged["model_path"] == "m"


def test_an_error_every_replica_gives_is_passed_on() -> None:
    denied = Answer("r1", 401, b'{"error": {"code": 401}}')
    assert merge("/slots", [denied, denied]) == denied


# ---- a request through the app in-process -----------------------------------------------------


def _forwarded(path: str, body: dict[str, Any]) -> ForwardedRequest:
    raw = json.dumps(body).encode()
    return ForwardedRequest("POST", path, b"", ((b"host", b"127.0.0.2:8000"), (b"content-type", b"application/json")),
                            raw, ("127.0.0.1", 5000), routing_key(raw))


def _messages(app: Any, req: ForwardedRequest) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return [dict(m) async for m in call_asgi(app, req)]

    return asyncio.run(run())


def _app(**kw: Any) -> Any:
    tok = FakeTokenizer()
    return create_app(FakeEngine(tokenizer=tok, words=True, **kw), ServerConfig(), fake_model(tok))


def test_a_stream_comes_message_by_message() -> None:
    msgs = _messages(_app(reply="one two three"), _forwarded("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "stream": True}))
    assert msgs[0]["type"] == "http.response.start" and msgs[0]["status"] == 200
    bodies = [m["body"] for m in msgs[1:] if m.get("body")]
    assert len(bodies) >= 4  # role, three words, the end: each its own message
    assert b"".join(bodies).endswith(b"data: [DONE]\n\n")
    assert msgs[-1]["type"] == "http.response.body" and not msgs[-1].get("more_body")


def test_an_error_is_llama_servers_json() -> None:
    msgs = _messages(_app(), _forwarded("/v1/chat/completions", {"messages": "not a list"}))
    assert msgs[0]["status"] == 400
    assert json.loads(b"".join(m.get("body", b"") for m in msgs[1:]))["error"]["code"] == 400


def test_a_caller_that_stops_reading_cancels_the_task() -> None:
    """Ray cancels the replica's generator when the client goes: the app sees a disconnect."""
    engine = FakeEngine(tokenizer=FakeTokenizer(), reply="word " * 200, words=True, delay=0.01)
    app = create_app(engine, ServerConfig(), fake_model(engine.tokenizer))

    async def run() -> None:
        gen = call_asgi(app, _forwarded("/completion", {"prompt": "x", "stream": True}))
        async for msg in gen:
            if msg.get("body"):
                break
        await gen.aclose()
        for _ in range(100):
            if engine.cancelled:
                return
            await asyncio.sleep(0.02)

    asyncio.run(run())
    assert len(engine.cancelled) == 1


# ---- the command line -------------------------------------------------------------------------


def _llama(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llamacli", "serve", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_without_a_cluster_it_says_how_to_start_one() -> None:
    r = _llama("--ray", "127.0.0.9:9")  # nothing listens there
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --ray")
    assert "ray start --head" in lines[0] or "pip install 'llamacli[ray]'" in lines[0]


@pytest.mark.parametrize("args, message", [
    (("--replicas", "2"), "need --ray ADDRESS"),
    (("--ray", "auto", "--replicas", "2", "--max-replicas", "3"), "not both"),
    (("--ray", "auto", "--min-replicas", "3", "--max-replicas", "2"), "above --max-replicas"),
    (("--ray", "auto", "--ray-router", "random"), "must be one of affinity, pow2"),
    (("--ray", "auto", "--replicas", "0"), "must be at least 1"),
])
def test_contradicting_replica_options_are_usage_errors(args: tuple[str, ...], message: str) -> None:
    r = _llama(*args)
    assert r.returncode == 1 and message in r.stderr


def test_only_the_scaleout_driver_imports_ray() -> None:
    """core/, http/ and the rest of the CLI know nothing of Ray (docs/architecture.md)."""
    found = []
    for path in sorted(ROOT.glob("core/**/*.py")) + sorted(ROOT.glob("http/**/*.py")) + sorted(ROOT.glob("llamacli/**/*.py")):
        if "scaleout" in path.parts or path.is_symlink() or any(p.is_symlink() for p in path.parents):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "ray" or n.startswith("ray.")]
    assert found == []


def _deployed(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Any, Any]:
    """The ReplicaSpec and RayOptions that `llama serve --ray auto ARGS` deploys."""
    from typer.testing import CliRunner

    import llamacli.commands.serve as cmd
    from llamacli.cli import app
    seen: list[tuple[Any, Any]] = []
    monkeypatch.setattr(cmd, "_serve_on_ray", lambda ctx, spec, ray: seen.append((spec, ray)))
    result = CliRunner().invoke(app, ["serve", "--ray", "auto", *args])
    assert result.exit_code == 0, result.output
    return seen[0]


def test_the_engine_deployments_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from llamacli.scaleout.deploy import engine_options

    opts = engine_options(*_deployed(monkeypatch, "-np", "3", "-t", "4", "--replicas", "2"))
    assert opts["num_replicas"] == 2 and "autoscaling_config" not in opts
    assert opts["ray_actor_options"] == {"num_cpus": 4}  # -t: the CPUs a replica reserves
    assert opts["max_replicas_per_node"] == 1
    assert opts["max_ongoing_requests"] == 6  # the slots, and as many queued
    assert opts["request_router_config"]["request_router_class"] == "llamacli.scaleout.router:CacheAffinityRouter"
    opts = engine_options(*_deployed(monkeypatch, "-np", "2", "--min-replicas", "1", "--max-replicas", "4",
                                     "--ray-router", "pow2"))
    assert opts["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 2,
                                          "initial_replicas": 1}
    assert "num_replicas" not in opts and "request_router_config" not in opts
    assert opts["ray_actor_options"] == {"num_cpus": 1}  # -t every core: one CPU reserved


# ---- router mode: one deployment per model ----------------------------------------------------


def _names() -> dict[str, str]:
    from llamacli.http.router import ModelSpec, name_index

    return name_index([ModelSpec("alpha", []), ModelSpec("beta", [], aliases=("b",))])


def test_a_request_goes_to_the_model_it_names() -> None:
    from llamacli.scaleout.models import model_of

    names = _names()
    assert model_of("POST", "/v1/chat/completions", b"", b'{"model": "alpha", "messages": []}', names) == "alpha"
    assert model_of("POST", "/completion", b"", b'{"model": "b", "prompt": "x"}', names) == "beta"  # an alias
    assert model_of("GET", "/slots", b"model=beta", b"", names) == "beta"
    assert model_of("GET", "/props", b"model=alpha", b"", names) == "alpha"
    assert model_of("GET", "/metrics", b"model=b", b"", names) == "beta"
    for path, query in [("/health", b""), ("/models", b""), ("/v1/models", b"model=alpha"), ("/props", b"")]:
        assert model_of("GET", path, query, b"", names) is None  # the router's own answer


@pytest.mark.parametrize("method, path, query, body, message", [
    ("POST", "/v1/chat/completions", b"", b'{"messages": []}', "model name is missing from the request"),
    ("POST", "/v1/chat/completions", b"", b"", "model name is missing from the request"),
    ("GET", "/slots", b"", b"", "model name is missing from the request"),
    ("POST", "/v1/chat/completions", b"", b'{"model": "gamma"}', "model 'gamma' not found"),
    ("GET", "/metrics", b"model=gamma", b"", "model 'gamma' not found"),
    ("POST", "/v1/completions", b"", b'{"model": 3}', "'model' must be a string"),
    ("POST", "/v1/completions", b"", b"[1]", "the request body must be a JSON object, got array"),
])
def test_a_missing_or_unknown_model_is_the_routers_400(method: str, path: str, query: bytes, body: bytes,
                                                       message: str) -> None:
    from llamacli.http.errors import ApiError
    from llamacli.scaleout.models import model_of

    with pytest.raises(ApiError) as e:
        model_of(method, path, query, body, _names())
    assert (e.value.status, e.value.message, e.value.type) == (400, message, "invalid_request_error")


def test_every_model_is_listed_loaded() -> None:
    from llamacli.http.router import ModelSpec
    from llamacli.scaleout.models import models_json

    specs = [ModelSpec("alpha", ["-m", "/m/a.gguf"], "/m/a.gguf", "models_dir"), ModelSpec("beta", [], "/m/b.gguf", aliases=("b",))]
    listed = models_json(specs, {"alpha": {"id": "ignored", "meta": {"n_params": 7}}})
    assert listed["object"] == "list"
    alpha, beta = listed["data"]
    assert (alpha["id"], alpha["status"], alpha["path"], alpha["source"]) == (
        "alpha", {"value": "loaded", "args": ["-m", "/m/a.gguf"]}, "/m/a.gguf", "models_dir")
    assert alpha["meta"] == {"n_params": 7}  # the replica's own entry, where the router says nothing
    assert (beta["id"], beta["aliases"], beta["object"], beta["owned_by"]) == ("beta", ["b"], "model", "llamacpp")


def _ray_models(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[list[Any], str]:
    """The ModelDeployments and the ready line's text of `llama serve --ray auto ARGS`."""
    from typer.testing import CliRunner

    import llamacli.commands.serve  # noqa: F401  # registers the command
    import llamacli.scaleout.deploy as deploy
    from llamacli.cli import app

    seen: list[Any] = []
    monkeypatch.setattr(deploy, "models_application", lambda models, api_keys: models)
    monkeypatch.setattr(deploy, "serve_on_ray", lambda app, address, what, host, port, log: seen.append((app, what)))
    result = CliRunner().invoke(app, ["serve", "--ray", "auto", *args])
    assert result.exit_code == 0, result.output
    return seen[0]


def test_each_model_gets_its_deployment_with_the_routers_options(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The router's model list (a file, a folder with its projector, a preset section with its
    own replicas), each model's options as its child would get them (the router's command line
    last), and an empty cache: cached models are not deployed."""
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "models" / "vis").mkdir(parents=True)
    (tmp_path / "models" / "alpha.gguf").write_bytes(b"")
    (tmp_path / "models" / "vis" / "model.gguf").write_bytes(b"")
    (tmp_path / "models" / "vis" / "mmproj-model.gguf").write_bytes(b"")
    preset = tmp_path / "p.ini"
    preset.write_text("[*]\nctx-size = 1024\n[alpha]\nreplicas = 3\nparallel = 2\n")
    models, what = _ray_models(monkeypatch, "--models-dir", str(tmp_path / "models"), "--models-preset", str(preset),
                               "-np", "4", "-t", "2")
    by_name = {m.spec.name: m for m in models}
    assert sorted(by_name) == ["alpha", "vis"] and [m.deployment for m in models] == ["LlamaEngine0", "LlamaEngine1"]
    alpha, vis = by_name["alpha"], by_name["vis"]
    assert alpha.replica.source.model == str(tmp_path / "models" / "alpha.gguf")
    assert alpha.scaling.replicas == 3 and vis.scaling.replicas is None  # its preset section's replicas
    assert alpha.replica.opts.slots.n_parallel == 4  # the router's command line wins over the preset
    assert alpha.replica.opts.slots.ctx_size == vis.replica.opts.slots.ctx_size == 1024  # [*]
    assert alpha.replica.opts.load.threads == 2 and alpha.scaling.address == "auto"
    assert alpha.replica.opts.endpoints.aliases == ["alpha"]  # the replicas answer with the model's name
    assert vis.replica.mmproj.path == str(tmp_path / "models" / "vis" / "mmproj-model.gguf")
    assert alpha.replica.mmproj.path is None
    assert sorted(what.split(", ")) == ["alpha: 3 replicas", "vis: 1 replica"]


class _Handle:
    """A DeploymentHandle's streaming `asgi` call, answered by an app in-process."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.asgi = self

    def options(self, **_: Any) -> _Handle:
        return self

    def remote(self, req: ForwardedRequest) -> Any:
        gen = call_asgi(self.app, req)

        class Call:
            def __aiter__(self) -> Any:
                return gen

            def cancel(self) -> None:
                pass

        return Call()


def _ask(ingress: Any, method: str, path: str, body: dict[str, Any] | None = None, query: bytes = b"",
         headers: tuple[tuple[bytes, bytes], ...] = ()) -> tuple[int, Any]:
    """(status, JSON body) of one request through an ingress ASGI app."""
    status, raw = _ask_raw(ingress, method, path, body, query, headers)
    return status, json.loads(raw)


def _ask_raw(ingress: Any, method: str, path: str, body: dict[str, Any] | None, query: bytes,
             headers: tuple[tuple[bytes, bytes], ...]) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    raw = json.dumps(body).encode() if body is not None else b""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(msg: Any) -> None:
        sent.append(dict(msg))

    scope = {"type": "http", "method": method, "path": path, "query_string": query, "headers": [(b"host", b"x:1"), *headers],
             "client": ("127.0.0.1", 1)}
    asyncio.run(ingress(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_ingress_routes_by_model_and_answers_as_the_router() -> None:
    """Two models' deployments (each an app in-process): a request is answered by its model's,
    /v1/models lists both loaded, /props is the router's, /slots?model= the model's."""
    pytest.importorskip("ray")
    from llamacli.http.router import ModelSpec
    from llamacli.scaleout.models_ingress import ModelsIngress

    def app(reply: str) -> Any:
        tok = FakeTokenizer()
        return create_app(FakeEngine(tokenizer=tok, words=True, reply=reply), ServerConfig(), fake_model(tok))

    ingress = ModelsIngress([ModelSpec("alpha", [], "/m/a.gguf"), ModelSpec("beta", [], "/m/b.gguf", aliases=("b",))],
                            ["LlamaEngine0", "LlamaEngine1"], [_Handle(app("one from alpha")), _Handle(app("two from beta"))],
                            [])
    chat = {"messages": [{"role": "user", "content": "Hi"}]}
    for name, reply in [("alpha", "one from alpha"), ("beta", "two from beta"), ("b", "two from beta")]:
        status, out = _ask(ingress, "POST", "/v1/chat/completions", {"model": name, **chat})
        assert status == 200 and out["choices"][0]["message"]["content"] == reply
    status, out = _ask(ingress, "GET", "/v1/models")
    assert status == 200 and [(m["id"], m["status"]["value"]) for m in out["data"]] == [("alpha", "loaded"), ("beta", "loaded")]
    assert _ask(ingress, "GET", "/props")[1]["role"] == "router"
    status, slots = _ask(ingress, "GET", "/slots", query=b"model=beta")
    assert status == 200 and isinstance(slots, list) and slots
    assert _ask(ingress, "POST", "/v1/chat/completions", {"model": "gamma", **chat}) == (
        400, {"error": {"code": 400, "message": "model 'gamma' not found", "type": "invalid_request_error"}})
    assert _ask(ingress, "GET", "/health") == (200, {"status": "ok"})
    status, page = _ask_raw(ingress, "GET", "/", None, b"", ())  # the web UI, from a replica
    assert status == 200 and b"<html" in page.lower()
    assert _ask(ingress, "POST", "/models/load", {"model": "b"})[1]["error"]["message"] == "model is already running"
    assert _ask(ingress, "POST", "/models/load", {"model": "gamma"}) == (
        404, {"error": {"code": 404, "message": "model is not found", "type": "not_found_error"}})
    status, out = _ask(ingress, "POST", "/models/unload", {"model": "alpha"})
    assert status == 400 and "stays loaded" in out["error"]["message"]


def test_the_ingress_checks_the_api_key() -> None:
    """--api-key goes to the router's ingress (its replicas, as a router's children, get none):
    every request but the health checks needs it, before the model is looked up."""
    pytest.importorskip("ray")
    from llamacli.http.router import ModelSpec
    from llamacli.scaleout.models_ingress import ModelsIngress

    tok = FakeTokenizer()
    app = create_app(FakeEngine(tokenizer=tok, words=True, reply="hi"), ServerConfig(), fake_model(tok))
    ingress = ModelsIngress([ModelSpec("alpha", [])], ["LlamaEngine0"], [_Handle(app)], ["sekrit"])
    chat = {"model": "alpha", "messages": [{"role": "user", "content": "Hi"}]}
    denied = (401, {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
    assert _ask(ingress, "POST", "/v1/chat/completions", chat) == denied
    assert _ask(ingress, "POST", "/v1/chat/completions", {**chat, "model": "gamma"}) == denied
    assert _ask(ingress, "GET", "/v1/models") == denied
    assert _ask(ingress, "GET", "/props", headers=((b"authorization", b"Bearer wrong"),)) == denied
    assert _ask(ingress, "GET", "/health") == (200, {"status": "ok"})
    assert _ask_raw(ingress, "GET", "/", None, b"", ())[0] == 200  # the web UI is public
    assert _ask(ingress, "POST", "/v1/chat/completions", chat, headers=((b"authorization", b"Bearer sekrit"),))[0] == 200
    assert _ask(ingress, "GET", "/v1/models", headers=((b"x-api-key", b"sekrit"),))[0] == 200


def test_a_projector_goes_to_every_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    spec, _ = _deployed(monkeypatch, "-mm", "/models/mmproj.gguf", "--image-max-pixels", "1000")
    assert spec.mmproj.path == "/models/mmproj.gguf" and spec.mmproj.limits.image.max_pixels == 1000
