"""Reasoning turned off (`--reasoning off`, `chat_template_kwargs.enable_thinking: false`,
`reasoning_effort: "none"`): the prompt ends with an empty thinking block, as llama-server
writes it, so that a reasoning model answers at once.

Templates that know `enable_thinking` (Qwen 3) write the block themselves. Others open a
block in the generation prompt (DeepSeek-R1, QwQ: `<think>\\n`), which is then closed; or they
only know the tags (Command-R7B), and the empty pair is appended.
"""

from __future__ import annotations

# (start, end) tags of the reasoning formats llama.cpp's templates use
THINKING_TAGS: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
)


def close_thinking(prompt: str, source: str) -> str:
    """``prompt`` (rendered with a generation prompt and enable_thinking=False) ending with an
    empty, closed thinking block; unchanged when the template has no thinking tags."""
    tail = prompt.rstrip()
    for start, end in THINKING_TAGS:
        if tail.endswith(end):
            return prompt  # the template closed it already
        if tail.endswith(start):
            return prompt + end  # an open block: close it
    for start, end in THINKING_TAGS:
        if start in source and end in source:
            return prompt + start + end
    return prompt
