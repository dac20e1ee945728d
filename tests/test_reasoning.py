"""Reasoning models without a model: thoughts split out of the text (whole and streamed, never a
partial tag in the content) for the prompts of real reasoning templates (DeepSeek-R1, Qwen 3,
QwQ, Command R7B from llama.cpp's models/templates), the reasoning budget's state machine
(llama.cpp's common/reasoning-budget.cpp) and the Anthropic thinking blocks."""

from __future__ import annotations

import numpy as np
import pytest
from llamacli.core.text.chat_templates import ChatTemplate
from llamacli.core.errors import InvalidRequest
from llamacli.core.text.reasoning import (
    BudgetState,
    ReasoningBudget,
    ReasoningBudgetSpec,
    ReasoningSplitter,
    ThinkingTags,
)
from llamacli.core.text.tool_calls import prepare_chat
from llamacli.http import anthropic

from tests.sdist_cache import llama_cpp_path

HI = [{"role": "user", "content": "hi"}]
R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
QWEN3 = "Qwen-Qwen3-0.6B.jinja"
QWQ = "Qwen-QwQ-32B.jinja"
QWEN35 = "Qwen3.5-4B.jinja"
R7B = "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"


def template(name: str) -> ChatTemplate:
    src = (llama_cpp_path("models/templates") / name).read_text()
    return ChatTemplate.from_source(src, bos_token="<s>", eos_token="</s>")


def stream(parser: object, text: str, step: int = 1) -> tuple[str, str, object]:
    """Feed `text` in pieces of `step` characters; the joined reasoning and content deltas."""
    deltas = []
    for i in range(0, len(text), step):
        deltas += parser.feed(text[i : i + step])  # type: ignore[attr-defined]
    deltas += parser.finish()  # type: ignore[attr-defined]
    thoughts = "".join(d.reasoning for d in deltas if d.reasoning is not None)
    content = "".join(d.content or "" for d in deltas if d.reasoning is None and d.index is None)
    return thoughts, content, deltas


# ---- which templates think, and whether the prompt opens the block -------------------------------


@pytest.mark.parametrize(
    "name, kwargs, tags, opens",
    [
        (R1, {}, ("<think>", "</think>"), True),  # the generation prompt ends with "<think>\n"
        (R1, {"enable_thinking": False}, ("<think>", "</think>"), False),  # closed: "<think>\n</think>"
        (QWQ, {}, ("<think>", "</think>"), True),
        (QWEN3, {}, ("<think>", "</think>"), False),  # the model writes <think> itself
        (QWEN3, {"enable_thinking": False}, ("<think>", "</think>"), False),
        (R7B, {}, ("<|START_THINKING|>", "<|END_THINKING|>"), False),
        ("ByteDance-Seed-OSS.jinja", {}, ("<seed:think>", "</seed:think>"), False),
        ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", {}, ("[THINK]", "[/THINK]"), False),
        ("Apertus-8B-Instruct.jinja", {}, ("<|inner_prefix|>", "<|inner_suffix|>"), False),
        ("google-gemma-4-31B-it.jinja", {}, ("<|channel>thought", "<channel|>"), False),
        ("google-gemma-4-31B-it.jinja", {"enable_thinking": False}, ("<|channel>thought", "<channel|>"), False),
        (QWEN35, {}, ("<think>", "</think>"), True),  # the generation prompt ends with "<think>\n"
        (QWEN35, {"enable_thinking": False}, ("<think>", "</think>"), False),
    ],
)
def test_setup_of_real_reasoning_templates(name: str, kwargs: dict, tags: tuple[str, str], opens: bool) -> None:
    s = prepare_chat(template(name), HI, reasoning_format="auto", **kwargs)
    assert (s.thinking.start, s.thinking.end) == tags and s.thinking_open is opens and s.template_thinks
    assert set(tags) <= set(s.preserved_tokens)  # special-token tags reach the parser as text
    budget = s.budget(16, "Enough.", control=True)
    assert budget is not None and budget.forced_open is opens and (budget.start, budget.end) == tags
    assert s.budget() is None  # no budget and no control: the engine has nothing to watch


def test_reasoning_format_is_checked() -> None:
    with pytest.raises(InvalidRequest, match="reasoning_format"):
        prepare_chat(template(QWEN3), HI, reasoning_format="bogus")


# ---- splitting -------------------------------------------------------------------------------------


