"""The tools one server (or chat) offers: the built-in ones named by `--tools` (or `all`, or
`--agent`) and the MCP servers' tools, in one list, as llama-server's server_tools::setup.

    box = ToolBox.build(["all"], root=".", mcp=McpManager(configs, log), log=log)
    box.start()                                  # lists the MCP servers' tools
    box.listing()                                # GET /tools
    box.invoke("read_file", {"path": "a.txt"})   # {"plain_text_response": ...}
    box.close()

Every invocation is logged (`tool NAME(params) -> ok|error in N ms`, params cut at 200
characters). `--tools-runtime`'s forms are checked by `check_runtime`, which refuses them all
here: no container engine or SSH runtime is provided."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llamacli.core.tools.base import AgentTool, Call, Result
from llamacli.core.tools.edit import EditFile
from llamacli.core.tools.errors import RuntimeUnsupported, ToolParamsError, UnknownTool
from llamacli.core.tools.files import ReadFile, WriteFile
from llamacli.core.tools.mcp_client import McpManager, McpTool
from llamacli.core.tools.sandbox import PathRefused, Sandbox
from llamacli.core.tools.search import FileGlobSearch, GrepSearch
from llamacli.core.tools.shell import ExecShellCommand, GetInfo

# llama-server's order (build_tools)
BUILTIN: tuple[type[AgentTool], ...] = (ReadFile, FileGlobSearch, GrepSearch, ExecShellCommand, WriteFile, EditFile, GetInfo)
BUILTIN_NAMES = tuple(t.name for t in BUILTIN)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")  # what a chat request's tool names may be
LOG_PARAMS = 200


def parse_tool_names(names: list[str]) -> list[str]:
    """--tools' names checked ("all" stands for every built-in tool); an unknown one is an error
    listing the available ones."""
    for n in names:
        if n != "all" and n not in BUILTIN_NAMES:
            raise ToolParamsError(f"unknown tool \"{n}\". available tools: {', '.join(BUILTIN_NAMES)}")
    return list(BUILTIN_NAMES) if "all" in names else [n for n in BUILTIN_NAMES if n in names]


_CONTAINER = re.compile(r"^(docker|podman)(-container)?:(.*)$", re.S)
_CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SSH_TARGET = re.compile(r"^[A-Za-z0-9._@][A-Za-z0-9._@-]*$")


def check_runtime(spec: str, where: str = "--tools-runtime") -> None:
    """The forms llama-server accepts (docker:IMAGE, podman:IMAGE, docker-container:ID,
    podman-container:ID, ssh:TARGET) are read and checked as it checks them; each is then
    refused, since only the host runtime exists here. Always raises RuntimeUnsupported."""
    m = _CONTAINER.match(spec)
    if m:
        engine, attach, arg = m.groups()
        if not arg:
            raise RuntimeUnsupported(f"{where} {spec}: {engine}:<image> requires an image name")
        if attach and not _CONTAINER_ID.match(arg):
            raise RuntimeUnsupported(f"{where} {spec}: invalid container id: {arg}")
        what = f"an existing {engine} container" if attach else f"a new {engine} container"
    elif spec.startswith("ssh:"):
        target = spec[4:]
        if not _SSH_TARGET.match(target):
            raise RuntimeUnsupported(f"{where} {spec}: invalid ssh target: {target}")
        what = "a remote host over SSH"
    else:
        raise RuntimeUnsupported(f"unknown {where} option: {spec} (expected docker:IMAGE, podman:IMAGE, "
                                 "docker-container:ID, podman-container:ID or ssh:TARGET)")
    raise RuntimeUnsupported(f"{where} {spec}: running tools in {what} is not supported by llamacli; "
                             "tools run on this host, confined to the working directory")


class ToolBox:
    def __init__(self, tools: list[AgentTool], sandbox: Sandbox, mcp: McpManager | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.tools = list(tools)
        self.sandbox = sandbox
        self.mcp = mcp
        self.log = log or (lambda msg: None)
        self._started = threading.Lock()
        self._mcp_listed = False
        self._running: set[Call] = set()  # calls in progress, cancelled by close()

    @classmethod
    def build(cls, names: list[str], root: str | Path = ".", mcp: McpManager | None = None,
              log: Callable[[str], None] | None = None) -> ToolBox:
        chosen = set(parse_tool_names(names))
        return cls([t() for t in BUILTIN if t.name in chosen], Sandbox.at(root), mcp, log)

    def start(self) -> None:
        """List the MCP servers' tools and add them (once; a name already taken is skipped)."""
        with self._started:
            if self.mcp is None or self._mcp_listed:
                return
            self._mcp_listed = True
            taken = {t.name for t in self.tools}
            added = 0
            for spec in self.mcp.list_tools():
                tool = McpTool(spec, self.mcp)
                if tool.name in taken or not _TOOL_NAME.match(tool.name):
                    why = "collides with an existing tool" if tool.name in taken else "is not a valid tool name"
                    self.log(f"MCP tool {tool.name!r} from server {spec.server!r} {why}; skipped")
                    continue
                taken.add(tool.name)
                self.tools.append(tool)
                added += 1
            if added:
                self.log(f"added {added} MCP tools")

    def __bool__(self) -> bool:
        return bool(self.tools)

    def listing(self) -> list[dict[str, Any]]:
        """GET /tools."""
        return [t.to_json() for t in self.tools]

    def definitions(self) -> list[dict[str, Any]]:
        """The OpenAI tool definitions, for a chat request's `tools`."""
        return [t.definition() for t in self.tools]

    def find(self, name: str, stream: bool = False) -> AgentTool:
        for t in self.tools:
            if t.name == name:
                if stream and not t.streams:
                    raise UnknownTool(f"tool \"{name}\" does not support stream = true")
                return t
        raise UnknownTool(f"unknown tool \"{name}\"")

    def call(self, cwd: str | None = None, **kw: Any) -> Call:
        """A Call in the sandbox; `cwd` is the x-tool-cwd header (ToolParamsError when refused)."""
        try:
            directory = self.sandbox.directory(cwd)
        except PathRefused as e:
            raise ToolParamsError(str(e)) from None
        return Call(self.sandbox, directory, **kw)

    def invoke(self, tool: AgentTool, params: dict[str, Any], call: Call) -> Result:
        """Run `tool` (its params already checked), logging the call and its outcome."""
        t0 = time.perf_counter()
        shown = json.dumps(params, ensure_ascii=False)
        shown = shown if len(shown) <= LOG_PARAMS else shown[:LOG_PARAMS] + "..."
        self._running.add(call)
        try:
            result = tool.invoke(params, call)
        except Exception as e:  # noqa: BLE001 - a tool's bug is the call's error, logged
            result = {"error": f"{type(e).__name__}: {e}"}
        finally:
            self._running.discard(call)
        ms = (time.perf_counter() - t0) * 1e3
        outcome = f"error: {result['error']}" if "error" in result else "ok"
        self.log(f"tool {tool.name}({shown}) -> {outcome[:200]} in {ms:.0f} ms")
        return result

    def close(self) -> None:
        """Cancel the calls in progress (their commands are killed) and stop the MCP servers."""
        for call in list(self._running):
            call.cancelled.set()
        if self.mcp is not None:
            self.mcp.close()
