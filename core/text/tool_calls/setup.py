"""One call that turns a chat request with tools into what the engine and the parser need.

    setup = prepare_chat(template, messages, tools=..., tool_choice=..., parallel_tool_calls=...,
                         grammar=grammar_from_request(body), tokenizer=engine.tokenizer)
    task = Task(tokenizer.tokenize(setup.prompt, add_special=True, parse_special=True),
                TaskParams(..., grammar=setup.grammar, preserved_tokens=setup.preserved_tokens))
    parser = setup.parser()     # feed it Partial.content; see stream.ToolCallParser

Templates that render tools themselves get them (Hermes/Qwen, Llama 3.x, Mistral); for the
others the tools, earlier calls and tool results are written into the conversation as
llama.cpp's generic JSON format does (a system prompt listing the tools; calls as
`{"tool_call": ...}` assistant turns; results as `{"tool_response": ...}` user turns).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llamacli.core.text.chat_templates.messages import content_text
from llamacli.core.errors import InvalidRequest
from llamacli.core.text.grammar.spec import GrammarSpec
from llamacli.core.text.reasoning import (
    ReasoningBudgetSpec,
    ReasoningSplitter,
    ThinkingTags,
    check_reasoning_format,
    prompt_opens_thinking,
    thinking_tags,
)
from llamacli.core.text.tool_calls import harmony
from llamacli.core.text.tool_calls.formats import detect_format, native_markers
from llamacli.core.text.tool_calls.call_grammar import generic_schema, tool_call_grammar
from llamacli.core.text.tool_calls.parse import HERMES_OPEN
from llamacli.core.text.tool_calls.stream import ToolCallParser
from llamacli.core.text.tool_calls.tools import (
    Tool,
    ToolChoice,
    parse_parallel,
    parse_tool_choice,
    parse_tools,
)

if TYPE_CHECKING:
    from llamacli.core.text.chat_templates import ChatTemplate
    from llamacli.core.text.tokenizer import Tokenizer


@dataclass
class ChatSetup:
    prompt: str  # the rendered conversation
    format: str  # tool-call format of the output ("content": no tool calls)
    grammar: GrammarSpec | None  # for TaskParams.grammar
    preserved_tokens: tuple[str, ...] = ()  # for TaskParams.preserved_tokens
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=lambda: ToolChoice("none"))
    parallel_tool_calls: bool = False
    reasoning_format: str = "none"  # llama-server's reasoning_format: none, auto, deepseek, deepseek-legacy
    thinking: ThinkingTags = field(default_factory=ThinkingTags)  # the template's thinking tags
    thinking_open: bool = False  # the prompt ends inside an open thinking block
    template_thinks: bool = False  # the template writes thinking tags (a reasoning model)
    open_header: str = ""  # harmony: the header of the message a prefill left open

    def parser(self, id_factory: Callable[[], str] | None = None) -> ToolCallParser:
        return ToolCallParser(self.format, id_factory, frozenset(t.name for t in self.tools), reasoning=self.splitter(),
                              prefix=self.open_header)

    def continue_message(self, content: str, reasoning: str = "") -> None:
        """Append a prefill (the final assistant message the answer continues) to a prompt that
        ends with the assistant header. Harmony (gpt-oss), as llama.cpp: the analysis channel
        holds the reasoning and, when there is content, the final channel the content; the
        parser then starts inside the message left open."""
        if not self.format.startswith("harmony"):
            self.prompt += content
            return
        text, self.open_header = harmony.continuation(content, reasoning)
        self.prompt += text

    def splitter(self) -> ReasoningSplitter | None:
        """How thoughts are taken out of the answer (None: reasoning_format none)."""
        if self.reasoning_format == "none":
            return None
        return ReasoningSplitter(self.thinking, self.thinking_open, legacy=self.reasoning_format == "deepseek-legacy")

    def budget(self, tokens: int = -1, message: str = "", control: bool = False) -> ReasoningBudgetSpec | None:
        """TaskParams.reasoning for a thinking budget (-1: none) and/or reasoning_end control."""
        spec = ReasoningBudgetSpec(self.thinking.start, self.thinking.end, tokens, message, self.thinking_open, control)
        return spec if spec.active else None


def prepare_chat(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Any = None,
    tool_choice: Any = None,
    parallel_tool_calls: Any = None,
    grammar: GrammarSpec | None = None,
    tokenizer: Tokenizer | None = None,
    add_generation_prompt: bool = True,
    reasoning_format: str = "none",
    **template_kwargs: Any,
) -> ChatSetup:
    """Prompt, grammar, format and parser settings for a chat request (raises InvalidRequest)."""
    setup = _prepare(template, messages, tools, tool_choice, parallel_tool_calls, grammar, tokenizer,
                     add_generation_prompt, template_kwargs)
    setup.reasoning_format = check_reasoning_format(reasoning_format)
    source = template.source if template.is_jinja else ""
    if setup.format.startswith("harmony"):  # gpt-oss: thoughts in the analysis channel
        setup.thinking = ThinkingTags(harmony.THINKING_START, harmony.THINKING_END)
        setup.thinking_open = prompt_opens_thinking(setup.prompt, setup.thinking)
        setup.template_thinks = True
        return setup
    setup.thinking = thinking_tags(source)
    setup.thinking_open = prompt_opens_thinking(setup.prompt, setup.thinking)
    setup.template_thinks = setup.thinking.start in source
    if setup.template_thinks and detect_format(template) == "qwen3_coder":  # thoughts may end at a call
        setup.thinking = replace(setup.thinking, end_before=(HERMES_OPEN,))
    if setup.template_thinks:  # the template's own tags reach the parser as text
        setup.preserved_tokens = (*setup.preserved_tokens, setup.thinking.start, setup.thinking.end,
                                  *setup.thinking.tokens)
    return setup


def _prepare(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    tools: Any,
    tool_choice: Any,
    parallel_tool_calls: Any,
    grammar: GrammarSpec | None,
    tokenizer: Tokenizer | None,
    add_generation_prompt: bool,
    template_kwargs: Mapping[str, Any],
) -> ChatSetup:
    tool_list = parse_tools(tools)
    choice = parse_tool_choice(tool_choice, tool_list)
    parallel = parse_parallel(parallel_tool_calls)
    if template.is_jinja and harmony.is_harmony(template.source):
        calls = bool(tool_list) and choice.mode != "none"
        prompt = harmony.render(template, messages, [x.to_openai() for x in tool_list] if calls else None,
                                add_generation_prompt, template_kwargs)
        fmt = "harmony" if calls else "harmony_text"
        spec = harmony.grammar(tool_list, choice, grammar)
        return ChatSetup(prompt, fmt, spec, harmony.MARKERS, tool_list, choice, parallel)
    t = template.tool_use if (tool_list and template.tool_use is not None) else template
    caps = t.caps
    renders_calls = caps is not None and caps.supports_tool_calls
    if not tool_list or choice.mode == "none":
        msgs = list(messages) if renders_calls or not _has_tool_turns(messages) else polyfill_messages(messages)
        prompt = template.render(msgs, add_generation_prompt, **template_kwargs)
        return ChatSetup(prompt, "content", grammar, (), tool_list, choice, parallel)
    fmt = detect_format(template)
    if fmt != "generic" and not (caps is not None and caps.supports_tools):
        fmt = "generic"
    if fmt == "generic":
        response = None
        if grammar is not None:
            if grammar.kind != "json_schema":
                raise InvalidRequest("a grammar cannot be combined with tools; use response_format or json_schema")
            response = grammar.schema
        msgs = polyfill_messages(messages, wrap_replies=True)
        msgs = add_system_text(msgs, generic_system_prompt(tool_list, choice, parallel, response))
        prompt = template.render(msgs, add_generation_prompt, **template_kwargs)
        spec = tool_call_grammar(fmt, tool_list, choice, parallel, tokenizer, response)
    else:
        msgs = list(messages) if renders_calls else polyfill_messages(messages)
        prompt = template.render(msgs, add_generation_prompt, tools=[x.to_openai() for x in tool_list], **template_kwargs)
        spec = tool_call_grammar(fmt, tool_list, choice, parallel, tokenizer)
        if grammar is not None:
            spec = _either_json_or_calls(grammar, fmt, tool_list, choice, parallel, tokenizer)
    return ChatSetup(prompt, fmt, spec, native_markers(fmt), tool_list, choice, parallel)


def check_template_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Refuse extra template variables that are prepare_chat's or the template's own arguments
    (`messages`, `tools`, `add_generation_prompt`, ...): they cannot be passed as extras."""
    from llamacli.core.text.chat_templates.template import ChatTemplate

    taken = sorted(set(kwargs) & _reserved_names(prepare_chat, ChatTemplate.render))
    if taken:
        raise InvalidRequest(
            f"chat_template_kwargs cannot set {', '.join(taken)}: the request's own fields set them"
        )


