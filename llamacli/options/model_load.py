"""`llama serve`'s options for opening its model (beside -m/-hf, options/model_source.py): the
chat template, LoRA adapters, numerics, threads and the warm-up run. They become one
LoadOptions, what `llamacli.loading.open_model` takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from llamacli.options.common import LORA, LORA_SCALED, NUMERICS, THREADS, lora_specs
from llamacli.options.groups import Opt

OPTIONS: list[Opt] = [
    Opt("chat_template", Optional[str], None, ("--chat-template",), "Chat template: a built-in name or Jinja source."),
    Opt("chat_template_file", Optional[str], None, ("--chat-template-file",), "Read the Jinja chat template from a file."),
    Opt("jinja", bool, True, ("--jinja/--no-jinja",), "Run Jinja templates (off: built-in formats only)."),
    LORA,
    LORA_SCALED,
    Opt("lora_init_without_apply", bool, False, ("--lora-init-without-apply",),
        "Load the LoRA adapters with scale 0 (apply them later with POST /lora-adapters)."),
    NUMERICS,
    THREADS,
    Opt("warmup", bool, True, ("--warmup/--no-warmup",), "Run one token through the model before serving."),
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
    template = values["chat_template"]
    if values["chat_template_file"]:
        with open(values["chat_template_file"], encoding="utf-8") as f:
            template = f.read()
    adapters = [(p, 0.0 if values["lora_init_without_apply"] else s) for p, s in lora_specs(values["lora"], values["lora_scaled"])]
    return LoadOptions(template, values["jinja"], adapters, values["numerics"], values["threads"], values["warmup"])
