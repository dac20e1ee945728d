"""A tool the model can call: its OpenAI definition, how it is listed by GET /tools, and its
`invoke(params, call)`, which returns llama-server's result shapes:

    {"plain_text_response": "..."}     text for the model
    {"error": "..."}                   the call failed (the model is told why)
    {...}                              a tool's own fields (write_file: result, path, bytes)

`Call` carries what one invocation may use besides its params: the sandbox and the working
directory, the cancel event (a client that left, Ctrl-C), a sink for streamed output and the
`x-resp-type` header. `check_params` holds a call's params to its definition's types before
the tool runs (a mistyped field is the caller's error, answered 400)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamacli.core.tools.errors import ToolParamsError
from llamacli.core.tools.sandbox import Sandbox

Result = dict[str, Any]


@dataclass(eq=False)  # compared (and hashed) by identity: a ToolBox keeps its running calls in a set
class Call:
    sandbox: Sandbox
    cwd: Path  # inside the sandbox
    cancelled: threading.Event = field(default_factory=threading.Event)
    on_chunk: Callable[[str], None] | None = None  # set when the output is streamed
    resp_type: str = ""  # x-resp-type: "base64" makes read_file return the raw bytes

    def resolve(self, path: str, writing: bool = False) -> Path:
        return self.sandbox.resolve(path, self.cwd, writing=writing)


class AgentTool(ABC):
    # class attributes of the built-in tools; an MCP tool sets them per instance
    name: str = ""
    display_name: str = ""
    description: str = ""
    writes: bool = False  # permissions.write: the UI and the REPL ask before running it
    streams: bool = False  # POST /tools with "stream": true
    uses_cwd: bool = True
    kind: str = "server"  # "server" (built in) or "mcp"

    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the params (an object schema)."""

    @abstractmethod
    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        """Run the tool; failures come back as {"error": ...}."""

    def definition(self) -> dict[str, Any]:
        """The OpenAI tool definition the model sees."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters()}}

    def to_json(self) -> dict[str, Any]:
        """One entry of GET /tools (llama-server's server_tool::to_json)."""
        return {"display_name": self.display_name, "tool": self.name, "type": self.kind,
                "permissions": {"write": self.writes}, "uses_cwd": self.uses_cwd, "definition": self.definition()}

    def check(self, params: Mapping[str, Any]) -> None:
        """ToolParamsError unless params fit parameters(): required fields present, declared
        fields of the declared JSON types (other fields are ignored, as llama-server does)."""
        check_params(self.name, self.parameters(), params)


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def check_params(tool: str, schema: Mapping[str, Any], params: Any, where: str = "params") -> None:
    if not isinstance(params, dict):
        raise ToolParamsError(f"{tool}: {where} must be an object")
    props = schema.get("properties", {})
    for name in schema.get("required", ()):
        if params.get(name) is None:
            raise ToolParamsError(f"{tool}: {where}.{name} is required")
    for name, value in params.items():
        spec = props.get(name)
        if spec is None or value is None:
            continue  # null is "not given", as llama-server's json_value reads it
        _check_value(tool, spec, value, f"{where}.{name}")


def _check_value(tool: str, spec: Mapping[str, Any], value: Any, where: str) -> None:
    kind = spec.get("type")
    if kind in _JSON_TYPES and not _JSON_TYPES[kind](value):
        raise ToolParamsError(f"{tool}: {where} must be {'an' if kind in ('integer', 'array', 'object') else 'a'} {kind}")
    if kind == "array" and isinstance(spec.get("items"), Mapping):
        for i, item in enumerate(value):
            if spec["items"].get("type") == "object":
                check_params(tool, spec["items"], item, f"{where}[{i}]")
            else:
                _check_value(tool, spec["items"], item, f"{where}[{i}]")
