"""Schema-driven fuzzing of a real `llama serve` (tiny model on 127.0.0.1): schemathesis reads
GET /openapi.json and sends valid and invalid bodies to every operation in it (its coverage
phase: each field's boundaries and wrong types; its fuzzing phase: random bodies, both modes).

It fails on any 5xx (tests/fuzz_checks.py: only /infill's 501 on a model without FIM tokens is
allowed), a status, content type, header or body that breaks the document, and a server that
stops answering (a request timeout or refused connection is an error, and /health must answer
afterwards, and within a second all along: tests/fuzz_shapes.HealthWatch). The server caps
generation (`-n 4 --n-predict-max 4`, a 128-token slot context) and the per-request limits are
small, so several thousand cases take a minute or two.

The hostile-shape tests send the shapes that once crashed or stalled the server (issue #30:
long rule chains, deep nesting, huge alternations, huge lists; tests/fuzz_shapes.py) in every
field of every route that takes them, on one keep-alive httpx connection, with the same crash
and stall checks: to a server, and through a router (`--models-dir`) to its child and to the
router's own routes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz_shapes import ROUTER_OWN, SHAPES, HealthWatch, hostile_cases, router_cases, run_cases
from tests.http_server import ROOT, LlamaServer
from tests.tiny_audio import write_audio_projector
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.slow

CHECKS = ("no_server_error,status_code_conformance,content_type_conformance,"
          "response_headers_conformance,response_schema_conformance")


# /tools with every built-in tool but exec_shell_command (random shell commands are not a test);
# its definitions are in /openapi.json, so the fuzzer makes real calls in the server's folder.
FUZZ_TOOLS = "read_file,file_glob_search,grep_search,write_file,edit_file,get_info"


def server_args(tmp_path: Path) -> tuple[str, ...]:
    """The fuzzed server: the tiny model with an audio projector of its width (-mm), so that
    media fields (multimodal_data, input_audio, image_url, Anthropic image blocks) reach the
    decoders and the encoder."""
    model = write_tiny_model("llama", "Q8_0", tmp_path / "tiny.gguf")
    mmproj = write_audio_projector("qwen2a-q8", tmp_path / "mmproj.gguf", n_out=256)
    (tmp_path / "slots").mkdir()
    (tmp_path / "work").mkdir()  # the server's working directory: the tools' root
    (tmp_path / "work" / "a.txt").write_text("alpha\nbeta\n")
    return ("-m", str(model), "-mm", str(mmproj), "-c", "256", "-np", "2", "--embeddings", "--props", "--metrics",
            "--slot-save-path", str(tmp_path / "slots"), "-n", "4", "--n-predict-max", "4",
            "--max-prompts", "8", "--max-embd-inputs", "8", "--no-warmup", "--tools", FUZZ_TOOLS)


def test_fuzz_every_endpoint_from_the_openapi_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("schemathesis")
    with LlamaServer(*server_args(tmp_path), cwd=tmp_path / "work") as srv, HealthWatch(srv.url) as watch:
        watch.label = "the schemathesis run"
        cmd = [sys.executable, "-m", "schemathesis.cli", "run", srv.url + "/openapi.json",
               "--phases", "examples,coverage,fuzzing", "--max-examples", "15", "--seed", "12",
               "--checks", CHECKS, "--request-timeout", "60", "--workers", "1", "--no-shrink"]
        # run in tmp_path: schemathesis writes its cache (.schemathesis/) into the working directory
        pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, SCHEMATHESIS_HOOKS="tests.fuzz_checks", NO_COLOR="1", PYTHONPATH=pythonpath)
        run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=480)
        out = run.stdout + run.stderr
        tested = re.search(r"Tested:\s*(\d+)", out)
        cases = re.search(r"(\d+) generated", out)
        assert tested and cases, out[-3000:]
        with capsys.disabled():  # shown in every run, not only on failure
            print(f"\nfuzzed {int(tested.group(1))} operations with {int(cases.group(1))} cases "
                  f"(exit {run.returncode})")
        assert run.returncode == 0, out[-6000:]
        assert int(tested.group(1)) >= 27 and int(cases.group(1)) >= 500
        assert srv.get("/health") == (200, {"status": "ok"}), srv.log()[-2000:]
        assert srv.proc is not None and srv.proc.poll() is None
        assert "Traceback" not in srv.log(), srv.log()[-4000:]
    assert not watch.stalls, watch.stalls


def test_keep_alive_client_across_early_answers(tmp_path: Path) -> None:
    """One keep-alive httpx client, one connection: requests the server answers before reading
    their body (no API key, slot erase, an invalid slot action, a body over --max-body-size),
    each body sent only after a pause (the race a client otherwise loses now and then), between
    ordinary ones. Every request gets its answer and none opens a new connection."""
    import time
    from collections.abc import Iterator

    import httpx2

    model = write_tiny_model("llama", "Q8_0", tmp_path / "tiny.gguf")
    (tmp_path / "slots").mkdir()
    args = ("-m", str(model), "-c", "256", "-np", "1", "-n", "2", "--no-warmup", "--api-key", "k",
            "--slot-save-path", str(tmp_path / "slots"), "--max-body-size", "64K")

    def late(body: bytes) -> Iterator[bytes]:
        time.sleep(0.2)
        yield body

    small, big = b'{"prompt": "hi"}', b'{"prompt": "' + b"a" * 200_000 + b'"}'
    cases = [("/completion", small, {}, 401), ("/slots/0?action=erase", small, None, 200),
             ("/slots/0?action=fly", small, None, 400), ("/completion", big, None, 413), ("/completion", small, None, 200)]
    with LlamaServer(*args) as srv, httpx2.Client(timeout=60, headers={"Authorization": "Bearer k"}) as http:
        peers = set()
        for path, body, headers, want in cases * 2:
            hdrs = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
            if headers == {}:
                hdrs["Authorization"] = ""  # no key: a 401 before the body is read
            r = http.post(srv.url + path, content=late(body), headers=hdrs)
            assert r.status_code == want, (path, r.status_code, r.text[:300])
            peers.add(r.extensions["network_stream"].get_extra_info("client_addr"))
        r = http.get(srv.url + "/health")
        peers.add(r.extensions["network_stream"].get_extra_info("client_addr"))
        assert r.status_code == 200 and len(peers) == 1, peers
        assert "Traceback" not in srv.log(), srv.log()[-3000:]


def test_fuzz_hostile_shapes_on_every_route(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each shape in each field of each route that takes it, on one keep-alive connection:
    an answer (never a crash, a dropped connection or a 5xx), llama-server's error object
    without a native backtrace, /health answering within a second during every case, the
    process alive after each."""
    import httpx2

    with LlamaServer(*server_args(tmp_path), cwd=tmp_path / "work") as srv, HealthWatch(srv.url) as watch, httpx2.Client(timeout=120) as http:
        status, doc = srv.get("/openapi.json")
        assert status == 200
        todo = list(hostile_cases(doc))
        problems = run_cases(http, srv, todo, watch)
        with capsys.disabled():
            print(f"\nsent {len(todo)} hostile shapes to {len({c.path for c in todo})} routes")
        assert not problems, "\n".join(problems[:20]) + "\n" + srv.log()[-3000:]
        assert "Traceback" not in srv.log(), srv.log()[-4000:]
    assert not watch.stalls, watch.stalls
    fields = {c.what.split(":")[0] for c in todo}
    assert fields == {s.field for s in SHAPES}, fields  # every shape reached some route
    for route in ("/completion", "/v1/completions", "/v1/chat/completions", "/infill", "/v1/messages",
                  "/v1/responses", "/tokenize", "/v1/embeddings"):
        assert any(c.path == route for c in todo), route


