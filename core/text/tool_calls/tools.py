"""The request side of tool calling: `tools`, `tool_choice`, `parallel_tool_calls`, checked.

Accepts OpenAI's shapes (`{"type": "function", "function": {name, description, parameters}}`;
tool_choice "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}})
and Anthropic's (`{name, description, input_schema}`; {"type": "auto" | "any" | "none" |
"tool", "name": ...}), so that every adapter can hand its request over unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamacli.core.errors import InvalidRequest

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        fn["parameters"] = self.parameters
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolChoice:
    mode: str  # "auto", "none", "required"
    name: str | None = None  # a named function (mode "required")


def parse_tools(tools: Any) -> list[Tool]:
    """Checked tool definitions (an empty list for None)."""
    if tools is None:
        return []
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)):
        raise InvalidRequest("\"tools\" must be an array of tool definitions")
    out: list[Tool] = []
    seen: set[str] = set()
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping):
            raise InvalidRequest(f"tools[{i}] must be an object")
        if "function" in t or t.get("type") == "function":
            if t.get("type", "function") != "function":
                raise InvalidRequest(f"tools[{i}].type must be \"function\"")
            fn = t.get("function")
            if not isinstance(fn, Mapping):
                raise InvalidRequest(f"tools[{i}].function must be an object")
            params = fn.get("parameters")
        else:  # Anthropic: {name, description, input_schema}
            fn = t
            params = t.get("input_schema")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidRequest(f"tools[{i}] needs a name of letters, digits, _ . : - (got {name!r})")
        if name in seen:
            raise InvalidRequest(f"tools[{i}]: the tool name {name!r} is used twice")
        seen.add(name)
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, (Mapping, bool)):
            raise InvalidRequest(f"tools[{i}] ({name}): parameters must be a JSON schema object")
        desc = fn.get("description") or ""
        if not isinstance(desc, str):
            raise InvalidRequest(f"tools[{i}] ({name}): description must be a string")
        out.append(Tool(name, desc, dict(params) if isinstance(params, Mapping) else params))  # type: ignore[arg-type]
    return out


def parse_tool_choice(tool_choice: Any, tools: Sequence[Tool]) -> ToolChoice:
    """tool_choice checked against the tools (default: auto when there are tools)."""
    if tool_choice is None:
        return ToolChoice("auto" if tools else "none")
    name: Any = None
    if isinstance(tool_choice, str):
        mode = tool_choice
        if mode == "any":
            mode = "required"
        if mode not in ("auto", "none", "required"):
            raise InvalidRequest(f"\"tool_choice\" must be auto, none, required or a named function (got {tool_choice!r})")
    elif isinstance(tool_choice, Mapping):
        kind = tool_choice.get("type")
        if kind == "function":
            fn = tool_choice.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else tool_choice.get("name")
            mode = "required"
        elif kind == "tool":
            name = tool_choice.get("name")
            mode = "required"
        elif kind in ("auto", "none", "any", "required"):
            mode = "required" if kind == "any" else str(kind)
        else:
            raise InvalidRequest("\"tool_choice\" object must be {\"type\": \"function\", \"function\": {\"name\": ...}}")
        if mode == "required" and kind in ("function", "tool") and not isinstance(name, str):
            raise InvalidRequest("\"tool_choice\" names no function")
    else:
        raise InvalidRequest("\"tool_choice\" must be a string or an object")
    if mode != "none" and not tools:
        raise InvalidRequest(f"\"tool_choice\": {mode} needs \"tools\"")
    if name is not None and name not in {t.name for t in tools}:
        raise InvalidRequest(f"\"tool_choice\" names {name!r}, which is not among the tools")
    return ToolChoice(mode, name)


def parse_parallel(parallel_tool_calls: Any) -> bool:
    if parallel_tool_calls is None:
        return False
    if not isinstance(parallel_tool_calls, bool):
        raise InvalidRequest("\"parallel_tool_calls\" must be true or false")
    return parallel_tool_calls
