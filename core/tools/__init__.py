"""Tools the model can call: llama-server's built-in ones (read_file, file_glob_search,
grep_search, exec_shell_command, write_file, edit_file, get_info) confined to one working
directory, and the tools of MCP servers run over stdio. Both drivers use them: `llama serve`
answers GET/POST /tools with them (http/routes_tools.py), `llama chat --tools` runs the model's
calls in its loop (llamacli/chat/agent.py). Nothing here knows HTTP or the terminal.

    box = ToolBox.build(["all"], root=".", mcp=McpManager(configs, log), log=log)
    box.start()
    tool = box.find("read_file"); tool.check(params)
    result = box.invoke(tool, params, box.call())
"""

from llamacli.core.tools.base import AgentTool, Call, Result
from llamacli.core.tools.errors import RuntimeUnsupported, ToolParamsError, UnknownTool
from llamacli.core.tools.mcp_client import McpManager, McpTool, McpToolDef
from llamacli.core.tools.mcp_config import McpConfigError, McpServerConfig, load_mcp_configs, parse_mcp_config
from llamacli.core.tools.registry import BUILTIN_NAMES, ToolBox, check_runtime, parse_tool_names
from llamacli.core.tools.sandbox import PathRefused, Sandbox

__all__ = [
    "BUILTIN_NAMES",
    "AgentTool",
    "Call",
    "McpConfigError",
    "McpManager",
    "McpServerConfig",
    "McpTool",
    "McpToolDef",
    "PathRefused",
    "Result",
    "RuntimeUnsupported",
    "Sandbox",
    "ToolBox",
    "ToolParamsError",
    "UnknownTool",
    "check_runtime",
    "load_mcp_configs",
    "parse_mcp_config",
    "parse_tool_names",
]
