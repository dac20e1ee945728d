"""exec_shell_command and get_info, as llama-server defines them (server-tools.cpp).

A shell command runs with the server's privileges in the call's working directory: the sandbox
confines the file tools, not what a command does, which is why this tool is a write tool (the
REPL and the page ask before running it) and is off unless named or `all` is given. Its output
streams when asked; a timeout (at most 60 s) or a cancel (Ctrl-C, a client that left) kills it
and everything it started (process.py)."""

from __future__ import annotations

import platform
from typing import Any

from llamacli.core.tools.base import AgentTool, Call, Result
from llamacli.core.tools.process import ProcessResult, run_process

MAX_OUTPUT = 16 * 1024
MAX_TIMEOUT_S = 60
DEFAULT_TIMEOUT_S = 10


def exit_note(res: ProcessResult) -> str:
    """The line llama-server ends a command's output with."""
    note = f"\n[exit code: {res.exit_code}]"
    return note + (" [exit due to timed out]" if res.timed_out else "")


class ExecShellCommand(AgentTool):
    name = "exec_shell_command"
    display_name = "Execute shell command"
    description = "Execute a shell command and return its output (stdout and stderr combined)."
    writes = True
    streams = True

    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {
            "command": {"type": "string", "description": "Shell command to execute"},
            "timeout": {"type": "integer",
                        "description": f"Timeout in seconds (default {DEFAULT_TIMEOUT_S}, max {MAX_TIMEOUT_S})"},
            "max_output_size": {"type": "integer", "description": f"Maximum output size in bytes (default {MAX_OUTPUT})"},
        }, "required": ["command"]}

    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        timeout = params.get("timeout")
        timeout = min(max(DEFAULT_TIMEOUT_S if timeout is None else timeout, 0), MAX_TIMEOUT_S)
        size = params.get("max_output_size")
        size = min(max(MAX_OUTPUT if size is None else size, 0), MAX_OUTPUT)
        res = run_process(["sh", "-c", params["command"]], cwd=call.cwd, timeout=timeout, max_output=size,
                          on_chunk=call.on_chunk, cancelled=call.cancelled)
        if res.cancelled:
            return {"error": "cancelled"}
        tail = exit_note(res)
        if call.on_chunk is not None:
            call.on_chunk(tail)
        return {"plain_text_response": res.output + tail}


class GetInfo(AgentTool):
    name = "get_info"
    display_name = "Get Runtime Info"
    description = "Returns runtime info: the OS name/version and the current working directory"

    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {}}

    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        res = run_process(["uname", "-a"], cwd=call.cwd, timeout=5, max_output=4096)
        os_info = res.output.strip() if res.exit_code == 0 and not res.timed_out else platform.platform()
        return {"os": os_info, "cwd": str(call.cwd)}