def _reserved_names(*fns: Callable[..., Any]) -> set[str]:
    out: set[str] = set()
    for fn in fns:
        out |= {p.name for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD}
    return out


def _either_json_or_calls(
    grammar: GrammarSpec, fmt: str, tools: list[Tool], choice: ToolChoice, parallel: bool, tokenizer: Tokenizer | None
) -> GrammarSpec:
    """response_format together with tools: the reply is that JSON, or the tool call(s)."""
    if grammar.kind != "json_schema":
        raise InvalidRequest("a grammar cannot be combined with tools; use response_format or json_schema")
    calls = tool_call_grammar(fmt, tools, ToolChoice("required", choice.name), parallel, tokenizer)
    assert calls is not None and calls.kind == "lark"
    if choice.mode == "required":
        return calls
    from llamacli.core.text.tool_calls.call_grammar import _json

    lark = calls.source.replace("start:", "calls:", 1)
    return GrammarSpec.lark(f"start: answer | calls\nanswer: {_json(grammar.schema)}\n{lark}")


def _has_tool_turns(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def generic_system_prompt(tools: Sequence[Tool], choice: ToolChoice, parallel: bool, response: Any = None) -> str:
    """What the generic format tells the model (llama.cpp's wording, plus the tool list)."""
    listing = json.dumps([t.to_openai() for t in tools], indent=2, ensure_ascii=False)
    call = '{"name": "<tool name>", "arguments": {<arguments>}}'
    calls = f'{{"tool_calls": [{call}, ...]}}' if parallel else f'{{"tool_call": {call}}}'
    key = "`tool_calls`" if parallel else "`tool_call`"
    if choice.mode == "required":
        what = f"Respond in JSON format with {key} (a request to call tools)"
        if choice.name:
            what += f", calling the tool `{choice.name}`"
        examples = calls
    else:
        what = f"Respond in JSON format, either with {key} (a request to call tools) or with `response` reply to the user's request"
        reply = '"<your reply>"' if response is None else "<JSON as the response schema asks>"
        examples = f'{calls}\n{{"response": {reply}}}'
    return (
        f"You can call any of the following tools to satisfy the user's requests: {listing}\n\n"
        f"{what}. Examples:\n{examples}"
    )


def add_system_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Append text to the system message (or start the conversation with one)."""
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        old = content_text(first.get("content"))
        first["content"] = f"{old}\n\n{text}" if old else text
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def polyfill_messages(messages: Sequence[Mapping[str, Any]], wrap_replies: bool = False) -> list[dict[str, Any]]:
    """Tool calls and tool results written as text, for templates that cannot render them:
    an assistant call becomes `{"tool_call": {...}}` (or `{"tool_calls": [...]}`), tool results
    one user turn of `{"tool_response": {...}}` lines (roles keep alternating). With
    ``wrap_replies`` (the generic format) earlier plain assistant replies are shown as
    `{"response": "..."}`, the shape the model is asked to answer in."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    merged = False  # the last message is a user turn written by us (more results join it)
    for m in messages:
        if not isinstance(m, Mapping):
            raise InvalidRequest("each message must be an object")
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            if not isinstance(m["tool_calls"], list):
                raise InvalidRequest("an assistant message's tool_calls must be an array")
            for c in m["tool_calls"]:
                fn = c.get("function", c) if isinstance(c, Mapping) else None
                if not isinstance(fn, Mapping):
                    raise InvalidRequest("each tool call must be an object with a function object")
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        pass
                call: dict[str, Any] = {"name": fn.get("name"), "arguments": args}
                if isinstance(c, Mapping) and c.get("id"):
                    call["id"] = c["id"]
                    names[str(c["id"])] = str(fn.get("name"))
                calls.append(call)
            payload = {"tool_call": calls[0]} if len(calls) == 1 else {"tool_calls": calls}
            text = content_text(m.get("content"))
            body = json.dumps(payload, ensure_ascii=False)
            out.append({"role": "assistant", "content": f"{text}\n{body}" if text else body})
            merged = False
        elif role == "tool":
            cid = m.get("tool_call_id")
            resp: dict[str, Any] = {"tool": m.get("name") or names.get(str(cid), "")}
            if cid:
                resp["tool_call_id"] = cid
            resp["content"] = content_text(m.get("content"))
            text = json.dumps({"tool_response": resp}, ensure_ascii=False)
            if merged:
                out[-1]["content"] += "\n" + text
            else:
                out.append({"role": "user", "content": text})
                merged = True
        elif role == "user" and merged:
            out[-1]["content"] += "\n\n" + content_text(m.get("content"))
            merged = False
        elif role == "assistant" and wrap_replies and isinstance(m.get("content"), (str, list)):
            text = content_text(m.get("content"))
            out.append({**m, "content": json.dumps({"response": text}, ensure_ascii=False)})
            merged = False
        else:
            out.append(dict(m))
            merged = False
    return out


__all__ = ["ChatSetup", "add_system_text", "check_template_kwargs", "generic_schema", "generic_system_prompt", "polyfill_messages", "prepare_chat"]
