"""core/text/tool_calls on text, no model: request checks, format detection on llama.cpp's own
templates, parsing each format whole and streamed (deltas never retracted, joined equal to
the final message), the grammars for tool_choice required/named/auto, prompt rendering and
the polyfill for templates without tool support. Engine runs: test_tool_calls_engine.py."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest
from llamacli.core.text.chat_templates import ChatTemplate
from llamacli.core.errors import InvalidRequest
from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.grammar import GrammarConstraint, GrammarSpec, compile_grammar
from llamacli.core.text.tokenizer import load_tokenizer
from llamacli.core.text.tool_calls import (
    Delta,
    ParsedMessage,
    ToolCallParser,
    ToolChoice,
    detect_format,
    parse_message,
    parse_tool_choice,
    parse_tools,
    polyfill_messages,
    prepare_chat,
    preserving,
    tool_call_grammar,
)
from llamacli.core.text.tool_calls.call_grammar import _marker

from tests.sdist_cache import llama_cpp_path
from tests.tiny_models import write_tiny_model

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, ADD]
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "abcdefghi", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "abcdefghi", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "Sunny, 21 C."},
    {"role": "user", "content": "And in Rome?"},
]


def ids() -> Any:
    c = itertools.count()
    return lambda: f"id{next(c)}"


@pytest.fixture(scope="module")
def demo_tok(demo_model: str):  # type: ignore[no-untyped-def]
    return load_tokenizer(read_metadata(demo_model))


@pytest.fixture(scope="module")
def templates() -> dict[str, ChatTemplate]:
    folder = llama_cpp_path("models/templates")
    names = {
        "qwen25": "Qwen-Qwen2.5-7B-Instruct.jinja",
        "qwen3": "Qwen-Qwen3-0.6B.jinja",
        "hermes2": "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "llama31": "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "llama32": "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "devstral": "unsloth-mistral-Devstral-Small-2507.jinja",
        "gemma2": "google-gemma-2-2b-it.jinja",
        "phi35": "microsoft-Phi-3.5-mini-instruct.jinja",
        "mistral_small32": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "ministral3": "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        "glm46": "GLM-4.6.jinja",
        "deepseek_r1": "llama-cpp-deepseek-r1.jinja",
        "deepseek_r1_qwen": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        "deepseek_v31": "deepseek-ai-DeepSeek-V3.1.jinja",
        "qwen35": "Qwen3.5-4B.jinja",
        "qwen3coder": "Qwen3-Coder.jinja",
    }
    return {k: ChatTemplate.from_source((folder / v).read_text(), bos_token="<s>", eos_token="</s>") for k, v in names.items()}


# ---- request checks --------------------------------------------------------------------------
def test_parse_tools_shapes() -> None:
    tools = parse_tools([WEATHER, {"name": "lookup", "description": "d", "input_schema": {"type": "object"}}])
    assert [t.name for t in tools] == ["get_weather", "lookup"]
    assert tools[1].parameters == {"type": "object"} and tools[1].description == "d"
    assert parse_tools(None) == []
    assert parse_tools([{"type": "function", "function": {"name": "f"}}])[0].parameters["type"] == "object"


@pytest.mark.parametrize(
    "tools, needle",
    [
        ("x", "must be an array"),
        ([1], "must be an object"),
        ([{"type": "function", "function": {"name": "bad name"}}], "needs a name"),
        ([WEATHER, WEATHER], "used twice"),
        ([{"type": "function", "function": {"name": "f", "parameters": [1]}}], "JSON schema"),
        ([{"type": "retrieval", "function": {"name": "f"}}], "must be \"function\""),
    ],
)
def test_parse_tools_errors(tools: Any, needle: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_tools(tools)
    assert needle in str(e.value)


def test_tool_choice() -> None:
    tools = parse_tools(TOOLS)
    assert parse_tool_choice(None, tools) == ToolChoice("auto")
    assert parse_tool_choice(None, []) == ToolChoice("none")
    assert parse_tool_choice("required", tools) == ToolChoice("required")
    assert parse_tool_choice("any", tools) == ToolChoice("required")
    named = {"type": "function", "function": {"name": "add"}}
    assert parse_tool_choice(named, tools) == ToolChoice("required", "add")
    assert parse_tool_choice({"type": "tool", "name": "add"}, tools) == ToolChoice("required", "add")  # Anthropic
    assert parse_tool_choice({"type": "auto"}, tools) == ToolChoice("auto")
    for bad, needle in [
        ("sometimes", "must be auto"),
        ({"type": "function", "function": {"name": "nope"}}, "not among the tools"),
        ({"type": "function"}, "names no function"),
        (3, "string or an object"),
    ]:
        with pytest.raises(InvalidRequest) as e:
            parse_tool_choice(bad, tools)
        assert needle in str(e.value)
    with pytest.raises(InvalidRequest, match="needs \"tools\""):
        parse_tool_choice("required", [])


# ---- formats ---------------------------------------------------------------------------------
def test_detect_format_on_llama_cpp_templates(templates) -> None:  # type: ignore[no-untyped-def]
    want = {
        "qwen25": "hermes",
        "qwen3": "hermes",
        "hermes2": "hermes",
        "llama31": "llama3",
        "llama32": "llama3",
        "nemo": "mistral",
        "devstral": "mistral_args",
        "gemma2": "generic",
        "phi35": "generic",
        "mistral_small32": "mistral_args",  # mistral3 files: [TOOL_CALLS]name[ARGS]{...}
        "ministral3": "mistral_args",
        "glm46": "glm45",  # glm4moe: <tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>...
        # deepseek2 files: <｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n``` (R1) or
        # <｜tool▁call▁begin｜>name<｜tool▁sep｜>{...} (V3.1)
        "deepseek_r1": "deepseek_r1",
        "deepseek_r1_qwen": "deepseek_r1",
        "deepseek_v31": "deepseek_v31",
        "qwen35": "qwen3_coder",  # <tool_call>\n<function=name>\n<parameter=k>\nv\n</parameter>...
        "qwen3coder": "qwen3_coder",
    }
    assert {k: detect_format(t) for k, t in templates.items()} == want
    assert detect_format(ChatTemplate.from_source("chatml")) == "generic"  # built-in formats
    # GLM-4.6's template renders a tool conversation
    out = templates["glm46"].render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}],
        add_generation_prompt=False, tools=[WEATHER])
    assert "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>" in out


CASES: list[tuple[str, str, str | None, list[tuple[str, Any]]]] = [
    # (format, output, content, [(name, arguments as JSON value)])
    ("hermes", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Let me check.", [("get_weather", {"city": "Paris"})]),
    ("hermes", ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n<tool_call>\n'
                '{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}\n</tool_call>'),
     None, [("add", {"a": 1, "b": 2}), ("get_weather", {"city": "Rome", "unit": "c"})]),
    ("hermes", '<tool_call>{"arguments": {"a": 1, "b": 2}, "name": "add"}</tool_call>', None, [("add", {"a": 1, "b": 2})]),
    ("hermes", '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}</tool_call>', None, [("add", {"a": 1, "b": 2})]),
    ("hermes", "No tools needed: 2 < 3 and <tool_ is not a tag.", "No tools needed: 2 < 3 and <tool_ is not a tag.", []),
    ("hermes", '<tool_call>{"foo": 1}</tool_call> done', '<tool_call>{"foo": 1}</tool_call> done', []),
    ("hermes", '<tool_call>\n{"name": "f"}\n</tool_call>', None, [("f", {})]),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', None, [("get_weather", {"city": "Paris"})]),
    ("llama3", '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}', None, [("add", {"a": 1, "b": 2})]),
    ("llama3", '{"type": "function", "name": "add", "parameters": {"a": 1, "b": 2}}', None, [("add", {"a": 1, "b": 2})]),
    ("llama3", '{"name": "add", "parameters": {"a": 1, "b": 2}}; {"name": "add", "parameters": {"a": 3, "b": 4}}',
     None, [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})]),
    ("llama3", "The answer is {x}.", "The answer is {x}.", []),
    ("llama3", '{"answer": 42}', '{"answer": 42}', []),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcdefghi"}]',
     None, [("get_weather", {"city": "Paris"})]),
    ("mistral", ('Sure.[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "a1"}, '
                 '{"name": "add", "arguments": {"a": 5, "b": 6}, "id": "a2"}]'), "Sure.", [("add", {"a": 1, "b": 2}), ("add", {"a": 5, "b": 6})]),
    ("mistral_args", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}',
     None, [("get_weather", {"city": "Paris"}), ("add", {"a": 1, "b": 2})]),
    ("mistral_args", '[TOOL_CALLS]add[CALL_ID]x1y2z3w4v[ARGS]{"a": 1, "b": 2}', None, [("add", {"a": 1, "b": 2})]),
    ("mistral", "Plain [TOOL answer.", "Plain [TOOL answer.", []),
    ("generic", '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}', None, [("get_weather", {"city": "Paris"})]),
    ("generic", '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "add", "arguments": {"a": 2, "b": 3}}]}',
     None, [("add", {"a": 1, "b": 2}), ("add", {"a": 2, "b": 3})]),
    ("generic", '{"response": "It is \\"sunny\\" \\u00e9\\ud83d\\ude00\\n"}', 'It is "sunny" é\U0001f600', []),
    ("generic", '{\n  "response": {"temp": 21}\n}', '{"temp": 21}', []),
    ("generic", "I will answer in plain text.", "I will answer in plain text.", []),
    ("content", "  anything <tool_call> goes\n", "  anything <tool_call> goes\n", []),
    ("glm45", "Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
     "Let me check.", [("get_weather", {"city": "Paris"})]),
    ("glm45", ("<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n<arg_key>b</arg_key>\n<arg_value>2.5"
               "</arg_value>\n</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York, \"NY\"\n"
               "line 2</arg_value>\n<arg_key>unit</arg_key><arg_value>NaN</arg_value></tool_call>"),
     None, [("add", {"a": 1, "b": 2.5}), ("get_weather", {"city": 'New York, "NY"\nline 2', "unit": "NaN"})]),
    ("glm45", '<tool_call>f\n<arg_key>opts</arg_key>\n<arg_value>{"x": [1, true]}</arg_value>\n</tool_call><tool_call>g\n</tool_call> ok',
     "ok", [("f", {"opts": {"x": [1, True]}}), ("g", {})]),
    ("glm45", "2 < 3, <tool_ is no tag and <tool_call>{not: a call}", "2 < 3, <tool_ is no tag and <tool_call>{not: a call}", []),
    ("deepseek_r1", ('Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
                     '{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n'
                     '{"a": 1, "b": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
     "Let me check.", [("get_weather", {"city": "Paris"}), ("add", {"a": 1, "b": 2})]),
    ("deepseek_v31", ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>'
                      '<｜tool▁call▁begin｜>add<｜tool▁sep｜>{"a": 1, "b": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜> done'),
     "done", [("get_weather", {"city": "Paris"}), ("add", {"a": 1, "b": 2})]),
    ("deepseek_v31", "2 < 3 <｜tool▁calls▁begin｜>{not a call}", "2 < 3 <｜tool▁calls▁begin｜>{not a call}", []),
    ("qwen3_coder", "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                    "</tool_call>", "Let me check.", [("get_weather", {"city": "Paris"})]),
    ("qwen3_coder", ("<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2.5\n</parameter>\n"
                     "</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York, \"NY\"\n"
                     "line 2\n</parameter>\n</function>\n</tool_call>"),
     None, [("add", {"a": 1, "b": 2.5}), ("get_weather", {"city": 'New York, "NY"\nline 2'})]),
    ("qwen3_coder", '<tool_call>\n<function=f>\n<parameter=opts>\n{"x": [1, true]}\n</parameter>\n</function>\n</tool_call>'
                    "<tool_call>\n<function=g>\n</function>\n</tool_call> ok", "ok", [("f", {"opts": {"x": [1, True]}}), ("g", {})]),
    ("qwen3_coder", "#include <functional> and <tool_call>{not: a call}", "#include <functional> and <tool_call>{not: a call}", []),
]


@pytest.mark.parametrize("fmt, text, content, calls", CASES)
def test_parse_whole(fmt: str, text: str, content: str | None, calls: list[tuple[str, Any]]) -> None:
    msg = parse_message(fmt, text, ids())
    assert msg.content == content
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == calls
    assert [c.id for c in msg.tool_calls] == [f"id{i}" for i in range(len(calls))]


def replay(deltas: list[Delta]) -> ParsedMessage:
    """Rebuild a message from deltas, checking the OpenAI streaming rules on the way."""
    content = ""
    calls: list[dict[str, str]] = []
    for d in deltas:
        o = d.to_openai()
        if "content" in o:
            assert o["content"], "empty content delta"
            content += o["content"]
            continue
        (tc,) = o["tool_calls"]
        if "id" in tc:  # a new call: in order, named first, no arguments yet
            assert tc["index"] == len(calls) and tc["function"]["name"] and tc["function"]["arguments"] == ""
            assert tc["type"] == "function"
            calls.append({"id": tc["id"], "name": tc["function"]["name"], "arguments": ""})
        else:
            assert tc["index"] == len(calls) - 1 or tc["index"] < len(calls)
            assert "name" not in tc["function"] and tc["function"]["arguments"]
            calls[tc["index"]]["arguments"] += tc["function"]["arguments"]
    from llamacli.core.text.tool_calls import ToolCall

    return ParsedMessage(content or None, [ToolCall(c["id"], c["name"], c["arguments"]) for c in calls])


@pytest.mark.parametrize("fmt, text, content, calls", CASES)
def test_stream_equals_whole(fmt: str, text: str, content: str | None, calls: list[tuple[str, Any]]) -> None:
    whole = parse_message(fmt, text, ids())
    rng = random.Random(len(text))
    for chunking in ("chars", "sevens", "random"):
        p = ToolCallParser(fmt, ids())
        deltas: list[Delta] = []
        i = 0
        while i < len(text):
            n = 1 if chunking == "chars" else 7 if chunking == "sevens" else rng.randint(1, 12)
            deltas += p.feed(text[i : i + n])
            i += n
        deltas += p.finish()
        got = replay(deltas)
        assert got == whole == p.message, chunking
    assert ToolCallParser(fmt).finish_reason("stop") == "stop"
    p = ToolCallParser(fmt)
    p.feed(text)
    p.finish()
    assert p.finish_reason("stop") == ("tool_calls" if calls else "stop")
    assert p.finish_reason("length") == "length"


def test_stream_cut_off_call_is_dropped_from_the_message() -> None:
    """n_predict ends the output inside a call: the deltas already streamed stay sent, the
    final message drops the partial call (finish_reason stays "length")."""
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    p = ToolCallParser("hermes", ids())
    deltas = p.feed(text) + p.finish(cut=True)
    sent = replay(deltas)
    assert sent.tool_calls[0].arguments == '{"city": "Par'
    assert p.message.tool_calls == [] and not p.message.content
    assert p.finish_reason("length") == "length"


_ADD = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
_WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
# (format, a whole output with two calls, the content before them): every prefix of it is a
# possible cut by max_tokens
CUT_OUTPUTS = [
    ("hermes", f"Let me see.\n<tool_call>\n{_ADD}\n</tool_call>\n<tool_call>\n{_WEATHER}\n</tool_call>", "Let me see."),
    ("llama3", f"<|python_tag|>{_ADD.replace('arguments', 'parameters')}; {_WEATHER.replace('arguments', 'parameters')}", None),
    ("mistral", f'[TOOL_CALLS][{_ADD[:-1]}, "id": "a1"}}, {_WEATHER[:-1]}, "id": "a2"}}]', None),
    ("mistral_args", '[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', None),
    ("generic", f'{{"tool_calls": [{_ADD}, {_WEATHER}]}}', None),
    ("generic", '{"tool_call": ' + _ADD + "}", None),
    ("deepseek_r1", ('Ok.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{"a": 1, "b": 2}\n```'
                     '<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```'
                     '<｜tool▁call▁end｜><｜tool▁calls▁end｜>'), "Ok."),
    ("deepseek_v31", ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{"a": 1, "b": 2}<｜tool▁call▁end｜>'
                      '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'), None),
]
_SYNTAX = ("{", "}", "[", "]", '"', "<tool", "tool_call", "TOOL_CALLS", "python_tag", "ARGS", "<|", "<｜", "```")


@pytest.mark.parametrize("fmt, text, before", CUT_OUTPUTS)
def test_cut_output_keeps_complete_calls_and_no_syntax(fmt: str, text: str, before: str | None) -> None:
    """Cut anywhere (max_tokens): the calls complete by then are returned, the partial one is
    dropped, and no fragment of call syntax is content, whole or streamed."""
    whole = parse_message(fmt, text, ids())
    assert len(whole.tool_calls) in (1, 2)
    for cut in range(len(text)):
        prefix = text[:cut]
        msg = parse_message(fmt, prefix, ids(), cut=True)
        assert msg.content in (None, "") or msg.content == (before or "")[: len(msg.content)], (prefix, msg)
        for piece in _SYNTAX:
            assert piece not in (msg.content or ""), (prefix, msg.content)
        # exactly the calls whose text is complete in the prefix
        assert msg.tool_calls == whole.tool_calls[: len(msg.tool_calls)], prefix
        for c in msg.tool_calls:
            json.loads(c.arguments)
        n_done = sum(1 for c in whole.tool_calls if text.find(c.arguments) + len(c.arguments) < cut)
        assert len(msg.tool_calls) >= n_done - 1 and len(msg.tool_calls) <= n_done + 1, prefix
        # streamed one character at a time: the same message; content deltas carry no syntax
        p = ToolCallParser(fmt, ids())
        deltas = [d for ch in prefix for d in p.feed(ch)] + p.finish(cut=True)
        assert p.message == msg, prefix
        sent = replay(deltas)
        assert (sent.content or "") == (msg.content or ""), prefix
        assert sent.tool_calls[: len(msg.tool_calls)] == msg.tool_calls, prefix


def test_cut_after_complete_calls_returns_them() -> None:
    """Cut while the second call is written: the first one is the answer, with no content."""
    text = f"<tool_call>\n{_ADD}\n</tool_call>\n<tool_call>\n{{\"name\": \"get_weather\", \"argu"
    msg = parse_message("hermes", text, ids(), cut=True)
    assert msg.content is None
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [("add", {"a": 1, "b": 2})]
    # the start of each format's call syntax, cut: no content at all
    for fmt, text in [("generic", '{"'), ("generic", '{"tool_ca'), ("hermes", '<tool_call>\n{"'), ("hermes", "<tool_"),
                      ("llama3", '{"'), ("llama3", "<|python_"), ("mistral", "[TOOL_CA"), ("mistral", '[TOOL_CALLS][{"na')]:
        assert not parse_message(fmt, text, ids(), cut=True).content, (fmt, text)
        if fmt in ("hermes", "mistral"):  # formats whose calls may follow some text
            assert parse_message(fmt, "Hi. " + text, ids(), cut=True).content == "Hi."


def test_stream_holds_marker_prefixes() -> None:
    p = ToolCallParser("hermes", ids())
    assert [d.content for d in p.feed("Hello <tool")] == ["Hello"]
    assert p.feed("_call>") == []
    d = p.feed('{"name": "add", ')
    assert d[0].name == "add" and d[0].index == 0
    assert p.feed('"arguments": {"a"')[0].arguments == '{"a"'


# ---- grammars --------------------------------------------------------------------------------
def accepts(tok, spec: GrammarSpec | None, text: str) -> bool:  # type: ignore[no-untyped-def]
    assert spec is not None
    c = GrammarConstraint(compile_grammar(tok, spec))
    return all(c.accept(t) for t in tok.tokenize(text, add_special=False)) and c.is_accepting


HERMES_OK = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
DS_V31_OK = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{"a": 1, "b": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
DS_R1_OK = ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{"a": 1, "b": 2}\n```'
            '<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
GLM_OK = "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n<arg_key>b</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"
QWEN_OK = "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>"
GRAMMAR_CASES = [
    # (format, choice, parallel, accepted, rejected)
    ("hermes", ToolChoice("required"), False, [HERMES_OK], ["Hi", HERMES_OK + "\n" + HERMES_OK,
     '<tool_call>\n{"name": "sub", "arguments": {}}\n</tool_call>', '<tool_call>\n{"name": "add", "arguments": {"a": "1", "b": 2}}\n</tool_call>']),
    ("hermes", ToolChoice("required"), True, [HERMES_OK, HERMES_OK + "\n" + HERMES_OK], ["Hi"]),
    ("hermes", ToolChoice("required", "get_weather"), False,
     ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'], [HERMES_OK]),
    ("hermes", ToolChoice("auto"), False, ["Just text.", "Sure. " + HERMES_OK],
     ['Sure. <tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>', "x <tool_call> free text"]),
    ("hermes", ToolChoice("auto"), True, ["Text", HERMES_OK + "\n" + HERMES_OK + " done"], ["<tool_call>{}</tool_call>"]),
    ("llama3", ToolChoice("required"), False, ['{"name": "add", "parameters": {"a": 1, "b": 2}}'],
     ['{"name": "add", "arguments": {"a": 1, "b": 2}}', "Hello"]),
    ("llama3", ToolChoice("auto"), False, ["Hello {there}", '{"name": "add", "parameters": {"a": 1, "b": 2}}'],
     ['{"name": "add", "parameters": {"a": 1}}']),
    ("mistral", ToolChoice("required"), False, ['[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "abcdefghi"}]'],
     ['[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "short"}]', "text"]),
    ("mistral", ToolChoice("auto"), False, ["text", 'Ok[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "abcdefghi"}]'],
     ['Ok[TOOL_CALLS][{"name": "add"}]']),
    ("mistral_args", ToolChoice("required"), True, ['[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}[TOOL_CALLS]get_weather[ARGS]{"city": "x"}'],
     ['[TOOL_CALLS]add[ARGS]{"a": 1}']),
    ("glm45", ToolChoice("required"), False, [GLM_OK], ["Hi", GLM_OK + GLM_OK, "<tool_call>sub\n</tool_call>",
     "<tool_call>add\n<arg_key>c</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"]),
    ("glm45", ToolChoice("auto"), True, ["Just text.", "Sure. " + GLM_OK + "\n" + GLM_OK + " done",
                                         "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>a <b> c</arg_value>\n</tool_call>"],
     ["x <tool_call>nope\n</tool_call>"]),
    ("qwen3_coder", ToolChoice("required"), False, [QWEN_OK], ["Hi", QWEN_OK + QWEN_OK,
     "<tool_call>\n<function=sub>\n</function>\n</tool_call>",
     "<tool_call>\n<function=add>\n<parameter=c>\n1\n</parameter>\n</function>\n</tool_call>"]),
    ("qwen3_coder", ToolChoice("auto"), True, ["Just text.", "Sure. " + QWEN_OK + "\n" + QWEN_OK + " done",
                                               "<tool_call>\n<function=get_weather>\n<parameter=city>\na <b> c\n</parameter>\n"
                                               "</function>\n</tool_call>"],
     ["x <tool_call>\n<function=nope>\n</function>\n</tool_call>"]),
    ("generic", ToolChoice("auto"), False, ['{"response": "hi"}', '{"tool_call": {"name": "add", "arguments": {"a": 1, "b": 2}}}'],
     ["hi", '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}']),
    ("generic", ToolChoice("required"), True, ['{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}'],
     ['{"response": "hi"}', '{"tool_calls": []}']),
]


@pytest.mark.parametrize("fmt, choice, parallel, good, bad", GRAMMAR_CASES)
def test_tool_grammars(demo_tok, fmt: str, choice: ToolChoice, parallel: bool, good: list[str], bad: list[str]) -> None:  # type: ignore[no-untyped-def]
    spec = tool_call_grammar(fmt, parse_tools(TOOLS), choice, parallel, demo_tok)
    for text in good:
        assert accepts(demo_tok, spec, text), text
    for text in bad:
        assert not accepts(demo_tok, spec, text), text
    assert tool_call_grammar(fmt, parse_tools(TOOLS), ToolChoice("none"), parallel, demo_tok) is None


DS_GRAMMAR_CASES = [
    ("deepseek_v31", ToolChoice("required"), False, [DS_V31_OK], ["Hi", DS_V31_OK.replace("add", "sub")]),
    ("deepseek_v31", ToolChoice("auto"), True, ["Just text.", "Sure. " + DS_V31_OK], [DS_V31_OK.replace('"b": 2', '"b": "2"')]),
    ("deepseek_r1", ToolChoice("required"), False, [DS_R1_OK], ["Hi", DS_V31_OK]),
    ("deepseek_r1", ToolChoice("auto"), False, ["Just text.", "Sure. " + DS_R1_OK], [DS_R1_OK.replace("add", "sub")]),
]


@pytest.mark.parametrize("fmt, choice, parallel, good, bad", DS_GRAMMAR_CASES)
def test_deepseek_tool_grammars(tmp_path, fmt: str, choice: ToolChoice, parallel: bool, good: list[str], bad: list[str]) -> None:  # type: ignore[no-untyped-def]
    """As test_tool_grammars, with a byte-level BPE vocabulary (the demo's SPM one reads DeepSeek's
    `▁` as a space)."""
    tok = load_tokenizer(read_metadata(str(write_tiny_model("deepseek2", "F32", tmp_path / "d.gguf"))))
    spec = tool_call_grammar(fmt, parse_tools(TOOLS), choice, parallel, tok)
    for text in good:
        assert accepts(tok, spec, text), text
    for text in bad:
        assert not accepts(tok, spec, text), text


def test_markers_use_control_token_ids(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from llamacli.core.model.load import load_model

    path = write_tiny_model("qwen2", "F32", tmp_path / "q.gguf")
    _, g, _ = load_model(path)
    tok = load_tokenizer(g.metadata)
    tid = tok.vocab.token_to_id["<|im_end|>"]
    assert _marker("<|im_end|>", tok) == f"<[{tid}]>"
    assert _marker("[TOOL_CALLS]", tok) == '"[TOOL_CALLS]"'  # not a token here: plain text
    view = preserving(tok, ["<|im_end|>", "[not a token]"])
    assert view.token_to_piece(tid) == b"<|im_end|>" and tok.token_to_piece(tid) == b""
    assert preserving(tok, []) is tok


# ---- prompts ---------------------------------------------------------------------------------
def test_prepare_chat_native_glm45(templates, demo_tok) -> None:  # type: ignore[no-untyped-def]
    """GLM-4.6's template (glm4moe files): tools through the template, earlier calls as
    <arg_key>/<arg_value> pairs, its markers kept in the output, a lazy grammar after <tool_call>."""
    s = prepare_chat(templates["glm46"], CONVERSATION, tools=TOOLS, tokenizer=demo_tok)
    assert s.format == "glm45" and s.parser().fmt == "glm45"
    assert "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>" in s.prompt
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in s.prompt and s.prompt.endswith("<|assistant|>")
    assert s.preserved_tokens[:2] == ("<tool_call>", "</tool_call>") and "</arg_value>" in s.preserved_tokens
    assert s.grammar is not None and s.grammar.kind == "lark" and 'hd[lazy]: TEXT "<tool_call>"' in s.grammar.source


def test_prepare_chat_native_deepseek_r1(templates) -> None:  # type: ignore[no-untyped-def]
    """llama.cpp's DeepSeek-R1 template (deepseek2 files): tools through the template, earlier
    calls in its fenced syntax, its five markers kept in the output, a lazy grammar after
    `<｜tool▁calls▁begin｜>`. (DeepSeek-V3.1's template lists no tools: the generic format.)"""
    s = prepare_chat(templates["deepseek_r1"], CONVERSATION, tools=TOOLS)
    assert s.format == "deepseek_r1" and s.parser().fmt == "deepseek_r1"
    assert ("<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>"
            in s.prompt)
    assert s.preserved_tokens[:5] == ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                      "<｜tool▁sep｜>", "<｜tool▁call▁end｜>")
    assert s.grammar is not None and 'hd[lazy]: TEXT "<｜tool▁calls▁begin｜>"' in s.grammar.source
    assert prepare_chat(templates["deepseek_v31"], CONVERSATION, tools=TOOLS).format == "generic"


