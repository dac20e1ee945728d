"""`llama serve`'s options for opening its model (beside -m/-hf, options/model_source.py): the
chat template, LoRA adapters, numerics, threads and the warm-up run. They become one
LoadOptions, what `llamacli.loading.open_model` takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from llamacli.options.common import LORA, LORA_SCALED, NUMERICS, THREADS, lora_specs, read_text_file
from llamacli.core.errors import InvalidRequest
from llamacli.options.groups import COMMON, SERVER, TEMPLATE, Opt, in_panel

def _template_name_or_source(value: str) -> None:
    from llamacli.core.text.chat_templates import check_override

    check_override(value)


# the chat template, as `chat` and `serve` take it
TEMPLATE_OPTIONS: list[Opt] = in_panel(TEMPLATE, [
    Opt("chat_template", Optional[str], None, ("--chat-template",),
        "Built-in template name (chatml, llama3, gemma, ...) or Jinja source (default: the model's).",
        metavar="NAME|JINJA", check=_template_name_or_source),
    Opt("chat_template_file", Optional[str], None, ("--chat-template-file",), "Read the Jinja chat template from a file.",
        metavar="FNAME"),
    Opt("jinja", bool, True, ("--jinja/--no-jinja",), "Run Jinja templates (--no-jinja: the built-in format they resemble)."),
])

OPTIONS: list[Opt] = [
    *TEMPLATE_OPTIONS,
    LORA,
    LORA_SCALED,
    Opt("lora_init_without_apply", bool, False, ("--lora-init-without-apply",),
        "Load the LoRA adapters with scale 0 (apply them later with POST /lora-adapters).", panel=COMMON),
    NUMERICS,
    THREADS,
    Opt("warmup", bool, True, ("--warmup/--no-warmup",), "Run one token through the model before serving.", panel=SERVER),
]


@dataclass(frozen=True)
class LoadOptions:
    chat_template: str | None  # a built-in name or Jinja source (--chat-template-file read); None: the model's
    jinja: bool
    loras: list[tuple[str, float]]  # (path, initial scale)
    numerics: str
    threads: int
    warmup: bool


def build(values: dict[str, Any]) -> LoadOptions:
    """LoadOptions from the options' values (the template file is read now)."""
    template = template_source(values["chat_template"], values["chat_template_file"])
    adapters = [(p, 0.0 if values["lora_init_without_apply"] else s) for p, s in lora_specs(values["lora"], values["lora_scaled"])]
    return LoadOptions(template, values["jinja"], adapters, values["numerics"], values["threads"], values["warmup"])


def template_source(chat_template: str | None, chat_template_file: str | None) -> str | None:
    """--chat-template's name or source, or --chat-template-file's text (read now); None: the
    model's own template."""
    if chat_template is not None and chat_template_file is not None:
        raise InvalidRequest("give --chat-template or --chat-template-file, not both")
    if chat_template_file is not None:
        return read_text_file(chat_template_file, "--chat-template-file")
    return chat_template
