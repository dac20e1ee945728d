"""Thoughts out of a reasoning model's output: `<think>...</think>` (DeepSeek-R1, QwQ, Qwen 3)
or the tags of the other reasoning templates llama.cpp knows (`KNOWN_TAGS`: Command R7B,
Seed-OSS, Magistral, Apertus) at the start of the answer.

As in llama.cpp's chat parser, a thinking block is recognised only at the start of the output
(after whitespace); when the prompt already opened one (DeepSeek-R1's generation prompt ends
with `<think>\\n`), the output starts inside it. A block that never closes is all reasoning.
Reasoning and the content after the block are stripped of surrounding whitespace.

`split(text, final)` reads the whole output so far and reports only what can no longer change
(like `tool_calls.parse.scan`): a partial tag is held back, never streamed as content, and so is
whitespace that may turn out to end the reasoning.

Formats (llama-server's --reasoning-format): `none` leaves everything in the content;
`deepseek` (and `auto`) moves thoughts to reasoning_content; `deepseek-legacy` fills
reasoning_content and keeps the whole text, tags included, in the content.
"""

from __future__ import annotations

from dataclasses import dataclass

from llamacli.core.errors import InvalidRequest
from llamacli.core.text.holdback import partial_stop_len

REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


@dataclass(frozen=True)
class ThinkingTags:
    start: str = "<think>"
    end: str = "</think>"
    # markers that also end the block and stay in the content (llama.cpp's Qwen3-Coder/Qwen3.5
    # parser: a tool call's `<tool_call>` after thoughts that were never closed)
    end_before: tuple[str, ...] = ()
    # special tokens inside the tags, where a tag is more than one token (Gemma 4's start is the
    # token `<|channel>` then the word `thought`): kept as text in the output too
    tokens: tuple[str, ...] = ()


# the tag pairs of the reasoning models llama.cpp's chat parser knows; `<think>` (DeepSeek-R1,
# QwQ, Qwen 3, Granite, ...) is the default and is looked for last
DEFAULT_TAGS = ThinkingTags("<think>", "</think>")
KNOWN_TAGS: tuple[ThinkingTags, ...] = (
    ThinkingTags("<|START_THINKING|>", "<|END_THINKING|>"),  # Command R7B
    ThinkingTags("<seed:think>", "</seed:think>"),  # ByteDance Seed-OSS
    ThinkingTags("[THINK]", "[/THINK]"),  # Magistral, Ministral reasoning
    ThinkingTags("<|inner_prefix|>", "<|inner_suffix|>"),  # Apertus
    ThinkingTags("<|channel>thought", "<channel|>", tokens=("<|channel>",)),  # Gemma 4
    DEFAULT_TAGS,
)


def thinking_tags(template_source: str) -> ThinkingTags:
    """The pair a template writes (its source names both tags); `<think>` when it names none."""
    for t in KNOWN_TAGS:
        if t.start in template_source and t.end in template_source:
            return t
    return DEFAULT_TAGS


def prompt_opens_thinking(prompt: str, tags: ThinkingTags) -> bool:
    """The rendered prompt ends inside an open thinking block (the answer starts with thoughts)."""
    return prompt.rstrip().endswith(tags.start)


def check_reasoning_format(name: str) -> str:
    if name not in REASONING_FORMATS:
        raise InvalidRequest(f"unknown reasoning_format {name!r} (one of: {', '.join(REASONING_FORMATS)})")
    return name


@dataclass
class Split:
    reasoning: str  # the thoughts (stable part while streaming)
    content: str  # the answer text after the thinking block (stable part)
    thinking: bool  # still inside the block (more reasoning may come)


@dataclass(frozen=True)
class ReasoningSplitter:
    tags: ThinkingTags = DEFAULT_TAGS
    forced_open: bool = False  # the prompt opened the block
    legacy: bool = False  # deepseek-legacy: the content keeps the raw text, tags included

    def split(self, text: str, final: bool) -> Split:
        s = self._split(text, final)
        if self.legacy:
            s.content = text
        return s

    def _split(self, text: str, final: bool) -> Split:
        start, end = self.tags.start, self.tags.end
        if self.forced_open:
            body = 0
        else:
            lead = text.lstrip()
            if not lead.startswith(start):
                if not final and start.startswith(lead):
                    return Split("", "", False)  # the start tag may still be coming: hold
                return Split("", text, False)
            body = len(text) - len(lead) + len(start)
        i = text.find(end, body)
        cut = min((j for j in (text.find(m, body) for m in self.tags.end_before) if j >= 0), default=-1)
        if cut >= 0 and (i < 0 or cut < i):  # an end kept in the content
            return Split(text[body:cut].strip(), text[cut:], False)
        if i < 0:
            inner = text[body:]
            if not final:
                inner = inner[: len(inner) - partial_stop_len(inner, (end, *self.tags.end_before))].rstrip()
            return Split(inner.strip(), "", not final)
        content = text[i + len(end) :].lstrip()
        return Split(text[body:i].strip(), content, False)