def test_prepare_chat_native_qwen3_coder(templates, demo_tok) -> None:  # type: ignore[no-untyped-def]
    """Qwen3.5's template (qwen35 files): tools through the template, earlier calls as
    <function=...>/<parameter=...> blocks, <tool_call> kept in the output, a lazy grammar."""
    s = prepare_chat(templates["qwen35"], CONVERSATION, tools=TOOLS, tokenizer=demo_tok)
    assert s.format == "qwen3_coder" and s.parser().fmt == "qwen3_coder"
    assert "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>" in s.prompt
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in s.prompt
    assert s.preserved_tokens[:2] == ("<tool_call>", "</tool_call>")
    assert s.grammar is not None and s.grammar.kind == "lark" and 'hd[lazy]: TEXT "<tool_call>"' in s.grammar.source


def test_prepare_chat_native_hermes(templates, demo_tok) -> None:  # type: ignore[no-untyped-def]
    s = prepare_chat(templates["qwen25"], CONVERSATION, tools=TOOLS, tokenizer=demo_tok)
    assert s.format == "hermes" and s.tool_choice == ToolChoice("auto") and not s.parallel_tool_calls
    assert '"name": "get_weather"' in s.prompt and "<tool_response>\nsunny, 21 C\n</tool_response>" in s.prompt
    assert s.prompt.endswith("<|im_start|>assistant\n")
    assert s.preserved_tokens == ("<tool_call>", "</tool_call>")
    assert s.grammar is not None and s.grammar.kind == "lark"  # auto: lazy grammar after <tool_call>
    assert s.parser().fmt == "hermes"