R1_OUT = "Okay, the user says hi.\nI should greet back.\n</think>\n\nHello! How can I help?"
QWEN3_OUT = "<think>\nThe user greets me.\n</think>\n\nHi there!"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_forced_open_block_streams_like_whole(step: int) -> None:
    s = prepare_chat(template(R1), HI, reasoning_format="auto")
    thoughts, content, deltas = stream(s.parser(), R1_OUT, step)
    assert thoughts == "Okay, the user says hi.\nI should greet back."
    assert content == "Hello! How can I help?"
    msg = s.parser()
    msg.feed(R1_OUT)
    msg.finish()
    assert msg.message.to_openai() == {"role": "assistant", "content": content, "reasoning_content": thoughts}
    # no delta ever carries a piece of a tag
    assert not any("<" in (d.content or "") or "</" in (d.reasoning or "") for d in deltas)


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_model_written_block(step: int) -> None:
    s = prepare_chat(template(QWEN3), HI, reasoning_format="deepseek")
    thoughts, content, _ = stream(s.parser(), QWEN3_OUT, step)
    assert (thoughts, content) == ("The user greets me.", "Hi there!")


def test_command_r7b_tags() -> None:
    s = prepare_chat(template(R7B), HI, reasoning_format="auto")
    out = "<|START_THINKING|>Greeting.<|END_THINKING|>Hello."
    assert stream(s.parser(), out, 5)[:2] == ("Greeting.", "Hello.")


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_gemma_4_thought_channel(step: int) -> None:
    """Gemma 4 thinks in `<|channel>thought\n...<channel|>` (llama.cpp's peg-gemma4 parser: the
    whitespace after `thought` skipped); `<|channel>` is a special token, kept as text for the parser."""
    s = prepare_chat(template("google-gemma-4-31B-it.jinja"), HI, reasoning_format="auto")
    assert "<|channel>" in s.preserved_tokens
    out = "<|channel>thought\nThe user says hi.<channel|>Hello!"
    assert stream(s.parser(), out, step)[:2] == ("The user says hi.", "Hello!")


def test_formats_none_and_legacy() -> None:
    t = template(QWEN3)
    none = prepare_chat(t, HI, reasoning_format="none")
    assert stream(none.parser(), QWEN3_OUT)[:2] == ("", QWEN3_OUT)
    legacy = prepare_chat(t, HI, reasoning_format="deepseek-legacy")
    p = legacy.parser()
    p.feed(QWEN3_OUT)
    p.finish()
    assert p.message.reasoning_content == "The user greets me." and p.message.content == QWEN3_OUT


def test_partial_tags_are_held_and_released() -> None:
    sp = ReasoningSplitter(ThinkingTags())
    assert sp.split("  <th", final=False).content == ""  # may still become <think>
    assert sp.split("<thin", final=True).content == "<thin"  # it did not
    assert sp.split("<b>bold</b>", final=False).content == "<b>bold</b>"
    assert sp.split("Hi <think>x</think>", final=True).content == "Hi <think>x</think>"  # only at the start
    mid = sp.split("<think>abc</thi", final=False)
    assert (mid.reasoning, mid.content, mid.thinking) == ("abc", "", True)
    cut = sp.split("<think>unfinished thought", final=True)  # max_tokens inside the block
    assert (cut.reasoning, cut.content) == ("unfinished thought", "")


def test_tool_calls_after_thoughts() -> None:
    """Qwen 3 thinks, then calls a tool in its Hermes format: both come out."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    s = prepare_chat(template(QWEN3), HI, tools=tools, tool_choice="auto", reasoning_format="auto")
    assert s.format == "hermes"
    out = '<think>\nCall f.\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    p = s.parser()
    for ch in out:
        p.feed(ch)
    p.finish()
    assert p.message.reasoning_content == "Call f." and [c.name for c in p.message.tool_calls] == ["f"]
    assert p.finish_reason("stop") == "tool_calls"


@pytest.mark.parametrize("end", ["\n</think>\n\n", "\n"])
def test_qwen3_5_calls_a_tool_after_thoughts_closed_or_not(end: str) -> None:
    """Qwen3.5 (its template opens the block, the calls in the qwen3_coder format): as llama.cpp's
    parser, a `<tool_call>` also ends the thoughts when `</think>` never came."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer"}}}}}]
    s = prepare_chat(template(QWEN35), HI, tools=tools, tool_choice="auto", reasoning_format="auto")
    assert s.format == "qwen3_coder" and s.thinking_open and s.thinking.end_before == ("<tool_call>",)
    out = "Call f." + end + "<tool_call>\n<function=f>\n<parameter=x>\n3\n</parameter>\n</function>\n</tool_call>"
    for step in (1, 5):
        thoughts, content, _ = stream(s.parser(), out, step)
        assert thoughts == "Call f." and content == ""
    p = s.parser()
    p.feed(out)
    p.finish()
    assert p.message.reasoning_content == "Call f." and [(c.name, c.arguments) for c in p.message.tool_calls] == [("f", '{"x": 3}')]


