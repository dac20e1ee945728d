"""gpt-oss's harmony format (core/text/tool_calls/harmony.py): the outputs of llama.cpp's own
gpt-oss cases (tests/test-chat.cpp, "GPT-OSS format tests") parsed to the message llama.cpp
expects, the same message when streamed piece by piece, and the gpt-oss template of llama.cpp's
models/templates rendered in our sandbox through prepare_chat."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.chat_templates import ChatTemplate
from llamacli.core.text.grammar import GrammarSpec
from llamacli.core.text.reasoning import ReasoningSplitter
from llamacli.core.text.tokenizer import load_tokenizer
from llamacli.core.text.tool_calls.harmony import MARKERS, classify, scan_harmony
from llamacli.core.text.tool_calls.harmony import grammar as harmony_grammar
from llamacli.core.text.tool_calls.setup import prepare_chat
from llamacli.core.text.tool_calls.stream import ParsedMessage, ToolCallParser
from llamacli.core.text.tool_calls.tools import parse_tool_choice, parse_tools
from tests.sdist_cache import llama_cpp_path
from tests.test_tool_calls import accepts

ANSWER = "Hello, world!\nWhat's up?"
THOUGHTS = "I'm\nthinking"
CALL = ("special_function", '{"arg1": 1}')
EDIT_ARGS = '{"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false}'

# (model output after the generation prompt `<|start|>assistant`, tools?, reasoning_format,
#  expected reasoning_content, content, calls) -- test-chat.cpp's cases, in its order
CASES: list[tuple[str, bool, str, str, str | None, list[tuple[str, str]]]] = [
    ("<|channel|>final<|message|>" + ANSWER, False, "none", "", ANSWER, []),
    ("<|channel|>commentary<|message|>" + ANSWER, False, "none", "", ANSWER, []),
    (f"<|channel|>analysis<|message|>{THOUGHTS}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}",
     False, "auto", THOUGHTS, ANSWER, []),
    (f"<|channel|>analysis<|message|>{THOUGHTS}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}",
     False, "none", "", f"<|channel|>analysis<|message|>{THOUGHTS}<|end|>{ANSWER}", []),
    (' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}', True, "auto", "", None, [CALL]),
    ('<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}', True, "auto", "", None, [CALL]),
    (' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}', True, "auto", "", None,
     [CALL]),
    ('<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}', True, "auto", "", None, [CALL]),
    (f"<|channel|>analysis<|message|>{THOUGHTS}<|end|>"
     '<|start|>assistant to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
     True, "auto", THOUGHTS, None, [CALL]),
    ("<|channel|>analysis<|message|>Thinking about edit...<|end|>"
     "<|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>" + EDIT_ARGS,
     True, "auto", "Thinking about edit...", None, [("edit", EDIT_ARGS)]),
    ("<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|>"
     '<|start|>assistant<|channel|>final <|constrain|>json<|message|>{"amount": 123.45, "date": "2025-12-03"}',
     False, "auto", "I need to output the invoice details in JSON", '{"amount": 123.45, "date": "2025-12-03"}', []),
    # unsolicited calls of built-in tools: dropped, content empty
    ("<|channel|>analysis<|message|>I will execute python to say hello<|end|>"
     "<|start|>assistant to=container.exec<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'",
     False, "auto", "I will execute python to say hello", "", []),
    ("<|channel|>analysis<|message|>I will execute python to say hello<|end|>"
     '<|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print("hello")',
     False, "auto", "I will execute python to say hello", "", []),
    # a stray "<|channel|>commentary to=assistant" before the reasoning or the final message
    (f"<|channel|>commentary to=assistant<|channel|>analysis<|message|>{THOUGHTS}<|end|>"
     f"<|start|>assistant<|channel|>final<|message|>{ANSWER}", False, "auto", THOUGHTS, ANSWER, []),
    (f"<|channel|>analysis<|message|>{THOUGHTS}<|end|>"
     f"<|start|>assistant<|channel|>commentary to=assistant<|channel|>final<|message|>{ANSWER}",
     False, "auto", THOUGHTS, ANSWER, []),
]


def _parser(tools: bool, reasoning_format: str) -> ToolCallParser:
    ids = itertools.count()
    splitter = None if reasoning_format == "none" else ReasoningSplitter()
    return ToolCallParser("harmony" if tools else "harmony_text", lambda: f"id{next(ids)}", reasoning=splitter)


def _check(msg: ParsedMessage, reasoning: str, content: str | None, calls: list[tuple[str, str]]) -> None:
    assert msg.reasoning_content == reasoning
    assert msg.content == content
    assert [(c.name, c.arguments) for c in msg.tool_calls] == calls
    for c in msg.tool_calls:
        json.loads(c.arguments)


@pytest.mark.parametrize("i", range(len(CASES)))
def test_llama_cpp_cases_parse_to_llama_cpps_message(i: int) -> None:
    text, tools, fmt, reasoning, content, calls = CASES[i]
    p = _parser(tools, fmt)
    p.feed(text)
    p.finish()
    _check(p.message, reasoning, content, calls)
    if calls:
        assert p.finish_reason("stop") == "tool_calls"


@pytest.mark.parametrize("i", range(len(CASES)))
def test_streamed_piece_by_piece_gives_the_same_message(i: int) -> None:
    """Fed 1 to 5 characters at a time (markers split anywhere): the reasoning, content and
    argument deltas joined equal the whole message, and no marker text leaks into a delta
    (except the analysis message that reasoning_format none keeps in the content)."""
    text, tools, fmt, reasoning, content, calls = CASES[i]
    for step in (1, 2, 5):
        p = _parser(tools, fmt)
        deltas = []
        for a in range(0, len(text), step):
            deltas += p.feed(text[a : a + step])
        deltas += p.finish()
        _check(p.message, reasoning, content, calls)
        assert "".join(d.reasoning for d in deltas if d.reasoning) == reasoning
        streamed = "".join(d.content for d in deltas if d.content and d.index is None)
        assert streamed == (content or "")
        for j, (name, args) in enumerate(calls):
            mine = [d for d in deltas if d.index == j]
            assert mine[0].name == name
            assert "".join(d.arguments or "" for d in mine) == args
        if fmt != "none":
            assert not any(mk in (d.content or "") + (d.reasoning or "") for d in deltas for mk in MARKERS)


def test_partial_analysis_is_reasoning_so_far() -> None:
    """test-chat.cpp's partial case: an analysis message still being written is reasoning; a
    partial `<|end|>` at its end is held back while streaming."""
    s = scan_harmony("<|channel|>analysis<|message|>I'm\nthinking", final=False)
    assert (s.reasoning, s.content, s.calls) == ("I'm\nthinking", "", [])
    s = scan_harmony("<|channel|>analysis<|message|>I'm\nthinking<|en", final=False)
    assert s.reasoning == "I'm\nthinking"
    assert scan_harmony("<|channel|>fin", final=False).content == ""  # a header being written: nothing yet


def test_a_call_cut_by_max_tokens_is_dropped_and_text_without_channels_is_content() -> None:
    p = _parser(True, "auto")
    p.feed('<|channel|>commentary to=functions.special_function<|message|>{"arg1": ')
    p.finish(cut=True)
    assert p.message.tool_calls == [] and p.finish_reason("length") == "length"
    # a model that does not speak harmony: its text is the content
    p = _parser(False, "auto")
    p.feed("plain answer")
    p.finish()
    assert p.message.content == "plain answer"
    # function calls without tools in the request: unsolicited, dropped
    p = _parser(False, "auto")
    p.feed('<|channel|>commentary to=functions.f<|message|>{"a": 1}')
    p.finish()
    assert p.message.tool_calls == [] and p.message.content == ""


def test_classify_headers() -> None:
    assert classify(" to=functions.get_weather<|channel|>commentary json") == ("call", "get_weather")
    assert classify("<|channel|>commentary to=assistant<|channel|>final") == ("final", "")
    assert classify("<|channel|>analysis") == ("analysis", "")
    assert classify(" to=browser.search<|channel|>commentary") == ("unsolicited", "")
    assert classify("<|channel|>bogus") == ("unsolicited", "")


# ---- the template ------------------------------------------------------------------------------
WEATHER: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def gptoss() -> ChatTemplate:
    src = (llama_cpp_path("models/templates") / "openai-gpt-oss-120b.jinja").read_text()
    return ChatTemplate.from_source(src, bos_token="<|startoftext|>", eos_token="<|return|>")


def test_template_renders_tools_calls_results_and_thinking(gptoss: ChatTemplate) -> None:
    """prepare_chat on the gpt-oss template: harmony format with the markers preserved, the
    tools as a TypeScript namespace in the developer message, an earlier call in the commentary
    channel to its recipient, the tool's result from `functions.NAME`, the earlier reasoning
    (reasoning_content, as llama.cpp passes it to the template's `thinking`), and the generation
    prompt `<|start|>assistant`."""
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    setup = prepare_chat(gptoss, msgs, tools=[WEATHER], reasoning_format="auto")
    assert setup.format == "harmony" and set(MARKERS) <= set(setup.preserved_tokens)
    p = setup.prompt
    assert "<|start|>developer<|message|># Instructions\n\nBe brief." in p
    assert "namespace functions {\n\n// Current weather\ntype get_weather = (_: {\ncity: string,\n}) => any;" in p
    assert "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>" in p
    assert '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>' in p
    assert '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>' in p
    assert p.endswith("<|start|>assistant")
    assert (setup.thinking.start, setup.thinking.end) == ("<|channel|>analysis<|message|>", "<|end|>")
    # the parser it makes reads the model's harmony reply
    parser = setup.parser(lambda: "id0")
    parser.feed("<|channel|>analysis<|message|>Sunny, say so.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.")
    parser.finish()
    assert parser.message.to_openai() == {"role": "assistant", "content": "Sunny.", "reasoning_content": "Sunny, say so."}


def test_template_without_tools_and_continuing_a_message(gptoss: ChatTemplate) -> None:
    """No tools (or tool_choice none): no tool namespace, calls are not parsed; continuing the
    last assistant message (no generation prompt) ends it with `<|end|>`, not `<|return|>`."""
    setup = prepare_chat(gptoss, [{"role": "user", "content": "hi"}], tools=[WEATHER], tool_choice="none")
    assert setup.format == "harmony_text" and "namespace functions" not in setup.prompt
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]
    p = prepare_chat(gptoss, msgs, add_generation_prompt=False).prompt
    assert "<|return|>" not in p and p.endswith("<|channel|>final<|message|>Hel<|end|>")


# ---- the grammar -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_tok(demo_model: str):  # type: ignore[no-untyped-def]
    return load_tokenizer(read_metadata(demo_model))


ADD: dict[str, Any] = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
W_ARGS = '{"city": "Rome"}'
GRAMMAR_CASES = [
    # (tool_choice, accepted outputs, rejected outputs)
    ("required",
     ["<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + W_ARGS,
      " to=functions.add<|channel|>commentary json<|message|>{\"a\": 1}",
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
      "<|channel|>commentary to=functions.get_weather<|message|>" + W_ARGS],
     ["<|channel|>final<|message|>Hi", "<|channel|>commentary to=functions.nope<|message|>{}",
      "<|channel|>commentary to=functions.add<|message|>{\"a\": \"x\"}"]),
    ("auto",
     ["<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hi there",
      "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>commentary to=functions.add"
      " <|constrain|>json<|message|>{\"a\": 2}"],
     ["<|channel|>commentary to=functions.add<|message|>{\"b\": 2}",
      "<|channel|>commentary to=functions.nope<|message|>{}"]),
]


@pytest.mark.parametrize("choice, good, bad", GRAMMAR_CASES)
def test_call_grammar(demo_tok, choice: str, good: list[str], bad: list[str]) -> None:  # type: ignore[no-untyped-def]
    """llama.cpp's gpt-oss grammar: required, a call of a declared tool (either header order)
    after any analysis; auto, free text until ` to=functions.`, then a declared tool's call."""
    spec = harmony_grammar(parse_tools([WEATHER, ADD]), parse_tool_choice(choice, parse_tools([WEATHER, ADD])), None)
    for text in good:
        assert accepts(demo_tok, spec, text), text
    for text in bad:
        assert not accepts(demo_tok, spec, text), text
    assert harmony_grammar(parse_tools([WEATHER]), parse_tool_choice("none", parse_tools([WEATHER])), None) is None


def test_response_format_grammar_follows_the_analysis(demo_tok, gptoss: ChatTemplate) -> None:  # type: ignore[no-untyped-def]
    """A JSON schema: analysis messages, then the final channel with the JSON (llama.cpp's
    response-format rule); through prepare_chat, tools or not."""
    schema = GrammarSpec.json_schema({"type": "object", "properties": {"amount": {"type": "number"}},
                                      "required": ["amount"], "additionalProperties": False})
    setup = prepare_chat(gptoss, [{"role": "user", "content": "x"}], tools=[WEATHER], grammar=schema)
    for spec in (setup.grammar, harmony_grammar([], parse_tool_choice(None, []), schema)):
        assert accepts(demo_tok, spec, "<|channel|>analysis<|message|>JSON it is<|end|><|start|>assistant"
                                       '<|channel|>final <|constrain|>json<|message|>{"amount": 1.5}')
        assert accepts(demo_tok, spec, '<|channel|>final<|message|>{"amount": 2}')
        assert not accepts(demo_tok, spec, '{"amount": 2}')
        assert not accepts(demo_tok, spec, '<|channel|>final<|message|>{"amount": "2"}')


def test_continuing_an_assistant_message(gptoss: ChatTemplate) -> None:
    """A prefill (llama-server continues a final assistant message): as llama.cpp's gpt-oss
    continuation the prompt ends in the final channel after the message's reasoning in the
    analysis channel (test-chat.cpp's message_assist_prefill_content), and the parser reads the
    output as the rest of that final message (the reply holds the generated part, as for every
    format here)."""
    from llamacli.http.oai import chat_setup

    msgs = [{"role": "user", "content": "Hey"}, {"role": "assistant", "content": "Hello, ", "reasoning_content": "I'm thinking"}]
    setup = chat_setup(gptoss, msgs, {}, None, None, reasoning_format="auto")
    assert setup.prompt.endswith("<|start|>user<|message|>Hey<|end|><|start|>assistant<|channel|>analysis<|message|>"
                                 "I'm thinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, ")
    p = setup.parser()
    deltas = p.feed("world!\nWhat's") + p.feed(" up?")
    p.finish()
    assert "".join(d.content or "" for d in deltas) == "world!\nWhat's up?"
    assert (p.message.content, p.message.reasoning_content) == ("world!\nWhat's up?", "")
