"""Tool calling through the engine with the demo model: prompts from prepare_chat, the
grammar in TaskParams, the streamed text through ToolCallParser. With tool_choice required or
named every answer is a call of a declared tool whose arguments validate, in every format
(the demo model's own Gemma template uses the generic format; the others are forced through
llama.cpp's Qwen 2.5, Llama 3.1 and Mistral templates)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from llamacli.core.text.chat_templates import ChatTemplate
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.model.load import load_model
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.tasks import Final, Partial, Task, TaskParams
from llamacli.core.text.tokenizer import load_tokenizer
from llamacli.core.text.grammar import GrammarSpec
from llamacli.core.text.tool_calls import ChatSetup, parse_message, prepare_chat

from tests.sdist_cache import llama_cpp_path
from tests.test_tool_calls import CONVERSATION, TOOLS, replay

jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.slow

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
OTHER_TEMPLATES = {
    "hermes": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "llama3": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
}


@pytest.fixture(scope="module")
def demo(demo_model: str):  # type: ignore[no-untyped-def]
    model, _, _ = load_model(demo_model)
    md = read_metadata(demo_model)
    tok = load_tokenizer(md)
    tmpl = ChatTemplate.from_metadata(md, bos_token="<bos>", eos_token="<eos>")
    with Engine(model, tok, EngineConfig(n_ctx=16 * 1024, n_parallel=16)) as eng:
        yield eng, tok, tmpl


def run_all(
    eng: Engine, tok: Any, jobs: list[tuple[str, ChatSetup, float]], n_predict: int = 160, grammar: Any = None
) -> list[tuple[str, ChatSetup, Any]]:
    """Submit every job at once (one continuous batch), stream each through its parser."""
    tasks = []
    for i, (label, setup, temp) in enumerate(jobs):
        prompt = tok.tokenize(setup.prompt, add_special=True, parse_special=True)
        params = TaskParams(
            n_predict=n_predict,
            sampling=SamplingParams(temperature=temp, seed=100 + i),
            grammar=grammar or setup.grammar,
            preserved_tokens=setup.preserved_tokens,
        )
        tasks.append((label, setup, eng.submit(Task(prompt, params))))
    out = []
    for label, setup, task in tasks:
        parser = setup.parser()
        deltas = []
        final = None
        for r in task.results:
            if isinstance(r, Partial):
                deltas += parser.feed(r.content)
            else:
                final = r
        assert isinstance(final, Final)
        deltas += parser.finish(cut=final.stop_type != "eos")
        sent, msg = replay(deltas), parser.message  # the stream spells the same message
        assert (sent.content or "") == (msg.content or "") and sent.tool_calls[: len(msg.tool_calls)] == msg.tool_calls, label
        if final.stop_type == "eos":  # only a cut call is streamed but left out of the message
            assert sent == msg, label
        out.append((label, setup, (final, parser)))
    return out


def check_call(label: str, name: str, arguments: str, allowed: set[str]) -> None:
    assert name in allowed, f"{label}: {name}"
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_required_and_named_calls_are_valid(demo) -> None:  # type: ignore[no-untyped-def]
    eng, tok, tmpl = demo
    folder = llama_cpp_path("models/templates")
    templates = {"generic": tmpl}
    templates |= {f: ChatTemplate.from_source((folder / n).read_text(), bos_token="<bos>") for f, n in OTHER_TEMPLATES.items()}
    msgs = [{"role": "user", "content": "What is the weather in Paris, and what is 2 + 3?"}]
    jobs = []
    for fmt, t in templates.items():
        for choice, parallel, temp in [
            ("required", False, 0.0),
            ("required", True, 1.0),
            ({"type": "function", "function": {"name": "add"}}, False, 1.0),
        ]:
            s = prepare_chat(t, msgs, tools=TOOLS, tool_choice=choice, parallel_tool_calls=parallel, tokenizer=tok)
            assert s.format == fmt
            jobs.append((f"{fmt}/{choice if isinstance(choice, str) else 'named'}/{parallel}/{temp}", s, temp))
    for label, setup, (final, parser) in run_all(eng, tok, jobs):
        msg = parser.message
        calls = msg.tool_calls
        assert calls and msg.content is None, f"{label}: {final.content!r}"
        if setup.parallel_tool_calls and final.stop_type == "limit":
            # a small model may go on calling; n_predict cuts the last call short: it is dropped
            assert parser.finish_reason(final.finish_reason) == "length"
        else:
            assert final.stop_type == "eos", f"{label}: {final.stop_type} {final.content!r}"
            assert parser.finish_reason(final.finish_reason) == "tool_calls", label
        if not setup.parallel_tool_calls:
            assert len(calls) == 1, label
        allowed = {setup.tool_choice.name} if setup.tool_choice.name else set(SCHEMAS)
        for call in calls:
            check_call(label, call.name, call.arguments, allowed)
        assert len({c.id for c in msg.tool_calls}) == len(msg.tool_calls)


def test_auto_answers_or_calls(demo) -> None:  # type: ignore[no-untyped-def]
    """tool_choice auto (the generic format, grammar-bound JSON): either a reply or a valid call;
    a conversation with an earlier call and its result renders and answers."""
    eng, tok, tmpl = demo
    jobs = []
    for i, msgs in enumerate([[{"role": "user", "content": "What is 2 + 3? Use the add tool."}], CONVERSATION]):
        for temp in (0.0, 1.0):
            jobs.append((f"auto/{i}/{temp}", prepare_chat(tmpl, msgs, tools=TOOLS, tokenizer=tok), temp))
    for label, setup, (final, parser) in run_all(eng, tok, jobs):
        assert setup.format == "generic"
        msg = parser.message
        assert final.stop_type == "eos", f"{label}: {final.content!r}"
        json.loads(final.content)  # the generic format is always one JSON object
        assert (msg.content is not None) != bool(msg.tool_calls), label
        for call in msg.tool_calls:
            check_call(label, call.name, call.arguments, set(SCHEMAS))


def test_calls_cut_by_max_tokens(demo) -> None:  # type: ignore[no-untyped-def]
    """max_tokens ends the output inside a call, whatever the model would write: a grammar
    forces two calls in the generic format, the second with a 400-digit argument (the Gemma
    tokenizer splits digits, so it cannot end within the budget) and n_predict leaves room
    for the first call only (a token is at least one character). The first call is returned,
    the cut one dropped, and no piece of the JSON is content, streamed or not; a budget of
    two tokens leaves no call and no content."""
    eng, tok, tmpl = demo
    first = '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, '
    second = '{"name": "get_weather", "arguments": {"city": "' + "1234567890" * 40 + '"}}]}'
    forced = GrammarSpec.gbnf("root ::= " + json.dumps(first + second))
    setup = prepare_chat(tmpl, [{"role": "user", "content": "Add 1 and 2."}], tools=TOOLS, tool_choice="required", tokenizer=tok)
    assert setup.format == "generic"
    prefix = first + '{"name": "get_weather", "arguments": {"city": "'
    for n_predict in (len(prefix) + 5, 2):
        ((label, _, (final, parser)),) = run_all(eng, tok, [(f"cut/{n_predict}", setup, 1.0)], n_predict, forced)
        assert final.stop_type == "limit" and final.content.startswith("{"), (label, final.content)
        msg = parser.message
        assert parser.finish_reason(final.finish_reason) == "length"
        assert not msg.content, (label, msg.content)
        if n_predict == 2:
            assert msg.tool_calls == [], label
        else:
            assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [("add", {"a": 1, "b": 2})], label
        # the non-streamed answer (the whole text parsed at once) is the same message
        whole = parse_message("generic", final.content, cut=True)
        assert whole.content == msg.content and [(c.name, c.arguments) for c in whole.tool_calls] == [
            (c.name, c.arguments) for c in msg.tool_calls
        ]
