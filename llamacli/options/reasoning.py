"""`llama serve`'s reasoning options: what the chat template is told about thinking (-rea,
--reasoning-effort, --reasoning-preserve, --chat-template-kwargs), where thoughts go in an
answer (--reasoning-format) and the thinking budget. They become one ReasoningOptions."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import typer

from llamacli.core.text.reasoning import REASONING_FORMATS
from llamacli.options.groups import TEMPLATE, Opt, at_least, in_panel

OPTIONS: list[Opt] = in_panel(TEMPLATE, [
    Opt("chat_template_kwargs", Optional[str], None, ("--chat-template-kwargs",), "JSON object of extra template variables."),
    Opt("reasoning", str, "auto", ("-rea", "--reasoning"),
        "Reasoning of thinking models: on, off (the prompt ends with an empty thinking block) or auto."),
    Opt("reasoning_effort", str, "default", ("--reasoning-effort",),
        "Reasoning effort given to the chat template (reasoning_effort): default keeps the template's; minimal, low, "
        "medium, high, ...; none turns thinking off."),
    Opt("reasoning_preserve", Optional[bool], None, ("--reasoning-preserve/--no-reasoning-preserve",),
        "Ask templates that can (preserve_reasoning) to keep earlier turns' reasoning in the history."),
    Opt("reasoning_format", str, "auto", ("--reasoning-format",),
        "Where thoughts go: none (left in message.content), deepseek or auto (message.reasoning_content), "
        "deepseek-legacy (both)."),
    Opt("reasoning_budget", int, -1, ("--reasoning-budget",),
        "Thinking tokens before the end tag is forced (-1: unrestricted, 0: end at once).", check=at_least(0, -1)),
    Opt("reasoning_budget_message", str, "", ("--reasoning-budget-message",),
        "Text written before the forced end-of-thinking tag when the budget runs out."),
])


@dataclass(frozen=True)
class ReasoningOptions:
    template_kwargs: dict[str, Any]  # the chat template's extra variables
    reasoning_format: str
    reasoning_budget: int
    reasoning_budget_message: str


def build(values: dict[str, Any]) -> ReasoningOptions:
    """ReasoningOptions from the options' values; validated."""
    if values["reasoning"] not in ("on", "off", "auto"):
        raise typer.BadParameter("--reasoning must be on, off or auto")
    if values["reasoning_format"] not in REASONING_FORMATS:
        raise typer.BadParameter(f"--reasoning-format must be one of: {', '.join(REASONING_FORMATS)}")
    kwargs = template_kwargs(values["chat_template_kwargs"], values["reasoning"], values["reasoning_effort"],
                             values["reasoning_preserve"])
    return ReasoningOptions(kwargs, values["reasoning_format"], values["reasoning_budget"], values["reasoning_budget_message"])


def template_kwargs(
    chat_template_kwargs: Optional[str], reasoning: str, effort: str, preserve: Optional[bool]
) -> dict[str, Any]:
    """The chat template's extra variables from --chat-template-kwargs (JSON; it wins), -rea
    (enable_thinking), --reasoning-effort (reasoning_effort; none: enable_thinking false) and
    --reasoning-preserve (preserve_reasoning), as llama-server sets them."""
    kwargs: dict[str, Any] = {}
    if chat_template_kwargs:
        try:
            kwargs = json.loads(chat_template_kwargs)
        except ValueError as e:
            raise typer.BadParameter(f"--chat-template-kwargs is not valid JSON: {e}") from None
        if not isinstance(kwargs, dict):
            raise typer.BadParameter("--chat-template-kwargs must be a JSON object")
        from llamacli.core.errors import InvalidRequest
        from llamacli.core.text.tool_calls.setup import check_template_kwargs

        try:
            check_template_kwargs(kwargs)
        except InvalidRequest as e:
            raise typer.BadParameter(f"--chat-template-kwargs: {e}") from None
    if reasoning != "auto":
        kwargs.setdefault("enable_thinking", reasoning == "on")
    if effort == "none":
        kwargs.setdefault("enable_thinking", False)
    elif effort and effort != "default":
        kwargs.setdefault("reasoning_effort", effort)
    if preserve is not None:
        kwargs.setdefault("preserve_reasoning", preserve)
    return kwargs
