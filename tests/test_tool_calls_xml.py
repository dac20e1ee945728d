"""The seed_oss and minimax_m2 tool-call formats (core/text/tool_calls/parse.py XML_TAGS): found
in their templates, parsed whole and streamed as llama.cpp's tests/test-chat.cpp expects
(ByteDance-Seed-OSS and MiniMax-M2 cases), and held by their grammars."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from llamacli.core.text.chat_templates import ChatTemplate
from llamacli.core.text.tool_calls import ToolCallParser, ToolChoice, detect_format, native_markers, parse_message, prepare_chat
from tests.sdist_cache import llama_cpp_path
from tests.test_tool_calls import CONVERSATION, TOOLS, demo_tok, ids, replay  # noqa: F401  (demo_tok: a fixture)
from tests.test_tool_calls import test_tool_grammars as check_grammar

SEED_CALL = "<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n</seed:tool_call>"
EDIT_OLD, EDIT_NEW = 'def foo(arg = "14"):\n    return arg + "bar"\n', 'def foo(arg = "15"):\n    pass\n'
CASES: list[tuple[str, str, str | None, list[tuple[str, Any]]]] = [
    # (format, output, content, [(name, arguments)]): test-chat.cpp's ByteDance-Seed-OSS cases
    ("seed_oss", SEED_CALL, None, [("special_function", {"arg1": 1})]),
    ("seed_oss", SEED_CALL + "\n<seed:tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>1</parameter>\n"
                 "<parameter=arg2>2</parameter>\n</function>\n</seed:tool_call>",
     None, [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    ("seed_oss", '<seed:tool_call>\n<function=todo_list>\n<parameter=todos>[{"item": "Check stuff", "selected": false}, '
                 '{"item": "Prepare stuff", "selected": true}]</parameter>\n</function>\n</seed:tool_call>',
     None, [("todo_list", {"todos": [{"item": "Check stuff", "selected": False}, {"item": "Prepare stuff", "selected": True}]})]),
    ("seed_oss", f"<seed:tool_call>\n<function=edit>\n<parameter=filename>foo.cpp</parameter>\n<parameter=oldString>{EDIT_OLD}"
                 f"</parameter>\n<parameter=newString>{EDIT_NEW}</parameter>\n</function>\n</seed:tool_call>",
     None, [("edit", {"filename": "foo.cpp", "oldString": EDIT_OLD, "newString": EDIT_NEW})]),
    ("seed_oss", "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ("seed_oss", "a <seed:tool_call>{not a call}", "a <seed:tool_call>{not a call}", []),
    # MiniMax-M2's (after its reasoning: the text past `</think>`), and two calls in one block as its template writes them
    ("minimax_m2", '\n\n<minimax:tool_call>\n<invoke name="special_function">\n<parameter name="arg1">1</parameter>\n'
                   "</invoke>\n</minimax:tool_call>", None, [("special_function", {"arg1": 1})]),
    ("minimax_m2", '\n\n<minimax:tool_call>\n<invoke name="empty_args">\n</invoke>\n</minimax:tool_call>', None,
     [("empty_args", {})]),
    ("minimax_m2", 'Sure.\n<minimax:tool_call>\n<invoke name="add">\n<parameter name="a">1</parameter>\n<parameter name="b">'
                   '2.5</parameter>\n</invoke>\n<invoke name="get_weather">\n<parameter name="city">New York, "NY"\n'
                   "</parameter>\n</invoke>\n</minimax:tool_call> done",
     "Sure.\n done", [("add", {"a": 1, "b": 2.5}), ("get_weather", {"city": 'New York, "NY"\n'})]),
    ("minimax_m2", "x <minimax:tool_call>\n<invoke>", "x <minimax:tool_call>\n<invoke>", []),
]


@pytest.mark.parametrize("name, fmt, earlier_call, think", [
    ("ByteDance-Seed-OSS.jinja", "seed_oss",
     "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>",
     "<seed:think>"),
    ("MiniMax-M2.jinja", "minimax_m2",
     '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
     "</minimax:tool_call>", "<think>"),
])
def test_templates_speak_their_formats(demo_tok, name: str, fmt: str, earlier_call: str, think: str) -> None:  # type: ignore[no-untyped-def]
    """The template names its format; tools go through it, earlier calls come back in its syntax,
    its block tags are kept in the output, a lazy grammar waits for the opening tag."""
    t = ChatTemplate.from_source((llama_cpp_path("models/templates") / name).read_text(), bos_token="<s>", eos_token="</s>")
    assert detect_format(t) == fmt
    s = prepare_chat(t, CONVERSATION, tools=TOOLS, tokenizer=demo_tok)
    assert s.format == fmt and s.parser().fmt == fmt and s.thinking.start == think
    assert earlier_call in s.prompt
    tags = native_markers(fmt)
    assert s.preserved_tokens[:2] == tags
    assert s.grammar is not None and f"hd[lazy]: TEXT {json.dumps(tags[0])}" in s.grammar.source


@pytest.mark.parametrize("fmt, text, content, calls", CASES)
def test_parse_whole_and_streamed(fmt: str, text: str, content: str | None, calls: list[tuple[str, Any]]) -> None:
    msg = parse_message(fmt, text, ids())
    assert msg.content == content
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == calls
    rng = random.Random(len(text))
    for step in (1, 7, 0):  # by characters, sevens, random chunks
        p = ToolCallParser(fmt, ids())
        deltas, i = [], 0
        while i < len(text):
            n = step or rng.randint(1, 12)
            deltas += p.feed(text[i : i + n])
            i += n
        deltas += p.finish()
        got = replay(deltas)
        assert (got.content, [(c.name, json.loads(c.arguments)) for c in got.tool_calls]) == (msg.content, calls)


SEED_OK = "<seed:tool_call>\n<function=add>\n<parameter=a>1</parameter>\n<parameter=b>2</parameter>\n</function>\n</seed:tool_call>"
M2_ADD = '<invoke name="add">\n<parameter name="a">1</parameter>\n<parameter name="b">2</parameter>\n</invoke>\n'
M2_OK = "<minimax:tool_call>\n" + M2_ADD + "</minimax:tool_call>"
GRAMMAR_CASES = [
    ("seed_oss", ToolChoice("required"), False, [SEED_OK], ["Hi", SEED_OK + SEED_OK, SEED_OK.replace("=add>", "=sub>")]),
    ("seed_oss", ToolChoice("auto"), True, ["Just text.", "Sure. " + SEED_OK + "\n" + SEED_OK + " done"],
     ["x <seed:tool_call>\n<function=nope>\n</function>\n</seed:tool_call>"]),
    ("minimax_m2", ToolChoice("required"), False, [M2_OK], ["Hi", M2_OK.replace("</minimax", M2_ADD + "</minimax"),
                                                            M2_OK.replace('"a"', '"c"')]),
    ("minimax_m2", ToolChoice("auto"), True, ["Just text.", "Sure.\n" + M2_OK.replace("</minimax", M2_ADD + "</minimax")],
     ['x <minimax:tool_call>\n<invoke name="nope">\n</invoke>\n</minimax:tool_call>']),
]


@pytest.mark.parametrize("fmt, choice, parallel, good, bad", GRAMMAR_CASES)
def test_grammars_hold_calls(demo_tok, fmt: str, choice: ToolChoice, parallel: bool, good: list[str], bad: list[str]) -> None:  # type: ignore[no-untyped-def]
    check_grammar(demo_tok, fmt, choice, parallel, good, bad)


EMPTY_ARGS = {"type": "function", "function": {"name": "empty_args", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("name, fmt, out, thoughts, content, calls", [
    # test-chat.cpp: Seed-OSS writes its own <seed:think> block; MiniMax-M2's prompt opens <think>
    ("ByteDance-Seed-OSS.jinja", "deepseek", "<seed:think>I'm thinking about the answer</seed:think>\nHello, world!",
     "I'm thinking about the answer", "Hello, world!", []),
    ("MiniMax-M2.jinja", "auto", "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?", "I'm\nthinking",
     "Hello, world!\nWhat's up?", []),
    ("MiniMax-M2.jinja", "auto", 'Let\'s call a tool:\n</think>\n\n<minimax:tool_call>\n<invoke name="empty_args">\n</invoke>\n'
     "</minimax:tool_call>", "Let's call a tool:", None, [("empty_args", "{}")]),
])
def test_thoughts_then_content_or_calls(name: str, fmt: str, out: str, thoughts: str, content: str | None,
                                        calls: list[tuple[str, str]]) -> None:
    t = ChatTemplate.from_source((llama_cpp_path("models/templates") / name).read_text(), bos_token="<s>", eos_token="</s>")
    s = prepare_chat(t, CONVERSATION[:1], tools=[EMPTY_ARGS], tool_choice="auto", reasoning_format=fmt)
    p = s.parser()
    for ch in out:
        p.feed(ch)
    p.finish()
    assert (p.message.reasoning_content, p.message.content) == (thoughts, content)
    assert [(c.name, c.arguments) for c in p.message.tool_calls] == calls
