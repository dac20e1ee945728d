"""A small MCP server for the tests, written with the official SDK (`mcp`, MCPServer), run over
stdio as `python tests/mcp_server.py [MODE]`:

    (no mode)        serve: add, echo (read-only), pid, sleepy, crash, fail
    hang-on-start    never answer `initialize`
    exit-on-start    exit before reading anything
    env              like the default, plus `env` (reads MCP_TEST_VALUE) and `cwd`
"""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "exit-on-start":
        sys.exit(3)
    if mode == "hang-on-start":
        time.sleep(3600)

    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    app = MCPServer("llamacli-test")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @app.tool()
    def pid() -> int:
        """This server's process id."""
        return os.getpid()

    @app.tool()
    def sleepy(seconds: float) -> str:
        """Sleep, then answer."""
        time.sleep(seconds)
        return "slept"

    @app.tool()
    def crash() -> str:
        """Exit the server mid-call."""
        os._exit(7)

    @app.tool()
    def fail() -> str:
        """Fail with a tool error."""
        raise ValueError("it failed on purpose")

    if mode == "env":

        @app.tool()
        def env() -> str:
            """MCP_TEST_VALUE from the environment."""
            return os.environ.get("MCP_TEST_VALUE", "")

        @app.tool()
        def cwd() -> str:
            """The server's working directory."""
            return os.getcwd()

    app.run()
