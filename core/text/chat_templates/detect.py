"""Which built-in format a template source stands for, and the default for files without one.

``detect_builtin`` is llama.cpp's ``llm_chat_detect_template`` (src/llama-chat.cpp): substring
heuristics, checked in the same order. It names the format the legacy (non-Jinja) path uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .builtin import BUILTIN_FORMATTERS

# llama.cpp gives a model without a template chatml (common_chat_templates_init), except for a
# one-off in llama_model_chat_template: a tekken vocabulary with 40 layers (Mistral-Small-2503)
# gets mistral-v7-tekken. We also pick by architecture where a family has one fixed turn format:
# a Gemma file (like the demo model, Gemma 3 270M, which ships no template) speaks Gemma's
# <start_of_turn> format, and chatml would only confuse it.
ARCH_DEFAULTS: dict[str, str] = {
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3n": "gemma",
    "gemma-embedding": "gemma",
    "phi3": "phi3",
    "command-r": "command-r",
    "cohere2": "command-r",
    "exaone": "exaone3",
    "exaone4": "exaone4",
    "chatglm": "chatglm4",
    "granite": "granite",
    "granitemoe": "granite",
    "granitehybrid": "granite-4.0",  # Granite 4.0-H: the granite-4.0 turns (files without a template)
    "llama4": "llama4",
    "seed_oss": "seed_oss",  # Seed-OSS: <seed:bos>role\n...<seed:eos> turns (llama.cpp's seed_oss format)
}


def default_builtin(md: Mapping[str, Any]) -> str:
    """The built-in format for a GGUF whose metadata has no chat template."""
    arch = str(md.get("general.architecture", ""))
    if md.get("tokenizer.ggml.pre") == "tekken" and md.get(f"{arch}.block_count") == 40:
        return "mistral-v7-tekken"
    return ARCH_DEFAULTS.get(arch, "chatml")


def detect_builtin(tmpl: str) -> str | None:
    """The built-in format name for a template name or Jinja source, or None when unknown."""
    if tmpl in BUILTIN_FORMATTERS:
        return tmpl

    def has(*needles: str) -> bool:
        return all(n in tmpl for n in needles)

    if has("<|im_start|>"):
        return "phi4" if has("<|im_sep|>") else "smolvlm" if has("<end_of_utterance>") else "chatml"
    if tmpl.startswith("mistral") or has("[INST]"):
        if has("[SYSTEM_PROMPT]"):
            return "mistral-v7"
        if has("' [INST] ' + system_message") or has("[AVAILABLE_TOOLS]"):
            if has(" [INST]"):
                return "mistral-v1"
            if has('"[INST]"'):
                return "mistral-v3-tekken"
            return "mistral-v3"
        if has("content.strip()"):
            return "llama2-sys-strip"
        if has("bos_token + '[INST]"):
            return "llama2-sys-bos"
        return "llama2-sys" if has("<<SYS>>") else "llama2"
    if has("<|assistant|>", "<|end|>"):
        return "phi3"
    if has("[gMASK]<sop>"):
        return "chatglm4"
    if has("<|assistant|>", "<|user|>"):
        if has("<|tool_declare|>"):
            return "exaone-moe"
        return "falcon3" if has("</s>") else "glmedge"
    if has("<|{{ item['role'] }}|>", "<|begin_of_image|>"):
        return "glmedge"
    return _detect_rest(has)


def _detect_rest(has: Callable[..., bool]) -> str | None:
    """The second half of llm_chat_detect_template's chain (split only to keep functions short)."""
    checks: tuple[tuple[tuple[str, ...], str], ...] = (
        (("<|user|>", "<|endoftext|>"), "zephyr"),
        (("bos_token + message['role']",), "monarch"),
        (("<start_of_turn>",), "gemma"),
        (("'\\n\\nAssistant: ' + eos_token",), "orion"),
        (("GPT4 Correct ",), "openchat"),
        (("USER: ", "ASSISTANT: ", "SYSTEM: "), "vicuna-orca"),
        (("USER: ", "ASSISTANT: "), "vicuna"),
        (("### Instruction:", "<|EOT|>"), "deepseek"),
        (("<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"), "command-r"),
        (("<|start_header_id|>", "<|end_header_id|>"), "llama3"),
        (("[gMASK]sop",), "chatglm3"),
        (("<用户>",), "minicpm"),
        (("'Assistant: ' + message['content'] + eos_token",), "deepseek2"),
        (("<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>"), "deepseek3"),
        (("[|system|]", "[|assistant|]", "[|endofturn|]", "[|tool|]"), "exaone4"),
        (("[|system|]", "[|assistant|]", "[|endofturn|]"), "exaone3"),
        (("rwkv-world",), "rwkv-world"),
        (("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}",), "rwkv-world"),
        (("<|start_of_role|>", "<tool_call>", "g4_default_system_message"), "granite-4.0"),
        (("<|start_of_role|>", "<tools>", "g4_default_system_message"), "granite-4.0"),
        (("<|start_of_role|>", "<tool_call>"), "granite-4.1"),
        (("<|start_of_role|>", "<tools>"), "granite-4.1"),
        (("<|start_of_role|>",), "granite"),
        (
            ("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]",),
            "gigachat",
        ),
        (("<|role_start|>",), "megrez"),
        ((" Ассистент:",), "yandex"),
        (("<role>ASSISTANT</role>", "'HUMAN'"), "bailing"),
        (("<role>ASSISTANT</role>", '"HUMAN"', "<think>"), "bailing-think"),
        (("<role>ASSISTANT</role>", "<role>HUMAN</role>", "<|role_end|>"), "bailing2"),
        (("<|header_start|>", "<|header_end|>"), "llama4"),
        (("<|endofuserprompt|>",), "dots1"),
        (("<|extra_0|>", "<|extra_4|>"), "hunyuan-moe"),
        (("<|start|>", "<|channel|>"), "gpt-oss"),
        (("<｜hy_Assistant｜>", "<｜hy_begin▁of▁sentence｜>"), "hunyuan-vl"),
        (("<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁3｜>"), "hunyuan-dense"),
        (("<|im_assistant|>assistant<|im_middle|>",), "kimi-k2"),
        (("<seed:bos>",), "seed_oss"),
        (("'Assistant: '  + message['content'] + '<|separator|>",), "grok-2"),
        (("[unused9]系统：[unused10]",), "pangu-embedded"),
        (("<|begin|>", "<|end|>", "<|content|>"), "solar-open"),
    )
    for needles, name in checks:
        if has(*needles):
            return name
    return None