def test_prepare_chat_tool_choice_none(templates) -> None:  # type: ignore[no-untyped-def]
    s = prepare_chat(templates["qwen25"], CONVERSATION, tools=TOOLS, tool_choice="none")
    assert s.format == "content" and s.grammar is None and "get_weather\", \"description" not in s.prompt
    assert "<tool_response>" in s.prompt  # the history still renders natively


def test_prepare_chat_generic_polyfill(templates) -> None:  # type: ignore[no-untyped-def]
    s = prepare_chat(templates["gemma2"], CONVERSATION, tools=TOOLS, tool_choice="required", parallel_tool_calls=True)
    assert s.format == "generic" and s.grammar is not None and s.grammar.kind == "json_schema"
    assert "You can call any of the following tools" in s.prompt and "`tool_calls`" in s.prompt
    assert '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcdefghi"}}' in s.prompt
    assert '{"tool_response": {"tool": "get_weather", "tool_call_id": "abcdefghi", "content": "sunny, 21 C"}}' in s.prompt
    assert '{"response": "Sunny, 21 C."}' in s.prompt
    assert s.grammar.schema["required"] == ["tool_calls"]


def test_polyfill_keeps_roles_alternating() -> None:
    msgs = polyfill_messages(
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "1", "function": {"name": "a", "arguments": "{}"}},
                {"id": "2", "function": {"name": "b", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "1", "content": "r1"},
            {"role": "tool", "tool_call_id": "2", "content": "r2"},
            {"role": "user", "content": "next"},
        ]
    )
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert json.loads(msgs[1]["content"])["tool_calls"][1] == {"name": "b", "arguments": {}, "id": "2"}
    lines = msgs[2]["content"].split("\n")
    assert json.loads(lines[0])["tool_response"]["tool"] == "a" and json.loads(lines[1])["tool_response"]["content"] == "r2"
    assert lines[-1] == "next"