# ---- the budget state machine ------------------------------------------------------------------------

PIECES = {1: b"<think>", 2: b"</think>", 3: b"a", 4: b" b", 5: b"\xc3", 6: b"\xa9", 7: b"<", 8: b"/think>", 9: b"Done."}


def budget(n: int, forced_open: bool = False, control: bool = False) -> ReasoningBudget:
    spec = ReasoningBudgetSpec(budget=n, message="Done.", forced_open=forced_open, control=control)
    return ReasoningBudget(spec, [9, 2], lambda t: PIECES[t])


def forced(b: ReasoningBudget) -> int:
    """The only token the budget leaves possible."""
    lg = np.zeros(10, np.float32)
    b.apply(lg)
    (ok,) = np.flatnonzero(np.isfinite(lg))
    return int(ok)


def test_budget_forces_message_and_end_tag_after_n_tokens() -> None:
    b = budget(2)
    b.accept(3)
    assert b.state is BudgetState.IDLE  # thinking has not started
    b.accept(1)
    assert b.state is BudgetState.COUNTING
    b.accept(3)
    assert b.state is BudgetState.COUNTING
    b.accept(4)
    assert b.state is BudgetState.FORCING
    for want in (9, 2):
        tok = forced(b)
        assert tok == want
        b.accept(tok)
    assert b.state is BudgetState.DONE
    lg = np.arange(10, dtype=np.float32)
    b.apply(lg)
    assert np.array_equal(lg, np.arange(10))  # passthrough once done
    b.accept(1)  # a new block gets a new budget
    assert b.state is BudgetState.COUNTING and b.remaining == 2


def test_natural_end_tag_split_across_tokens() -> None:
    b = budget(5)
    for t in (1, 3, 7, 8):  # "<think>a</think>" with the end tag in two pieces
        b.accept(t)
    assert b.state is BudgetState.DONE


def test_budget_zero_and_forced_open() -> None:
    b = budget(0)
    b.accept(1)
    assert b.state is BudgetState.FORCING and forced(b) == 9
    assert budget(3, forced_open=True).state is BudgetState.COUNTING
    assert budget(0, forced_open=True).state is BudgetState.FORCING


def test_budget_waits_for_a_whole_utf8_character() -> None:
    b = budget(1, forced_open=True)
    b.accept(5)  # the first byte of "é": forcing now would split the character
    assert b.state is BudgetState.WAITING_UTF8
    b.accept(6)
    assert b.state is BudgetState.FORCING


def test_force_ends_counting_only() -> None:
    b = budget(-1, control=True)
    assert not b.force()  # idle: nothing to end
    b.accept(1)
    assert b.force() and b.state is BudgetState.FORCING
    assert not b.force()


# ---- Anthropic thinking blocks ----------------------------------------------------------------------------


def test_anthropic_thinking_blocks() -> None:
    s = prepare_chat(template(QWEN3), HI, reasoning_format="auto")
    p = s.parser()
    blocks = anthropic.BlockStream(text_open=False)
    events = []
    for ch in QWEN3_OUT:
        events += blocks.events(p.feed(ch))
    events += blocks.events(p.finish()) + blocks.close()
    starts = [e["content_block"]["type"] for n, e in events if n == "content_block_start"]
    assert starts == ["thinking", "text"]
    kinds = [e["delta"]["type"] for n, e in events if n == "content_block_delta"]
    first_text = kinds.index("text_delta")
    assert set(kinds[: first_text - 1]) == {"thinking_delta"} and kinds[first_text - 1] == "signature_delta"
    thought = "".join(e["delta"]["thinking"] for n, e in events if n == "content_block_delta" and e["delta"]["type"] == "thinking_delta")
    assert thought == "The user greets me."
    assert anthropic.content_blocks(p.message) == [
        {"type": "thinking", "thinking": "The user greets me.", "signature": ""},
        {"type": "text", "text": "Hi there!"},
    ]
    # thinking blocks sent back reach the template as reasoning_content; budget_tokens is the budget
    req = {"max_tokens": 9, "thinking": {"type": "enabled", "budget_tokens": 7},
           "messages": [{"role": "user", "content": "hi"},
                        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""},
                                                          {"type": "text", "text": "a"}]},
                        {"role": "user", "content": "again"}]}
    assert anthropic.chat_messages(req)[1] == {"role": "assistant", "content": "a", "reasoning_content": "t"}
    assert anthropic.native_fields(req)["thinking_budget_tokens"] == 7


