"""Which tool-call format a chat template speaks, found by letting it write a probe call.

The template renders a short conversation in which the assistant calls a probe tool; how the
call comes out (`<tool_call>{"name": ...`, `[TOOL_CALLS][{...`, `{"name": ..., "parameters"`,
`<tool_call>name\n<arg_key>...`, DeepSeek's `<｜tool▁call▁begin｜>...<｜tool▁sep｜>...`,
`<tool_call>\n<function=name>`, `<seed:tool_call>\n<function=name>`,
`<minimax:tool_call>\n<invoke name="name">`)
names the format. Templates that render no tool calls, or some other syntax, get llama.cpp's
generic JSON format, whose prompt and grammar work with any template.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from llamacli.core.errors import LlamaError

if TYPE_CHECKING:
    from llamacli.core.text.chat_templates import ChatTemplate

FORMATS = ("generic", "hermes", "llama3", "mistral", "mistral_args", "glm45", "deepseek_r1", "deepseek_v31", "qwen3_coder",
           "seed_oss", "minimax_m2")

_PROBE = "probe_fn_7c1e"
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _PROBE,
            "description": "probe",
            "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]},
        },
    }
]
_PROBE_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "abcdefghi", "type": "function", "function": {"name": _PROBE, "arguments": '{"arg": "x"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "abcdefghi", "name": _PROBE, "content": "ok"},
    {"role": "assistant", "content": "done"},
    {"role": "user", "content": "again"},
]
_N = re.escape(_PROBE)
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hermes", re.compile(r'<tool_call>\s*\{\s*"name"\s*:\s*"' + _N + '"')),
    ("mistral", re.compile(r'\[TOOL_CALLS\]\s*\[\s*\{\s*"name"\s*:\s*"' + _N + '"')),
    ("mistral_args", re.compile(r"\[TOOL_CALLS\]\s*" + _N + r"\s*(?:\[CALL_ID\]\w+)?\s*\[ARGS\]")),
    ("llama3", re.compile(r'\{\s*"name"\s*:\s*"' + _N + r'"\s*,\s*"parameters"\s*:')),
    ("glm45", re.compile(r"<tool_call>\s*" + _N + r"\s*<arg_key>")),
    ("deepseek_r1", re.compile(r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + _N + r"\s*```json")),
    ("deepseek_v31", re.compile(r"<｜tool▁call▁begin｜>" + _N + r"<｜tool▁sep｜>\s*\{")),
    ("qwen3_coder", re.compile(r"<tool_call>\s*<function=" + _N + ">")),
    ("seed_oss", re.compile(r"<seed:tool_call>\s*<function=" + _N + ">")),
    ("minimax_m2", re.compile(r'<minimax:tool_call>\s*<invoke name="' + _N + '">')),
)


def detect_format(template: ChatTemplate) -> str:
    """The tool-call format of the template used for requests with tools."""
    t = template.tool_use if template.tool_use is not None else template
    if not t.is_jinja:
        return "generic"
    return _detect_source(t.source)


@lru_cache(maxsize=32)
def _detect_source(source: str) -> str:
    from llamacli.core.text.chat_templates import ChatTemplate

    try:
        out = ChatTemplate.from_source(source).render(_PROBE_MESSAGES, add_generation_prompt=True, tools=_PROBE_TOOLS)
    except LlamaError:
        return "generic"
    for name, pat in _PATTERNS:
        if pat.search(out):
            return name
    return "generic"


def native_markers(fmt: str) -> tuple[str, ...]:
    """Special-token texts the format writes, kept in the output text (llama.cpp's preserved tokens)."""
    return {
        "hermes": ("<tool_call>", "</tool_call>"),
        "mistral": ("[TOOL_CALLS]",),
        "mistral_args": ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
        "llama3": ("<|python_tag|>",),
        "glm45": ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
        "deepseek_r1": _DEEPSEEK_MARKERS,
        "deepseek_v31": _DEEPSEEK_MARKERS,
        "qwen3_coder": ("<tool_call>", "</tool_call>"),
        "seed_oss": ("<seed:tool_call>", "</seed:tool_call>"),
        "minimax_m2": ("<minimax:tool_call>", "</minimax:tool_call>"),
    }.get(fmt, ())


_DEEPSEEK_MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                     "<｜tool▁call▁end｜>")
