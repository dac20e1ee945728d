"""gpt-oss's harmony output: channels and recipients, as llama.cpp's parser reads them
(common/parsers/gpt-oss.cpp).

The generation prompt ends with `<|start|>assistant`; the output is then one or more messages,
each a header up to `<|message|>` and a body up to `<|end|>`, the next one opening with
`<|start|>assistant` again:

    <|channel|>analysis<|message|>thoughts<|end|><|start|>assistant<|channel|>final<|message|>answer
    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{"arg": 1}
     to=functions.NAME<|channel|>analysis<|message|>{"arg": 1}

By header: a recipient `to=functions.NAME` is a tool call (the body its JSON arguments) when
the request has tools; any other recipient (a built-in tool such as `container.exec`, or
`functions.*` without tools) is an unsolicited call, dropped; `to=assistant` is a stray prefix
and ignored. Otherwise the last `<|channel|>` names it: `analysis` is reasoning (with
reasoning_format none the message, header and `<|end|>` included, stays in the content),
`commentary` (a preamble) and `final` are content. Bodies are concatenated in order, untrimmed.
Output with no `<|message|>` at all (a model not speaking harmony) is content.

`scan_harmony(text, final, ...)` reads the whole output so far and reports only what can no
longer change (as `parse.scan`): a header is classified once complete, a partial `<|end|>` at
the end of a body is held back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llamacli.core.text.grammar.spec import GrammarSpec
from llamacli.core.text.holdback import partial_stop_len
from llamacli.core.text.tool_calls.call_grammar import TEXT, _chosen, _json, _params
from llamacli.core.text.tool_calls.parse import RawCall
from llamacli.core.text.tool_calls.partial_json import parse_partial
from llamacli.core.text.tool_calls.tools import Tool, ToolChoice

if TYPE_CHECKING:
    from llamacli.core.text.chat_templates import ChatTemplate

START, END, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|end|>", "<|channel|>", "<|message|>", "<|constrain|>"
NEXT_MESSAGE = START + "assistant"
# the special tokens the parser needs to see as text (llama.cpp's preserved_tokens for gpt-oss)
MARKERS = (CHANNEL, CONSTRAIN, MESSAGE, START, END)
# llama.cpp's thinking tags for gpt-oss (the reasoning budget's start and end)
THINKING_START, THINKING_END = CHANNEL + "analysis" + MESSAGE, END

_RECIPIENT = re.compile(r" to=([^\s<]+)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"([A-Za-z0-9_-]+)")


def is_harmony(template_source: str) -> bool:
    """A template that writes harmony channels (llama.cpp's test for its gpt-oss handler)."""
    return CHANNEL in template_source


def render(template: ChatTemplate, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]] | None,
           add_generation_prompt: bool, template_kwargs: Mapping[str, Any]) -> str:
    """The prompt, as llama.cpp's common_chat_params_init_gpt_oss renders it: an assistant
    message's reasoning_content becomes the template's `thinking` (and with tool calls its
    content is dropped); continuing the last assistant message (no generation prompt), the
    last `<|return|>` becomes `<|end|>`."""
    msgs: list[dict[str, Any]] = []
    for m in messages:
        msg = dict(m)
        if isinstance(msg.get("reasoning_content"), str):
            msg["thinking"] = msg["reasoning_content"]
            if isinstance(msg.get("tool_calls"), list) and msg["tool_calls"]:
                msg.pop("content", None)
        msgs.append(msg)
    extra = dict(template_kwargs, tools=tools) if tools else dict(template_kwargs)
    prompt = template.render(msgs, add_generation_prompt, **extra)
    if not add_generation_prompt:
        i = prompt.rfind("<|return|>")
        if i >= 0:
            prompt = prompt[:i] + END + prompt[i + len("<|return|>") :]
    return prompt