# ---- llama chat: thoughts folded, /thoughts shows them ------------------------------------------------------


def test_chat_folds_and_shows_thoughts() -> None:
    import io

    from llamacli.chat.render import PlainView, RichView
    from llamacli.chat.repl import ChatLoop
    from rich.console import Console

    from tests.fakes import FakeEngine, fake_session
    from tests.test_chat import script

    ses = fake_session(FakeEngine("<think> Plan the reply. </think> Hello there.", words=True))
    out = io.StringIO()
    loop = ChatLoop(ses, script("hi", "/thoughts", "again"), PlainView(out, show_stats=False))
    assert loop.run() == 0
    text = out.getvalue()
    first, rest = text.split("thoughts shown:\n", 1)
    assert first == "[▸ thought for 3 words (/thoughts to show)]\nHello there.\n"
    assert rest == "Plan the reply.\n<think>\nPlan the reply.\n</think>\nHello there.\n"
    # only the answers stay in the conversation
    assert [m["content"] for m in ses.conversation.messages if m["role"] == "assistant"] == ["Hello there."] * 2
    assert loop.last_reply is not None and loop.last_reply.reasoning == "Plan the reply."
    # the rich view: dimmed thoughts, folded into one line unless shown
    console = Console(file=io.StringIO(), width=80, force_terminal=False)
    view = RichView(console, show_stats=False)
    ChatLoop(fake_session(FakeEngine("<think> Plan. </think> Hi.", words=True)), script("hi"), view).run()
    lines = [ln.rstrip() for ln in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]
    assert lines == ["▸ thought for 1 word (/thoughts to show)", "Hi."]


def test_chat_session_budget_follows_the_template() -> None:
    """llama chat's --reasoning-budget becomes the task's budget, with the template's tags and
    counting from the first token when DeepSeek-R1's prompt opened the block."""
    from tests.fakes import FakeEngine, fake_session

    eng = FakeEngine("<think>x</think> y", words=True)
    ses = fake_session(eng)
    ses.template = template(R1)
    ses.settings.reasoning_budget, ses.settings.reasoning_budget_message = 5, "Done."
    ses.conversation.add_user("hi")
    assert ses.reply(lambda _t: None).content == "y"
    spec = eng.tasks[-1].params.reasoning
    assert spec == ReasoningBudgetSpec("<think>", "</think>", 5, "Done.", forced_open=True)
    ses.settings.reasoning_budget = -1
    ses.conversation.add_user("again")
    ses.reply(lambda _t: None)
    assert eng.tasks[-1].params.reasoning is None


def test_serve_template_kwargs_from_the_reasoning_flags() -> None:
    import typer
    from llamacli.options.reasoning import template_kwargs

    assert template_kwargs(None, "auto", "default", None) == {}
    assert template_kwargs(None, "off", "high", True) == {"enable_thinking": False, "reasoning_effort": "high",
                                                           "preserve_reasoning": True}
    assert template_kwargs(None, "auto", "none", None) == {"enable_thinking": False}
    # --chat-template-kwargs wins over the flags
    assert template_kwargs('{"enable_thinking": true, "reasoning_effort": "low"}', "off", "max", False) == {
        "enable_thinking": True, "reasoning_effort": "low", "preserve_reasoning": False}
    with pytest.raises(typer.BadParameter):
        template_kwargs("[1]", "auto", "default", None)


def test_chat_pipes_keep_thoughts_apart() -> None:
    """Batched lines: each task keeps its own splitter (the prompts are submitted before any is
    read); --jsonl objects carry reasoning_content, the text answers only the answer."""
    import io

    from llamacli.chat.pipes import PipeOutput, answer_lines
    from rich.console import Console

    from tests.fakes import OFFSET, FakeEngine, fake_session

    thinks = ord("T") + OFFSET  # the fake tokenizer's token for "T": prompts with a T get thoughts
    ses = fake_session(FakeEngine(lambda t: "<think> Why. </think> Yes." if thinks in t.prompt_tokens else "Plain.", words=True))
    out = io.StringIO()
    assert answer_lines(ses, ["T a", "b", "T c"], PipeOutput(out, Console(file=io.StringIO()), False), True) == 0
    import json

    objs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(o["content"], o.get("reasoning_content")) for o in objs] == [("Yes.", "Why."), ("Plain.", None),
                                                                          ("Yes.", "Why.")]
    assert not ses.splitters  # every task's splitter was used and dropped
