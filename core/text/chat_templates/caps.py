"""What a Jinja template can take, probed by rendering, as llama.cpp's jinja caps do.

llama.cpp (common/jinja/caps.cpp) renders small probe conversations and watches which input
values the template reads; then it adapts the messages (common/chat.cpp workarounds): a system
message is merged into the next one when the template has no system role, typed content is
flattened for string-only templates, JSON-string tool arguments become objects for templates
that read them as objects. jinja2 cannot watch reads, so we look for unique markers in the
output instead, which answers the same questions for real templates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .jinja_env import compile_template, render_template
from .messages import ChatTemplateError, Message

_SYS = "SYSTEM_PROBE_9f3a"
_USER = "USER_PROBE_9f3a"
_ARG = "ARG_PROBE_9f3a"
_TOOL = "TOOL_PROBE_9f3a"

_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _TOOL,
            "description": "Tool description",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "Arg description"}},
                "required": ["arg"],
            },
        },
    }
]


@dataclass(frozen=True)
class TemplateCaps:
    """Capabilities of one Jinja chat template."""

    supports_system_role: bool
    supports_string_content: bool
    supports_typed_content: bool
    supports_tools: bool
    supports_tool_calls: bool
    supports_object_arguments: bool


def _try(source: str, messages: list[Message], tools: list[Any] | None = None) -> str | None:
    ctx: dict[str, Any] = {"messages": messages, "bos_token": "", "eos_token": "", "add_generation_prompt": True}
    ctx["tools"] = tools if tools is not None else []
    try:
        return render_template(compile_template(source), ctx)
    except ChatTemplateError:
        return None


def _tool_conversation(arguments: Any) -> list[Message]:
    call = {"id": "call00001", "type": "function", "function": {"name": _TOOL, "arguments": arguments}}
    return [
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ]


def _contains(marker: str) -> Callable[[str | None], bool]:
    return lambda out: out is not None and marker in out


@lru_cache(maxsize=64)
def probe_caps(source: str) -> TemplateCaps:
    """Probe ``source`` (cached by its text). Raises ChatTemplateError only for a syntax error."""
    compile_template(source)
    has_sys = _contains(_SYS)
    has_user = _contains(_USER)
    system = has_sys(_try(source, [{"role": "system", "content": _SYS}, {"role": "user", "content": _USER}]))
    string = has_user(_try(source, [{"role": "user", "content": _USER}]))
    typed_out = _try(source, [{"role": "user", "content": [{"type": "text", "text": _USER}]}])
    # A template that prints the list itself shows the marker inside the list's repr: not typed.
    typed = has_user(typed_out) and f"'text': '{_USER}'" not in str(typed_out)
    typed = typed and f'"text": "{_USER}"' not in str(typed_out)
    obj_out = _try(source, _tool_conversation({"arg": _ARG}), _PROBE_TOOLS)
    str_out = _try(source, _tool_conversation('{"arg": "' + _ARG + '"}'), _PROBE_TOOLS)
    tool_out = obj_out if obj_out is not None else str_out
    tools_only = _try(source, [{"role": "user", "content": _USER}], _PROBE_TOOLS) or ""
    # The tool name shows in the tool list too: a call adds at least one more occurrence.
    tool_calls = tool_out is not None and tool_out.count(_TOOL) > tools_only.count(_TOOL)
    return TemplateCaps(
        supports_system_role=system,
        supports_string_content=string,
        supports_typed_content=typed,
        supports_tools=_TOOL in tools_only,
        supports_tool_calls=tool_calls,
        supports_object_arguments=_contains(_ARG)(obj_out),
    )