def grammar(tools: Sequence[Tool], choice: ToolChoice, response: GrammarSpec | None) -> GrammarSpec | None:
    """llama.cpp's gpt-oss grammar. A JSON schema (response_format) takes precedence, as there:
    analysis messages, then `<|channel|>final [<|constrain|>TYPE]<|message|>` and the JSON.
    tool_choice required / named: analysis or commentary messages, then one call in either
    header order (`to=functions.NAME<|channel|>commentary` or the reverse), its arguments valid
    for the tool's schema. auto: free text until ` to=functions.` appears (llama.cpp's lazy
    trigger), then a call of a declared tool. Another grammar (GBNF, Lark) is the reply's as given;
    no tools, no constraint. The markers are text to the grammar: gpt-oss's vocabulary makes
    them user-defined tokens (core/text/tokenizer/vocab.py), so a literal matches the token."""
    constraint = ['constraint: " " "<|constrain|>"? CTYPE', "CTYPE: /[A-Za-z0-9_-]+/"]
    body = ['body[lazy]: TEXT "<|end|>"', TEXT]
    if response is not None and response.kind == "json_schema":
        lines = ['start: pre* "<|channel|>final" constraint? "<|message|>" answer',
                 'pre: "<|channel|>analysis<|message|>" body "<|start|>assistant"',
                 f"answer: {_json(response.schema)}", *body, *constraint]
        return GrammarSpec.lark("\n".join(lines))
    if response is not None or not tools or choice.mode == "none":
        return response
    chosen = _chosen(tools, choice)
    names = [json.dumps(t.name, ensure_ascii=False) for t in chosen]
    lines = ['chan: "commentary" | "analysis"', *constraint]
    lines += [f"args_{i}: {_json(_params(t))}" for i, t in enumerate(chosen)]
    if choice.mode == "required":
        lines[:0] = ["start: pre* call", "call: " + " | ".join(f"tool_{i}" for i in range(len(chosen))),
                     'pre: "<|channel|>" chan "<|message|>" body "<|start|>assistant"', *body]
        lines += [f'tool_{i}: (" to=functions." {n} "<|channel|>" chan | "<|channel|>" chan " to=functions." {n}) '
                  f'constraint? "<|message|>" args_{i}' for i, n in enumerate(names)]
    else:
        lines[:0] = ["start: TEXT | hd call", "call: " + " | ".join(f"tool_{i}" for i in range(len(chosen))),
                     'hd[lazy]: TEXT " to=functions."', TEXT]
        lines += [f'tool_{i}: {n} ("<|channel|>" chan)? constraint? "<|message|>" args_{i}' for i, n in enumerate(names)]
    return GrammarSpec.lark("\n".join(lines))


def continuation(content: str, reasoning: str = "") -> tuple[str, str]:
    """(the text after `<|start|>assistant` that continues an assistant message, the header of
    the message it leaves open): llama.cpp's gpt-oss continuation, the reasoning in the analysis
    channel, then (with content) the final channel."""
    analysis = CHANNEL + "analysis" + MESSAGE
    if not content:
        return analysis + reasoning, analysis
    final = CHANNEL + "final" + MESSAGE
    return analysis + reasoning + END + NEXT_MESSAGE + final + content, final


@dataclass
class HarmonyScan:
    reasoning: str = ""
    content: str = ""
    calls: list[RawCall] = field(default_factory=list)


def classify(header: str) -> tuple[str, str]:
    """(kind, tool name) of a complete header: kind is "call", "unsolicited", "analysis",
    "commentary" or "final"."""
    m = _RECIPIENT.search(header)
    recipient = m.group(1) if m else "assistant"
    if recipient != "assistant":
        if recipient.startswith("functions."):
            return "call", recipient[len("functions.") :]
        return "unsolicited", ""
    channels = _CHANNEL.findall(header)
    kind = channels[-1] if channels else ""
    return (kind, "") if kind in ("analysis", "commentary", "final") else ("unsolicited", "")


def scan_harmony(text: str, final: bool, reasoning: bool = True, tools: bool = True) -> HarmonyScan:
    """Reasoning, content and tool calls of the output so far (module docstring); ``reasoning``:
    analysis goes to reasoning (else it stays in the content); ``tools``: `functions.*` calls
    are reported (else dropped)."""
    out = HarmonyScan()
    pos = 0
    while True:
        m = text.find(MESSAGE, pos)
        if m < 0:  # a header still being written; or, final, text that is not harmony at all
            if final and pos == 0:
                out.content = text
            return out
        kind, name = classify(text[pos:m])
        body = m + len(MESSAGE)
        e = text.find(END, body)
        stop = e if e >= 0 else len(text)
        if e < 0 and not final:
            stop -= partial_stop_len(text[body:], (END,))
        if kind == "analysis" and reasoning:
            out.reasoning += text[body:stop]
        elif kind == "analysis":
            out.content += text[pos:stop] + (END if e >= 0 else "")
        elif kind in ("commentary", "final"):
            out.content += text[body:stop]
        elif kind == "call" and tools:
            out.calls.append(_call(text, name, body, stop, final or e >= 0))
        if e < 0:
            return out
        pos = e + len(END)
        if text.startswith(NEXT_MESSAGE, pos):
            pos += len(NEXT_MESSAGE)
        elif not final and NEXT_MESSAGE.startswith(text[pos:]):
            return out  # the next message's start may still be coming


def _call(text: str, name: str, body: int, stop: int, ended: bool) -> RawCall:
    """The call to `name` whose JSON arguments start at `body` (its body ends at `stop`)."""
    r = parse_partial(text[:stop], body, ended)
    call = RawCall(name)
    if r.node is not None and not r.error:
        call.arguments = text[r.node.start : r.node.end]
        call.complete = r.node.complete
    elif ended:  # arguments that are not JSON: their text as it is
        call.arguments = text[body:stop].strip()
        call.complete = True
    if ended and not call.arguments:
        call.arguments, call.complete = "{}", True
    return call
