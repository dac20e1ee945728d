"""GET/POST /tools on a real `llama serve` (tiny model, 127.0.0.1, its working directory a
temporary folder): llama-server's shapes and statuses, streamed output, a client that leaves
kills its command, the API key, the CORS default, the log line of every call, MCP servers (one
that crashes or hangs never takes the server down), and the start-up errors of the flags."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.http_server import ROOT, LlamaServer
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.slow
MCP_SERVER = str(ROOT / "tests" / "mcp_server.py")


def _mcp_json(timeout_ms: int = 3000) -> str:
    return json.dumps({"mcpServers": {
        "t": {"command": sys.executable, "args": [MCP_SERVER], "timeout_ms": timeout_ms},
        "broken": {"command": sys.executable, "args": [MCP_SERVER, "exit-on-start"]},
    }})


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tools")
    write_tiny_model("qwen2", "Q8_0", d / "tiny.gguf")
    (d / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (d / "sub").mkdir()
    (d / "sub" / "code.py").write_text("def f():\n    return 1\n")
    return d


@pytest.fixture(scope="module")
def srv(work: Path) -> Iterator[LlamaServer]:
    # -ag: every built-in tool (and the CORS proxy), as --tools all
    with LlamaServer("-m", str(work / "tiny.gguf"), "-c", "256", "-np", "1", "--no-warmup", "-ag",
                     "--mcp-servers-json", _mcp_json(), "--api-key", "sekrit", cwd=work) as s:
        yield s


@pytest.fixture(scope="module")
def http(srv: LlamaServer) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=srv.url, timeout=60, headers={"Authorization": "Bearer sekrit"}) as c:
        yield c


def call(http: httpx2.Client, tool: str, params: dict[str, Any] | None = None, **headers: str) -> tuple[int, Any]:
    body: dict[str, Any] = {"tool": tool}
    if params is not None:
        body["params"] = params
    r = http.post("/tools", json=body, headers=headers)
    return r.status_code, r.json()


def test_list(http: httpx2.Client) -> None:
    r = http.get("/tools")
    assert r.status_code == 200
    rows = r.json()
    names = [t["tool"] for t in rows]
    assert names[:7] == ["read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file",
                         "edit_file", "get_info"]
    assert names[7:] == ["t_add", "t_echo", "t_pid", "t_sleepy", "t_crash", "t_fail"]  # "broken" listed nothing
    by = {t["tool"]: t for t in rows}
    assert by["write_file"]["permissions"] == {"write": True} and by["read_file"]["permissions"] == {"write": False}
    assert by["t_add"]["type"] == "mcp" and by["get_info"]["type"] == "server"
    assert by["read_file"]["definition"]["function"]["parameters"]["required"] == ["path"]


def test_calls_and_their_results(http: httpx2.Client, work: Path) -> None:
    assert call(http, "read_file", {"path": "notes.txt", "start_line": 2, "end_line": 2}) == (
        200, {"plain_text_response": "beta\n"})
    assert call(http, "read_file", {"path": "../etc/passwd"})[1]["error"].startswith("../etc/passwd: '..' is refused")
    assert call(http, "read_file", {"path": "code.py"}, **{"x-tool-cwd": "sub"}) == (
        200, {"plain_text_response": "def f():\n    return 1\n"})
    assert call(http, "write_file", {"path": "out/w.txt", "content": "hi"}) == (
        200, {"result": "file written successfully", "path": "out/w.txt", "bytes": 2})
    assert (work / "out" / "w.txt").read_text() == "hi"
    status, info = call(http, "get_info", {})
    assert status == 200 and info["cwd"] == str(work.resolve())
    status, found = call(http, "file_glob_search", {"path": ".", "include": "*.py"})
    assert found["entries"] == [{"path": "sub/code.py", "type": "file"}]
    assert call(http, "exec_shell_command", {"command": "echo $((6*7))"}) == (
        200, {"plain_text_response": "42\n\n[exit code: 0]"})
    assert call(http, "t_add", {"a": 20, "b": 22}) == (200, {"plain_text_response": "42"})
    assert call(http, "t_fail", {}) == (200, {"error": "Error executing tool fail"})
    status, b64 = call(http, "read_file", {"path": "notes.txt"}, **{"x-resp-type": "base64"})
    assert b64 == {"base64": "YWxwaGEKYmV0YQpnYW1tYQo=", "size_bytes": 17}


@pytest.mark.parametrize("body, headers, status, message", [
    ({"tool": "nope"}, {}, 404, 'unknown tool "nope"'),
    ({"tool": "read_file", "params": {"path": "x"}, "stream": True}, {}, 404,
     'tool "read_file" does not support stream = true'),
    ({"tool": "read_file", "params": {}}, {}, 400, "read_file: params.path is required"),
    ({"tool": "read_file", "params": {"path": ["x"]}}, {}, 400, "read_file: params.path must be a string"),
    ({"tool": "read_file", "params": "x"}, {}, 400, "'params' must be an object"),
    ({"params": {}}, {}, 400, "'tool' is required"),
    ({"tool": "get_info"}, {"x-tool-cwd": "/etc"}, 400, "x-tool-cwd /etc: outside the working directory"),
    ({"tool": "get_info"}, {"x-tool-cwd": "../.."}, 400, "'..' is refused"),
    ({"tool": "get_info"}, {"x-tool-runtime": "ssh:me@host"}, 501, "running tools in a remote host over SSH is not supported"),
])
def test_errors(http: httpx2.Client, body: dict[str, Any], headers: dict[str, str], status: int, message: str) -> None:
    r = http.post("/tools", json=body, headers=headers)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert message in err["message"] and err["code"] == status
    if status == 404:
        assert err["type"] == "invalid_request_error"  # llama-server's


def test_stream_and_client_leaving_kills_the_command(http: httpx2.Client, srv: LlamaServer, work: Path) -> None:
    body = {"tool": "exec_shell_command", "params": {"command": "echo one; sleep 0.3; echo two"}, "stream": True}
    with http.stream("POST", "/tools", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == {"done": True}
    assert "".join(e["chunk"] for e in events[:-1]) == "one\ntwo\n\n[exit code: 0]" and len(events) >= 4

    marker = work / "should-not-exist"
    body = {"tool": "exec_shell_command", "params": {"command": f"echo started; sleep 3; touch {marker.name}",
                                                     "timeout": 30}, "stream": True}
    with http.stream("POST", "/tools", json=body) as r:
        for line in r.iter_lines():
            if "started" in line:
                break  # leave: the response is closed here
    time.sleep(4)
    assert not marker.exists()
    assert srv.get("/health")[0] == 200
    assert "tool exec_shell_command" in srv.log() and "-> error: cancelled" in srv.log()


def test_every_call_is_logged(http: httpx2.Client, srv: LlamaServer) -> None:
    call(http, "read_file", {"path": "notes.txt"})
    assert 'llama serve: tool read_file({"path": "notes.txt"}) -> ok in' in srv.log()
    assert "llama serve: tools on: read_file, file_glob_search" in srv.log()
    assert http.get("/cors-proxy", params={"url": "ftp://x"}).status_code == 400  # -ag turned the proxy on (not 403)


def test_api_key_and_cors(srv: LlamaServer) -> None:
    assert srv.get("/tools")[0] == 401
    assert srv.post("/tools", {"tool": "get_info"})[0] == 401
    key = {"Authorization": "Bearer sekrit"}
    ok = httpx2.get(srv.url + "/tools", headers={**key, "Origin": "http://localhost:5173"})
    assert ok.headers.get("access-control-allow-origin") == "http://localhost:5173"
    evil = httpx2.get(srv.url + "/tools", headers={**key, "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in evil.headers  # --tools: CORS defaults to localhost


def test_mcp_crash_and_hang_leave_the_server_up(http: httpx2.Client, srv: LlamaServer) -> None:
    pid = call(http, "t_pid", {})[1]
    assert call(http, "t_crash", {}) == (200, {"error": "MCP server 't' stopped during the call"})
    assert srv.get("/health")[0] == 200
    assert call(http, "t_pid", {})[1] != pid  # respawned on demand
    assert call(http, "t_sleepy", {"seconds": 60}) == (200, {"error": "request timed out after 3 s"})
    assert srv.get("/health")[0] == 200 and call(http, "t_echo", {"text": "ok"}) == (200, {"plain_text_response": "ok"})


def test_no_tools_is_403(work: Path) -> None:
    with LlamaServer("-m", str(work / "tiny.gguf"), "-c", "256", "-np", "1", "--no-warmup", cwd=work) as s:
        for status, body in (s.get("/tools"), s.post("/tools", {"tool": "read_file"})):
            assert status == 403 and body["error"]["message"] == "this feature is disabled"
            assert body["error"]["type"] == "feature_disabled"
        assert "access-control-allow-origin" in httpx2.get(s.url + "/health", headers={"Origin": "https://x.example"}).headers


@pytest.mark.parametrize("args, message", [
    (["--tools", "read_file,cat"], 'error: unknown tool "cat". available tools: read_file, file_glob_search'),
    (["--tools", "all", "--tools-runtime", "docker:alpine"],
     "error: --tools-runtime docker:alpine: running tools in a new docker container is not supported by llamacli"),
    (["--mcp-servers-json", "{"], "error: --mcp-servers-json: not JSON"),
])
def test_bad_tool_flags_exit_1(work: Path, args: list[str], message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "llamacli", "serve", "-m", str(work / "tiny.gguf"), *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1


def test_openapi_describes_each_tools_call(http: httpx2.Client) -> None:
    """/openapi.json gives POST /tools one body shape per tool: its name and its parameters."""
    doc = http.get("/openapi.json").json()
    post = doc["paths"]["/tools"]["post"]
    shapes = post["requestBody"]["content"]["application/json"]["schema"]["anyOf"]
    by_name = {s["properties"]["tool"]["const"]: s["properties"]["params"] for s in shapes}
    assert list(by_name)[:2] == ["read_file", "file_glob_search"] and "t_add" in by_name
    assert by_name["write_file"]["required"] == ["path", "content"]
    assert {"200", "400", "403", "404", "501"} <= set(post["responses"])
