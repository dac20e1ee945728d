"""MCP servers (core/tools/mcp_config.py, mcp_client.py) with a real server written with the
SDK (tests/mcp_server.py): the Cursor config, tools listed at start as <server>_<tool>, calls,
respawn after a crash, per-call timeouts, cancel, and servers that never start."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from llamacli.core.tools import McpConfigError, McpManager, McpServerConfig, ToolBox, load_mcp_configs, parse_mcp_config
from llamacli.core.tools import mcp_client

pytest.importorskip("mcp")
SERVER = str(Path(__file__).with_name("mcp_server.py"))


def test_config_cursor_format(tmp_path: Path) -> None:
    warned: list[str] = []
    text = json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "srv"], "env": {"K": "v"}, "cwd": "/srv", "timeout_ms": 1500},
        "other": {"command": "x", "timeout": 2},
        "nocommand": {"args": []},
    }})
    cfgs = parse_mcp_config(text, "cfg", warned.append)
    assert cfgs == [McpServerConfig("files", "npx", ("-y", "srv"), {"K": "v"}, "/srv", 1.5),
                    McpServerConfig("other", "x", (), {}, None, 2.0)]
    assert warned == ["cfg: mcpServers.nocommand has no command; skipped"]
    assert parse_mcp_config("{}", "cfg", warned.append) == [] and "no MCP servers found" in warned[-1]
    for bad, msg in [
        ("{", "cfg: not JSON"), ("[]", "expected a JSON object"),
        ('{"mcpServers": {"a": 1}}', "mcpServers.a must be an object"),
        ('{"mcpServers": {"a": {"command": "x", "args": "y"}}}', "mcpServers.a.args must be an array of strings"),
        ('{"mcpServers": {"a": {"command": "x", "env": {"k": 1}}}}', "mcpServers.a.env must be an object of strings"),
        ('{"mcpServers": {"a": {"command": "x", "timeout_ms": -1}}}', "mcpServers.a.timeout_ms must be a positive number"),
        ('{"mcpServers": {"a": {"command": "x", "timeout_ms": 1, "timeout": 1}}}', "not both"),
        ('{"mcpServers": {"a b": {"command": "x"}}}', "a server name must be"),
    ]:
        with pytest.raises(McpConfigError, match=__import__("re").escape(msg)):
            parse_mcp_config(bad, "cfg", warned.append)
    f = tmp_path / "mcp.json"
    f.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}))
    both = load_mcp_configs(str(f), json.dumps({"mcpServers": {"a": {"command": "y"}, "b": {"command": "z"}}}), warned.append)
    assert [(c.name, c.command) for c in both] == [("a", "x"), ("b", "z")] and "given twice" in warned[-1]
    with pytest.raises(McpConfigError, match="--mcp-servers-config /nonexistent.json: No such file"):
        load_mcp_configs("/nonexistent.json", None, warned.append)


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    with open(tmp_path / "mcp-stderr.log", "w") as f:
        yield f


def _children(marker: str) -> list[str]:
    """Live processes whose command line has `marker` (this test's own servers)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmd and SERVER in cmd:
                out.append(pid)
    return out


def test_servers_listed_called_respawned(errlog: TextIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_client, "WARMUP_S", 3.0)
    logs: list[str] = []
    marker = f"--marker={tmp_path.name}"  # ignored by the server: tells this test's children apart
    cfgs = [
        McpServerConfig("t", sys.executable, (SERVER, "env", marker), {"MCP_TEST_VALUE": "from-config"}, str(tmp_path), 2.0),
        McpServerConfig("hang", sys.executable, (SERVER, "hang-on-start", marker)),
        McpServerConfig("gone", sys.executable, (SERVER, "exit-on-start", marker)),
        McpServerConfig("missing", "/nonexistent/mcp-server"),
    ]
    box = ToolBox.build(["read_file"], tmp_path, McpManager(cfgs, logs.append, errlog), logs.append)
    try:
        box.start()
        names = [t["tool"] for t in box.listing()]
        assert names == ["read_file", "t_add", "t_echo", "t_pid", "t_sleepy", "t_crash", "t_fail", "t_env", "t_cwd"]
        assert not _children(marker)  # every server was stopped after listing
        rows = {t["tool"]: t for t in box.listing()}
        assert rows["t_add"]["type"] == "mcp" and rows["t_add"]["permissions"] == {"write": True}
        assert rows["t_echo"]["permissions"] == {"write": False}  # readOnlyHint
        assert rows["t_add"]["definition"]["function"]["parameters"]["required"] == ["a", "b"]
        for name in ("hang", "gone", "missing"):
            assert any(f"MCP server {name!r}: cannot list its tools" in line for line in logs), logs

        def call(name: str, **params: object) -> dict[str, object]:
            return box.invoke(box.find(name), dict(params), box.call())

        assert call("t_add", a=2, b=3) == {"plain_text_response": "5"}
        assert call("t_env") == {"plain_text_response": "from-config"}
        assert call("t_cwd") == {"plain_text_response": str(tmp_path)}
        assert call("t_echo", text="héllo") == {"plain_text_response": "héllo"}
        pid = call("t_pid")
        assert call("t_pid") == pid and len(_children(marker)) == 1  # one server, kept for the next calls
        assert call("t_fail") == {"error": "Error executing tool fail"}
        assert call("t_add", a="x", b=1)["error"]  # the server checks its own schema

        assert call("t_crash") == {"error": "MCP server 't' stopped during the call"}
        assert call("t_pid") != pid  # started again on demand
        assert call("t_sleepy", seconds=30) == {"error": "request timed out after 2 s"}
        assert call("t_add", a=1, b=1) == {"plain_text_response": "2"}  # a fresh server after the timeout

        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        assert box.invoke(box.find("t_sleepy"), {"seconds": 30}, box.call(cancelled=cancel)) == {"error": "cancelled"}
        assert any("tool t_add({\"a\": 2, \"b\": 3}) -> ok in" in line for line in logs)
    finally:
        box.close()
    deadline = time.monotonic() + 10
    while _children(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _children(marker)
    assert box.mcp is not None and box.mcp.call("t", "pid", {}) == {"error": "the server is shutting down"}


def test_a_server_that_cannot_start_waits_out_a_cooldown(errlog: TextIO, tmp_path: Path) -> None:
    logs: list[str] = []
    mgr = McpManager([McpServerConfig("gone", sys.executable, (SERVER, "exit-on-start"), timeout_s=5)], logs.append,
                     errlog)
    try:
        first = mgr.call("gone", "pid", {})
        assert str(first["error"]).startswith("MCP server 'gone' did not start")
        assert mgr.call("gone", "pid", {}) == {"error": "MCP server unavailable: gone"}  # no respawn storm
    finally:
        mgr.close()
