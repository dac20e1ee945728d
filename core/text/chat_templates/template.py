"""``ChatTemplate``: pick a model's chat template as llama.cpp does, and render conversations.

Selection (common_chat_templates_init + llama_model_chat_template in llama.cpp):
``override`` (a built-in name or Jinja source, as ``--chat-template`` takes; ``check_override``
refuses anything else) wins; else the
named variant ``tokenizer.chat_template.<name>`` when asked for; else ``tokenizer.chat_template``
(with ``tokenizer.chat_template.tool_use`` used for requests that carry tools); else the
``tool_use`` variant alone; else a built-in default (see ``detect.default_builtin``).
Jinja templates render in the sandbox with llama.cpp's message workarounds; built-ins are the
Python ports of llama.cpp's C++ formats.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from .builtin import BUILTIN_FORMATTERS, BUILTIN_NAMES, format_builtin
from .caps import TemplateCaps, probe_caps
from .detect import default_builtin, detect_builtin
from .jinja_env import compile_template, render_template
from .thinking import close_thinking
from .messages import (
    ChatTemplateError,
    Message,
    as_text_parts,
    check_messages,
    content_text,
    merge_system_into_next,
    parse_tool_arguments,
)

KEY = "tokenizer.chat_template"
JINJA_MARKERS = ("{%", "{{")  # what makes an override Jinja source rather than a name

# Source patches llama.cpp applies before compiling (common_chat_templates_init): they drop
# checks that reject valid conversations (gpt-oss channel text, Mistral empty tool-call turns).
_PATCHES: tuple[tuple[str, str, str], ...] = (
    (
        "<|channel|>",
        '{%- if "<|channel|>analysis<|message|>" in message.content or '
        '"<|channel|>final<|message|>" in message.content %}',
        "{%- if false %}",
    ),
    (
        "[TOOL_CALLS]",
        "{%- if (message['content'] is none or message['content'] == '' or "
        "message['content']|length == 0) and (message['tool_calls'] is not defined or "
        "message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
        "{%- if false %}",
    ),
)


def _patch(source: str) -> str:
    for marker, old, new in _PATCHES:
        if marker in source:
            source = source.replace(old, new)
    return source


def _text(value: Any, key: str) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise ChatTemplateError(f"metadata key {key} is not a string")
    return value


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template: a built-in format (``name`` is its name) or Jinja source (``name == "jinja"``)."""

    name: str
    source: str
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False  # the tokenizer adds BOS itself: drop a leading bos_token from Jinja output
    add_eos: bool = False  # likewise for a trailing eos_token
    tool_use: ChatTemplate | None = field(default=None, repr=False)  # used when a request has tools

    @property
    def is_jinja(self) -> bool:
        """True for a Jinja template, False for a built-in format."""
        return self.name == "jinja"

    @property
    def detected(self) -> str | None:
        """The built-in format llama.cpp's heuristics see in this template (its --no-jinja format)."""
        return self.name if not self.is_jinja else detect_builtin(self.source)

    @property
    def caps(self) -> TemplateCaps | None:
        """What the Jinja template supports (None for built-ins)."""
        return probe_caps(self.source) if self.is_jinja else None

    @classmethod
    def from_source(
        cls,
        source: str,
        *,
        bos_token: str = "",
        eos_token: str = "",
        add_bos: bool = False,
        add_eos: bool = False,
        use_jinja: bool = True,
    ) -> ChatTemplate:
        """A built-in name or Jinja source, compiled now (a syntax error raises ChatTemplateError).

        With ``use_jinja=False`` (llama.cpp's ``--no-jinja``) Jinja source is not run: the
        built-in format its heuristics detect is used, and an unknown template is an error.
        """
        def make(name: str, text: str) -> ChatTemplate:
            return cls(name=name, source=text, bos_token=bos_token, eos_token=eos_token, add_bos=add_bos, add_eos=add_eos)

        builtin = source if source in BUILTIN_FORMATTERS else None
        if not use_jinja and builtin is None:
            builtin = detect_builtin(source)
            if builtin is None:
                raise ChatTemplateError("this custom chat template is not supported without Jinja; try --jinja")
        if builtin is not None:
            return make(builtin, builtin)
        source = _patch(source)
        compile_template(source)
        return make("jinja", source)

    @classmethod
    def from_metadata(
        cls,
        md: Mapping[str, Any],
        name: str | None = None,
        override: str | None = None,
        *,
        bos_token: str = "",
        eos_token: str = "",
        add_bos: bool | None = None,
        add_eos: bool | None = None,
        use_jinja: bool = True,
    ) -> ChatTemplate:
        """The template for a GGUF's metadata ``md``; see the module docstring for the order.

        ``bos_token``/``eos_token`` are the vocabulary's token texts; ``add_bos``/``add_eos``
        default to the file's ``tokenizer.ggml.add_bos_token``/``add_eos_token``.
        """
        bos = bool(md.get("tokenizer.ggml.add_bos_token", False)) if add_bos is None else add_bos
        eos = bool(md.get("tokenizer.ggml.add_eos_token", False)) if add_eos is None else add_eos

        def compiled(source: str) -> ChatTemplate:
            return cls.from_source(
                source, bos_token=bos_token, eos_token=eos_token, add_bos=bos, add_eos=eos, use_jinja=use_jinja
            )

        if override:
            check_override(override)
            return compiled(override)
        if name is not None and name != "default":
            key = f"{KEY}.{name}"
            if key not in md:
                known = sorted(k[len(KEY) + 1 :] for k in md if k.startswith(KEY + "."))
                raise ChatTemplateError(f"the model has no chat template named {name!r} (it has: {known or 'none'})")
            return compiled(_text(md[key], key))
        default = md.get(KEY)
        tool_use = md.get(f"{KEY}.tool_use")
        if default is None and tool_use is None:
            return compiled(default_builtin(md))
        if default is None:
            return compiled(_text(tool_use, f"{KEY}.tool_use"))
        main = compiled(_text(default, KEY))
        if tool_use is None:
            return main
        return replace(main, tool_use=compiled(_text(tool_use, f"{KEY}.tool_use")))

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[Any] | None = None,
        **extra: Any,
    ) -> str:
        """The prompt text for ``messages`` (OpenAI form). ``extra`` goes to the Jinja context
        (llama.cpp's chat_template_kwargs, e.g. ``enable_thinking=False``, ``date_string``)."""
        if tools and self.tool_use is not None:
            return self.tool_use.render(messages, add_generation_prompt, tools, **extra)
        msgs = check_messages(messages)
        if not self.is_jinja:
            chat = [(m["role"], content_text(m.get("content"))) for m in msgs]
            return format_builtin(self.name, chat, add_generation_prompt)
        context = self._context(self._adapt(msgs), add_generation_prompt, tools, extra)
        out = render_template(compile_template(self.source), context)
        if self.add_bos and self.bos_token and out.startswith(self.bos_token):
            out = out[len(self.bos_token) :]
        if self.add_eos and self.eos_token and out.endswith(self.eos_token):
            out = out[: -len(self.eos_token)]
        if add_generation_prompt and context.get("enable_thinking") is False:
            out = close_thinking(out, self.source)
        return out

    def _adapt(self, msgs: list[Message]) -> list[Message]:
        """llama.cpp's input fixes for this template's capabilities (common/chat.cpp)."""
        caps = probe_caps(self.source)
        typed_only = caps.supports_typed_content and not caps.supports_string_content
        both = caps.supports_typed_content and caps.supports_string_content
        for m in msgs:
            content = m.get("content")
            if content is None:  # llama.cpp always sends content, "" when a message has none
                content = m["content"] = ""
            if typed_only and isinstance(content, str):
                m["content"] = as_text_parts(content)
            elif not typed_only and not both and isinstance(content, list):
                m["content"] = content_text(content)
            if m["role"] == "developer" and "<|channel|>" not in self.source:
                m["role"] = "system"
        if not caps.supports_system_role:
            msgs = merge_system_into_next(msgs)
        if caps.supports_object_arguments:
            parse_tool_arguments(msgs)
        return msgs

    def _context(
        self, msgs: list[Message], add_generation_prompt: bool, tools: list[Any] | None, extra: Mapping[str, Any]
    ) -> dict[str, Any]:
        now = datetime.now()
        context: dict[str, Any] = {
            "messages": msgs,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "enable_thinking": True,
            "datetime": now.strftime("%b %d %Y"),
            "date_string": now.strftime("%d %b %Y"),
        }
        if tools:
            context["tools"] = copy.deepcopy(list(tools))
        if "+ functions" in self.source or "{{ functions" in self.source:
            # llama.cpp's FireFunction v2 handler: the tools as indented JSON text ("" when none)
            context["functions"] = json.dumps(list(tools), indent=2) if tools else ""
        context.update(copy.deepcopy(dict(extra)))
        context["add_generation_prompt"] = add_generation_prompt
        return context


def check_override(value: str) -> None:
    """A --chat-template value must be a built-in name or Jinja source (it has ``{%`` or ``{{``),
    as llama.cpp decides: a mistyped name is an error, not a template that prints the name."""
    if value in BUILTIN_FORMATTERS or any(m in value for m in JINJA_MARKERS):
        return
    raise ChatTemplateError(
        f"unknown chat template {value!r}: give Jinja source (with {{% or {{{{) or a built-in name: {', '.join(BUILTIN_NAMES)}"
    )


def builtin_names() -> tuple[str, ...]:
    """The names ``--chat-template`` accepts as built-in formats, sorted as llama.cpp lists them."""
    return BUILTIN_NAMES
