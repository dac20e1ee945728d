"""Reasoning ("thinking") models: where thoughts are in the output, and how long they may be.

    tags = thinking_tags(template_source)              # ("<think>", "</think>") by default
    splitter = ReasoningSplitter(tags, forced_open=prompt_opens_thinking(prompt, tags))
    split = splitter.split(text_so_far, final)         # reasoning and content, stable parts only
    TaskParams(reasoning=ReasoningBudgetSpec(tags.start, tags.end, budget=256))  # engine forcing
"""

from llamacli.core.text.reasoning.budget import BudgetState, ReasoningBudget, ReasoningBudgetSpec
from llamacli.core.text.reasoning.split import (
    REASONING_FORMATS,
    ReasoningSplitter,
    Split,
    ThinkingTags,
    check_reasoning_format,
    prompt_opens_thinking,
    thinking_tags,
)

__all__ = [
    "REASONING_FORMATS",
    "BudgetState",
    "ReasoningBudget",
    "ReasoningBudgetSpec",
    "ReasoningSplitter",
    "Split",
    "ThinkingTags",
    "check_reasoning_format",
    "prompt_opens_thinking",
    "thinking_tags",
]
