"""MCP servers from a Cursor-style JSON config (`--mcp-servers-config FILE`, `--mcp-servers-json`):

    {"mcpServers": {"files": {"command": "npx", "args": ["-y", "@mcp/server-files", "."],
                              "env": {"KEY": "value"}, "cwd": "/srv", "timeout_ms": 30000}}}

As llama-server reads it: `command` is required (an entry without one is skipped with a
warning), `env` is merged over the parent environment, `timeout_ms` is the per-call limit
(default 30 s); `timeout`, in seconds, is accepted too (Cline's spelling). A config without
`mcpServers` has no servers; a name given twice keeps its first definition. Wrong types are an
error naming the key, and so is a server name that cannot prefix tool names (`<server>_<tool>`
must be a valid tool name)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamacli.core.errors import InvalidRequest

DEFAULT_TIMEOUT_S = 30.0
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class McpConfigError(InvalidRequest):
    """An MCP config that cannot be used."""


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


def parse_mcp_config(text: str, source: str, warn: Callable[[str], None]) -> list[McpServerConfig]:
    """The servers of one JSON document (`source` names it in errors)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise McpConfigError(f"{source}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise McpConfigError(f"{source}: expected a JSON object with \"mcpServers\"")
    servers = data.get("mcpServers")
    if not isinstance(servers, dict) or not servers:
        warn(f"{source}: no MCP servers found (expected {{\"mcpServers\": {{NAME: {{\"command\": ...}}}}}})")
        return []
    return [c for name, entry in servers.items() if (c := _server(name, entry, source, warn)) is not None]


def _server(name: str, entry: Any, source: str, warn: Callable[[str], None]) -> McpServerConfig | None:
    where = f"{source}: mcpServers.{name}"
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where} must be an object")
    command = entry.get("command")
    if not command:
        warn(f"{where} has no command; skipped")
        return None
    if not _NAME.match(name):
        raise McpConfigError(f"{where}: a server name must be 1-64 letters, digits, _ . : - (it prefixes its tools' names)")
    if not isinstance(command, str):
        raise McpConfigError(f"{where}.command must be a string")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpConfigError(f"{where}.args must be an array of strings")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise McpConfigError(f"{where}.env must be an object of strings")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise McpConfigError(f"{where}.cwd must be a string")
    return McpServerConfig(name, command, tuple(args), dict(env), cwd or None, _timeout(entry, where))


def _timeout(entry: Mapping[str, Any], where: str) -> float:
    if "timeout_ms" in entry and "timeout" in entry:
        raise McpConfigError(f"{where}: give timeout_ms or timeout (seconds), not both")
    for key, scale in (("timeout_ms", 1e-3), ("timeout", 1.0)):
        if key in entry:
            v = entry[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise McpConfigError(f"{where}.{key} must be a positive number")
            return float(v) * scale
    return DEFAULT_TIMEOUT_S


def load_mcp_configs(file: str | None, inline: str | None, warn: Callable[[str], None]) -> list[McpServerConfig]:
    """The servers of --mcp-servers-config FILE and --mcp-servers-json JSON together; a name
    that is already taken is skipped with a warning."""
    found: list[McpServerConfig] = []
    if file:
        try:
            text = Path(file).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise McpConfigError(f"--mcp-servers-config {file}: {e.strerror or e}") from None
        found += parse_mcp_config(text, f"--mcp-servers-config {file}", warn)
    if inline:
        found += parse_mcp_config(inline, "--mcp-servers-json", warn)
    out: list[McpServerConfig] = []
    for c in found:
        if any(o.name == c.name for o in out):
            warn(f"MCP config: the server name {c.name!r} is given twice; the second is skipped")
            continue
        out.append(c)
    return out