def test_prepare_chat_with_response_format(templates, demo_tok) -> None:  # type: ignore[no-untyped-def]
    schema = GrammarSpec.json_schema({"type": "object", "properties": {"t": {"type": "integer"}}, "required": ["t"]})
    s = prepare_chat(templates["qwen25"], CONVERSATION, tools=TOOLS, grammar=schema, tokenizer=demo_tok)
    assert accepts(demo_tok, s.grammar, '{"t": 3}') and accepts(demo_tok, s.grammar, HERMES_OK)
    assert not accepts(demo_tok, s.grammar, "free text")
    g = prepare_chat(templates["gemma2"], CONVERSATION, tools=TOOLS, grammar=schema)
    assert g.grammar is not None and accepts(demo_tok, g.grammar, '{"response": {"t": 1}}')
    with pytest.raises(InvalidRequest, match="grammar cannot be combined with tools"):
        prepare_chat(templates["qwen25"], CONVERSATION, tools=TOOLS, grammar=GrammarSpec.gbnf('root ::= "x"'))


def test_prepare_chat_plain_template_with_tool_history(demo_model: str) -> None:
    """The demo model's Gemma 3 template knows no tools: history with calls still renders."""
    md = read_metadata(demo_model)
    t = ChatTemplate.from_metadata(md, bos_token="<bos>", eos_token="<eos>")
    s = prepare_chat(t, CONVERSATION)
    assert s.format == "content" and '"tool_response"' in s.prompt and s.grammar is None
    s = prepare_chat(t, CONVERSATION, tools=TOOLS)
    assert s.format == "generic" and s.prompt.endswith("<start_of_turn>model\n")
