"""Grammars that make the model's tool calls well-formed.

  tool_choice required / named   the reply must be call(s) of the declared tool(s), with
                                 arguments valid for the tool's parameter schema;
  tool_choice auto               free text, but once the format's trigger (`<tool_call>`,
                                 `[TOOL_CALLS]`, a reply opening with `{`) appears the call
                                 that follows is held to the same rules (llama.cpp's lazy
                                 grammar, written as a lazy llguidance lexeme);
  generic format                 always the JSON object of that format (calls or response).

Grammars are Lark text for llguidance with `%json {...}` for the JSON parts; markers that
are control tokens of the vocabulary are written as `<[id]>`, so a grammar can only be built
for a given tokenizer (without one, markers are plain text).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llamacli.core.text.grammar.spec import JSON_WHITESPACE, GrammarSpec, bound_numbers, closed_objects
from llamacli.core.text.tool_calls.parse import XML_TAGS, XmlCallTags
from llamacli.core.text.tool_calls.tools import Tool, ToolChoice

if TYPE_CHECKING:
    from llamacli.core.text.tokenizer import Tokenizer

_CONTROL = 1 << 3  # llama_token_attr CONTROL
_XG = {"whitespace_pattern": JSON_WHITESPACE}
TEXT = r"TEXT: /(.|\n)*/"


def _params(tool: Tool) -> Any:
    p = tool.parameters
    return closed_objects(bound_numbers(p)) if isinstance(p, dict) else p


def call_schema(tool: Tool, args_key: str = "arguments", with_id: bool = False) -> dict[str, Any]:
    """`{"name": <this tool>, "<args_key>": <its parameters>}` as a JSON schema."""
    props: dict[str, Any] = {"name": {"const": tool.name}, args_key: _params(tool)}
    required = ["name", args_key]
    if with_id:
        props["id"] = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}
        required.append("id")
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _any_call(tools: Sequence[Tool], **kw: Any) -> dict[str, Any]:
    schemas = [call_schema(t, **kw) for t in tools]
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _json(schema: Any) -> str:
    if isinstance(schema, dict):
        schema = {"x-guidance": _XG, **schema}
    return "%json " + json.dumps(schema, ensure_ascii=False)


def _marker(text: str, tokenizer: Tokenizer | None) -> str:
    """A marker in Lark: `<[id]>` when it is a control token, else a string literal."""
    if tokenizer is not None:
        tid = tokenizer.vocab.token_to_id.get(text)
        if tid is not None and int(tokenizer.vocab.attrs[tid]) & _CONTROL:
            return f"<[{tid}]>"
    return json.dumps(text, ensure_ascii=False)


def _chosen(tools: Sequence[Tool], choice: ToolChoice) -> list[Tool]:
    return [t for t in tools if t.name == choice.name] if choice.name else list(tools)


def generic_schema(tools: Sequence[Tool], choice: ToolChoice, parallel: bool, response: Any = None) -> dict[str, Any]:
    """llama.cpp's generic format: `{"tool_call": ...}` / `{"tool_calls": [...]}`, or with
    tool_choice auto also `{"response": ...}` (a string unless response_format gives a schema)."""
    call = _any_call(_chosen(tools, choice))
    if parallel:
        calls = {
            "type": "object",
            "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1}},
            "required": ["tool_calls"],
            "additionalProperties": False,
        }
    else:
        calls = {"type": "object", "properties": {"tool_call": call}, "required": ["tool_call"], "additionalProperties": False}
    if choice.mode == "required":
        return calls
    resp = {
        "type": "object",
        "properties": {"response": response if response is not None else {"type": "string"}},
        "required": ["response"],
        "additionalProperties": False,
    }
    return {"anyOf": [calls, resp]}


def tool_call_grammar(
    fmt: str,
    tools: Sequence[Tool],
    choice: ToolChoice,
    parallel: bool,
    tokenizer: Tokenizer | None = None,
    response_schema: Any = None,
) -> GrammarSpec | None:
    """The grammar for a request with tools in format ``fmt`` (None: no constraint)."""
    if choice.mode == "none" or not tools:
        return None
    if fmt == "generic":
        return GrammarSpec.json_schema(bound_numbers(generic_schema(tools, choice, parallel, response_schema)))
    chosen = _chosen(tools, choice)
    required = choice.mode == "required"
    if fmt == "hermes":
        body = '"\\n"? call_json "\\n"? "</tool_call>"'
        lines = [f"call_json: {_json(_any_call(chosen))}", "WS: /[ \\t\\n]{1,4}/"]
        # the grammar ends with the (last) call, so the engine stops right there
        if required:
            lines.insert(0, "start: call (WS? call)*" if parallel else "start: call")
            lines.append(f'call: "<tool_call>" {body}')
        else:
            lines.insert(0, "start: (hd call)* TEXT" if parallel else "start: TEXT | hd call")
            lines += [f"call: {body}", 'hd[lazy]: TEXT "<tool_call>"', TEXT]
        return GrammarSpec.lark("\n".join(lines))
    if fmt == "llama3":
        call = _json(_any_call(chosen, args_key="parameters"))
        lines = [f"call: {call}", "SEP: /[ \\t\\n]{0,4};?[ \\t\\n]{0,4}/"]
        lines.insert(0, "start: call (SEP call)*" if parallel else "start: call")
        if not required:
            lines[0] = "start: PLAIN | " + lines[0].removeprefix("start: ")
            lines.append(r"PLAIN: /[^{ \t\n](.|\n)*/")
        return GrammarSpec.lark("\n".join(lines))
    if fmt in ("mistral", "mistral_args"):
        mark = _marker("[TOOL_CALLS]", tokenizer)
        if fmt == "mistral":
            arr: dict[str, Any] = {"type": "array", "items": _any_call(chosen, with_id=True), "minItems": 1}
            if not parallel:
                arr["maxItems"] = 1
            body = _json(arr)
        else:
            args = _marker("[ARGS]", tokenizer)
            body = "(" + " | ".join(f"{json.dumps(t.name)} {args} {_json(_params(t))}" for t in chosen) + ")"
        lines = [f"body: {body}"]
        if required:
            lines[:0] = ["start: call+" if parallel else "start: call", f"call: {mark} body"]
        elif mark.startswith("<["):  # a control token is never text: no trigger to watch for
            lines[:0] = ["start: TEXT call*" if parallel else "start: TEXT call?", f"call: {mark} body", TEXT]
        else:
            lines[:0] = ["start: (hd body)* TEXT" if parallel else "start: TEXT | hd body", f"hd[lazy]: TEXT {mark}", TEXT]
        return GrammarSpec.lark("\n".join(lines))
    if fmt == "glm45":
        return GrammarSpec.lark(_glm45_grammar(chosen, required, parallel, tokenizer))
    if fmt in ("deepseek_r1", "deepseek_v31"):
        return GrammarSpec.lark(_deepseek_grammar(chosen, required, parallel, tokenizer, fmt == "deepseek_r1"))
    if fmt in XML_TAGS:
        return GrammarSpec.lark(_xml_grammar(chosen, required, parallel, tokenizer, XML_TAGS[fmt]))
    raise ValueError(f"no grammar for tool-call format {fmt!r}")


def _calls(lines: list[str], op: str, body: str, required: bool, parallel: bool) -> str:
    """The start rules around a call `op body` (op: the opening marker), then `lines`: one or
    more calls when required, else text with calls after their marker (a lazy trigger where the
    marker is text, not a control token)."""
    if required:
        head = ["start: call (WS? call)*" if parallel else "start: call", f"call: {op} {body}"]
    elif op.startswith("<["):  # a control token is never text: no trigger to watch for
        head = ["start: TEXT call*" if parallel else "start: TEXT call?", f"call: {op} {body}"]
    else:
        head = [f"start: (hd {body})* TEXT" if parallel else f"start: TEXT | hd {body}", f"hd[lazy]: TEXT {op}"]
    return "\n".join(head + lines)


def _xml_grammar(chosen: Sequence[Tool], required: bool, parallel: bool, tokenizer: Tokenizer | None,
                 t: XmlCallTags) -> str:
    """A block `open` call `close` in the tags t: qwen3_coder's `<tool_call>\n<function=name>\n
    (<parameter=k>\nv\n</parameter>\n)*</function>\n</tool_call>`, seed_oss's the same in
    `<seed:tool_call>`, minimax_m2's `<invoke name="name">` calls of `<parameter name="k">v
    </parameter>` pairs (several in one block when parallel): a chosen tool's name, its
    parameters' names, any text as a value (up to the first `</parameter>`, a lazy match)."""
    op, cl = (_marker(m, tokenizer) for m in (t.open, t.close))
    lines = [f"fn: {' | '.join(f'fn{i}' for i in range(len(chosen)))}", TEXT, "WS: /[ \\t\\n]{1,4}/",
             f"val[lazy]: TEXT {json.dumps(t.param_end)}", f"block: fn{'+' if t.many and parallel else ''} {cl}"]
    for i, tool in enumerate(chosen):
        keys = " | ".join(json.dumps(k, ensure_ascii=False) for k in (_params(tool).get("properties") or {}))
        pair = f'({json.dumps(t.param)} ({keys}) {json.dumps(t.key_end)} val "\\n"?)*' if keys else ""
        name = json.dumps(t.fn + tool.name + t.name_end, ensure_ascii=False)
        lines.append(f'fn{i}: "\\n"? {name} "\\n"? {pair} {json.dumps(t.fn_end)} "\\n"?')
    return _calls(lines, op, "block", required, parallel)


def _glm45_grammar(chosen: Sequence[Tool], required: bool, parallel: bool, tokenizer: Tokenizer | None) -> str:
    """`<tool_call>name\n(<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n)*</tool_call>`: a
    chosen tool's name, its parameters' names as keys, any text as a value (up to the first
    `</arg_value>`, a lazy match, where the marker is text and not a control token)."""
    op, cl, ks, ke, vs, ve = (_marker(m, tokenizer) for m in (
        "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"))
    lines = [f"fn: {' | '.join(f'fn{i}' for i in range(len(chosen)))}", TEXT, "WS: /[ \\t\\n]{1,4}/",
             f"val: TEXT {ve}" if ve.startswith("<[") else f"val[lazy]: TEXT {ve}"]
    for i, t in enumerate(chosen):
        keys = " | ".join(json.dumps(k, ensure_ascii=False) for k in (_params(t).get("properties") or {}))
        pair = f'({ks} ({keys}) {ke} "\\n"? {vs} val "\\n"?)*' if keys else ""
        lines.append(f'fn{i}: {json.dumps(t.name, ensure_ascii=False)} "\\n"? {pair} {cl}')
    return _calls(lines, op, "fn", required, parallel)


def _deepseek_grammar(chosen: Sequence[Tool], required: bool, parallel: bool, tokenizer: Tokenizer | None, r1: bool) -> str:
    """`<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>` + body + `<｜tool▁call▁end｜>`,
    then `<｜tool▁calls▁end｜>`; body: `name<｜tool▁sep｜>{...}` (V3.1) or
    `function<｜tool▁sep｜>name\n```json\n{...}\n```` (R1), a chosen tool's name and arguments."""
    sb, se, cb, sep, ce = (_marker(m, tokenizer) for m in (
        "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"))
    bodies = [f'"function" {sep} {json.dumps(t.name, ensure_ascii=False)} "\\n```json\\n" {_json(_params(t))} "\\n```"'
              if r1 else f"{json.dumps(t.name, ensure_ascii=False)} {sep} {_json(_params(t))}" for t in chosen]
    lines = [f"calls: call{'+' if parallel else ''} {se}", f"call: {cb} ({' | '.join(bodies)}) {ce}"]
    if required:
        lines.insert(0, f"start: {sb} calls")
    elif sb.startswith("<["):  # a control token is never text: no trigger to watch for
        lines[:0] = [f"start: TEXT ({sb} calls)?", TEXT]
    else:
        lines[:0] = ["start: TEXT | hd calls", f"hd[lazy]: TEXT {sb}", TEXT]
    return "\n".join(lines)