def test_fuzz_hostile_shapes_through_the_router(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same shapes through `llama serve --models-dir` (its child started with the same
    settings: the router passes them on): every route of the child's document with the
    model named, and the router's own /models/load and /models/unload. The router and its one
    child answer each (no 5xx: a child that died would be a 502/503), /health of the router
    and /props of the child through it answer within a second all along, and the child is
    never restarted."""
    import httpx2

    models = tmp_path / "models"
    models.mkdir()
    write_tiny_model("llama", "Q8_0", models / "tiny.gguf")
    child_args = server_args(tmp_path)[4:]  # all but -m and -mm
    router = LlamaServer("--models-dir", str(models), *child_args, "--max-n-probs", "50",
                         env={"LLAMA_CACHE": str(tmp_path / "cache")})
    with router as srv, httpx2.Client(timeout=120) as http:
        assert srv.post("/models/load", {"model": "tiny"}) == (200, {"success": True})
        status, doc = srv.get("/openapi.json?model=tiny")  # the child's document, through the router
        assert status == 200, doc
        todo = list(router_cases(doc, "tiny"))
        with HealthWatch(srv.url) as watch, HealthWatch(srv.url, path="/props?model=tiny") as child:
            problems = run_cases(http, srv, todo, watch, child)
        with capsys.disabled():
            print(f"\nsent {len(todo)} hostile shapes through the router to {len({c.path for c in todo})} routes")
        assert not problems, "\n".join(problems[:20]) + "\n" + srv.log()[-3000:]
        # the child inherited the router's bounds
        status, body = srv.post("/completion", {"model": "tiny", "prompt": "hi", "n_probs": 51})
        assert status == 400 and "at most 50 probabilities" in body["error"]["message"], body
        starts = re.findall(r"model tiny: starting \(pid (\d+)\)", srv.log())
        assert len(starts) == 1 and os.path.exists(f"/proc/{starts[0]}"), srv.log()[-3000:]
        assert "Traceback" not in srv.log(), srv.log()[-4000:]
    assert not watch.stalls and not child.stalls, watch.stalls + child.stalls
    assert {c.path for c in todo} >= {"/completion", "/v1/chat/completions", "/v1/messages", "/v1/responses",
                                      "/tokenize", "/v1/embeddings", *ROUTER_OWN}
    assert {c.what.split(":")[0] for c in todo} == {s.field for s in SHAPES}
