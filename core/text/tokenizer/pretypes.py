"""`tokenizer.ggml.pre` -> llama.cpp pre-tokenizer type and the vocab flags it implies.

Transcribed from llama_vocab::impl::load (src/llama-vocab.cpp). Only BPE vocabularies have
pre-tokenizers; an empty value means "default" (llama.cpp warns that quality degrades).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llamacli.core.errors import TokenizerError


@dataclass(frozen=True)
class PreSpec:
    pre_type: str
    flags: dict[str, Any] = field(default_factory=dict)
    no_bos: bool = False  # the pre-tokenizer clears the default BOS id


_NOCLEAN = {"clean_spaces": False}


def _t(names: str, pre_type: str, **flags: Any) -> dict[str, PreSpec]:
    no_bos = bool(flags.pop("no_bos", False))
    spec = PreSpec(pre_type, dict(flags), no_bos)
    return {name: spec for name in names.split()}


_TABLE: dict[str, PreSpec] = {
    **_t("default", "DEFAULT"),
    **_t("minicpm5", "MINICPM5", ignore_merges=True),
    **_t("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano", "LLAMA3",
         ignore_merges=True, add_bos=True),
    **_t("deepseek-llm", "DEEPSEEK_LLM", **_NOCLEAN),
    **_t("deepseek-coder", "DEEPSEEK_CODER", **_NOCLEAN),
    **_t("deepseek-v3", "DEEPSEEK3_LLM", **_NOCLEAN),
    **_t("spark2_5", "SPARK2_5", **_NOCLEAN),
    **_t("youtu", "YOUTU", clean_spaces=False, ignore_merges=True),
    **_t("falcon", "FALCON"),
    **_t("mpt", "MPT"),
    **_t("starcoder", "STARCODER"),
    **_t("gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert", "GPT2"),
    **_t("jais-2", "JAIS2"),
    **_t("gemma4 granite-embed-multi-311m", "GEMMA4", escape_whitespaces=True),
    **_t("sarvam-moe", "SARVAM_MOE", escape_whitespaces=True, clean_spaces=False),
    **_t("jina-v1-en jina-v2-code roberta-bpe", "GPT2", add_sep=True),
    **_t("refact", "REFACT"),
    **_t("command-r", "COMMAND_R", **_NOCLEAN),
    **_t("qwen2 deepseek-r1-qwen kormo f2llmv2", "QWEN2", **_NOCLEAN),
    **_t("qwen35", "QWEN35", **_NOCLEAN),
    **_t("stablelm2", "STABLELM2"),
    **_t("olmo", "OLMO"),
    **_t("dbrx", "DBRX"),
    **_t("smaug-bpe", "SMAUG"),
    **_t("poro-chat", "PORO", **_NOCLEAN),
    **_t("chatglm-bpe", "CHATGLM4", no_bos=True),
    **_t("glm4 glm5", "CHATGLM4", no_bos=True, ignore_merges=True),
    **_t("viking", "VIKING", **_NOCLEAN),
    **_t("jais", "JAIS"),
    **_t("tekken", "TEKKEN", clean_spaces=False, ignore_merges=True, add_bos=True),
    **_t("smollm", "SMOLLM", **_NOCLEAN),
    **_t("codeshell", "CODESHELL"),
    **_t("bloom", "BLOOM"),
    **_t("gpt3-finnish", "GPT3_FINNISH"),
    **_t("exaone", "EXAONE"),
    **_t("exaone4", "GPT2"),
    **_t("exaone-moe", "EXAONE_MOE"),
    **_t("chameleon", "CHAMELEON", add_bos=True, clean_spaces=False),
    **_t("minerva-7b", "MINERVA"),
    **_t("megrez", "QWEN2"),
    **_t("gpt-4o llama4 kanana2 talkie", "GPT4O", **_NOCLEAN),
    **_t("granite-embed-multi-97m", "GRANITE_EMB_MULTI", clean_spaces=False, ignore_merges=True),
    **_t("tiny_aya cohere2moe", "TINY_AYA", **_NOCLEAN),
    **_t("superbpe", "SUPERBPE", **_NOCLEAN),
    **_t("trillion", "TRILLION", **_NOCLEAN),
    **_t("granite-docling", "GRANITE_DOCLING", **_NOCLEAN),
    **_t("bailingmoe bailingmoe2 llada-moe", "BAILINGMOE", **_NOCLEAN),
    **_t("seed-coder", "SEED_CODER", **_NOCLEAN),
    **_t("hunyuan", "HUNYUAN", **_NOCLEAN),
    **_t("hunyuan-dense", "HUNYUAN_DENSE", **_NOCLEAN),
    **_t("hy_v4", "HY_V4", **_NOCLEAN),
    **_t("joyai-llm", "JOYAI_LLM", **_NOCLEAN),
    **_t("kimi-k2", "KIMI_K2", **_NOCLEAN),
    **_t("ufakzeka", "UFAKZEKA", **_NOCLEAN),
    **_t("grok-2", "GROK_2", **_NOCLEAN),
    **_t("afmoe", "AFMOE", **_NOCLEAN),
    **_t("laguna", "LAGUNA", **_NOCLEAN),
    **_t("minimax-m2", "MINIMAX_M2", **_NOCLEAN),
    **_t("solar-open", "SOLAR_OPEN", **_NOCLEAN),
    **_t("mellum2", "MELLUM2"),
}


def lookup(pre: str) -> PreSpec:
    """The spec for a `tokenizer.ggml.pre` value ("" -> default)."""
    if not pre:
        return _TABLE["default"]
    spec = _TABLE.get(pre)
    if spec is None:
        raise TokenizerError(f"unknown pre-tokenizer type {pre!r} (tokenizer.ggml.pre)")
    return spec
