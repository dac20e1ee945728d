"""The model's tools, for `llama serve` (GET/POST /tools) and `llama chat` (its tool loop):
`--tools NAME,...|all` (llama-server's built-in tools), `--tools-runtime` (checked, then
refused: only the host runtime exists), `--mcp-servers-config FILE` / `--mcp-servers-json JSON`
(MCP servers, Cursor's format). They become one ToolOptions; `open_toolbox` makes the ToolBox
the drivers use (core/tools/)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, TextIO

from llamacli.core.tools import (
    BUILTIN_NAMES, McpConfigError, McpManager, McpServerConfig, ToolBox, check_runtime, load_mcp_configs, parse_tool_names,
)
from llamacli.options.groups import TOOLS, Opt, in_panel, option_group
from llamacli.options.llama_flags import note

OPTIONS: list[Opt] = in_panel(TOOLS, [
    Opt("tools", Optional[str], None, ("--tools",),
        "Built-in tools the model may call, comma-separated, or all: " + ", ".join(BUILTIN_NAMES)
        + ". File tools see only the working directory; exec_shell_command runs any command. "
        "Do not enable in untrusted environments (`llama serve`: limits --cors-origins to localhost by default)."),
    Opt("tools_runtime", Optional[str], None, ("--tools-runtime",),
        "llama-server's tool runtimes (docker:IMAGE, podman:IMAGE, docker-container:ID, podman-container:ID, "
        "ssh:TARGET) are refused: tools run on this host only."),
    Opt("mcp_servers_config", Optional[str], None, ("--mcp-servers-config",),
        "JSON file of MCP servers (Cursor's mcpServers format; stdio), whose tools are offered as SERVER_TOOL."),
    Opt("mcp_servers_json", Optional[str], None, ("--mcp-servers-json",), "The same MCP servers JSON, given inline."),
])


@dataclass(frozen=True)
class ToolOptions:
    names: list[str] = field(default_factory=list)  # built-in tools, in llama-server's order
    mcp: list[McpServerConfig] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return bool(self.names or self.mcp)


def build(values: dict[str, Any]) -> ToolOptions:
    """ToolOptions from the options' values; an unknown tool, a runtime or a bad MCP config is an
    InvalidRequest (exit 1, one line)."""
    if values["tools_runtime"]:
        check_runtime(values["tools_runtime"])  # always raises: no container or SSH runtime here
    names = parse_tool_names([t.strip() for t in (values["tools"] or "").split(",") if t.strip()])
    configs = load_mcp_configs(values["mcp_servers_config"], values["mcp_servers_json"], lambda m: note(m))
    if configs and importlib.util.find_spec("mcp") is None:
        raise McpConfigError("MCP servers need the mcp package: pip install 'llamacli[mcp]'")
    return ToolOptions(names, configs)


# Replace fn's `tools` parameter with the options (in the Tools panel of --help); call fn with a ToolOptions.
tool_options = option_group("tools", OPTIONS, build, prefixed=False)


def open_toolbox(opts: ToolOptions, log: Callable[[str], None], *, all_builtin: bool = False,
                 errlog: TextIO | None = None) -> ToolBox | None:
    """The tools over the working directory (every built-in one with all_builtin, for --agent),
    or None when there are none. `ToolBox.start()` then lists the MCP servers' tools."""
    names = list(BUILTIN_NAMES) if all_builtin else opts.names
    if not names and not opts.mcp:
        return None
    mcp = McpManager(opts.mcp, log, errlog) if opts.mcp else None
    return ToolBox.build(names, os.getcwd(), mcp, log)
