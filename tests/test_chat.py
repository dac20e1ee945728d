"""The chat REPL without a model: the loop with scripted input, slash commands, save/load,
Ctrl-C handling, settings and views (a fake engine streams scripted answers)."""

from __future__ import annotations

import io
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from tests.fakes import FakeEngine, fake_session
from llamacli.core.errors import InvalidRequest

from llamacli.chat.commands import COMMANDS, find
from llamacli.chat.conversation import Conversation, ConversationFileError
from llamacli.chat.render import PlainView, format_footer
from llamacli.chat.repl import EXIT_HINT, ChatLoop
from llamacli.chat.session import ChatSession, TurnStats
from llamacli.chat.settings import ChatSettings, param_names


def script(*items: object):  # type: ignore[no-untyped-def]
    """A read() returning the items in turn; exception classes/instances are raised; then EOF."""
    it = iter(items)

    def read() -> str:
        x = next(it, EOFError)
        if isinstance(x, BaseException) or (isinstance(x, type) and issubclass(x, BaseException)):
            raise x
        return str(x)

    return read


def run(session: ChatSession, *inputs: object, first: str | None = None, view: PlainView | None = None) -> tuple[int, str]:
    out = io.StringIO()
    view = view or PlainView(out)
    loop = ChatLoop(session, script(*inputs), view)
    code = loop.run(first)
    return code, view.out.getvalue()  # type: ignore[attr-defined]


class InterruptingView(PlainView):
    """Raises KeyboardInterrupt (as a Ctrl-C would) when the n-th chunk of a reply arrives."""

    def __init__(self, at_chunk: int) -> None:
        super().__init__(io.StringIO())
        self.at = at_chunk
        self.n = 0

    def begin_reply(self) -> None:
        super().begin_reply()
        self.n = 0

    def stream(self, text: str) -> None:
        self.n += 1
        if self.n == self.at:
            self.at = -1  # once
            raise KeyboardInterrupt
        super().stream(text)


# ---- the loop ------------------------------------------------------------------------------
def test_turns_stream_and_keep_history() -> None:
    eng = FakeEngine(lambda t: f"answer {len(eng.tasks)}", words=True)
    ses = fake_session(eng, system="Be brief.")
    code, out = run(ses, "hello", "", "   ", "and again")
    assert code == 0
    assert [m["role"] for m in ses.conversation.messages] == ["user", "assistant", "user", "assistant"]
    assert ses.conversation.messages[1]["content"] == "answer 1"
    assert ses.conversation.messages[3]["content"] == "answer 2"
    assert "answer 1\n[2 tokens" in out and "context" in out
    # the system prompt and the whole history go into the second prompt (chatml here)
    prompt2 = eng.tokenizer.detokenize(eng.tasks[1].prompt_tokens[1:])
    assert prompt2.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert "answer 1<|im_end|>" in prompt2 and prompt2.endswith("<|im_start|>assistant\n")


def test_first_message_and_single_turn() -> None:
    ses = fake_session()
    loop = ChatLoop(ses, script("never read"), PlainView(io.StringIO()))
    assert loop.run("from -p", single_turn=True) == 0
    assert ses.conversation.messages[0] == {"role": "user", "content": "from -p"}
    assert len(ses.conversation.messages) == 2


def test_double_slash_sends_a_literal_slash_line() -> None:
    ses = fake_session()
    run(ses, "//etc/passwd is a path")
    assert ses.conversation.messages[0]["content"] == "/etc/passwd is a path"


def test_ctrl_c_twice_at_empty_prompt_exits_once_warns() -> None:
    ses = fake_session()
    code, out = run(ses, KeyboardInterrupt, "hi", KeyboardInterrupt, KeyboardInterrupt, "not reached")
    assert code == 0
    assert out.count(EXIT_HINT) == 2  # the message between resets the count
    assert ses.conversation.n_turns == 1


def test_ctrl_d_and_exit_command() -> None:
    assert run(fake_session(), EOFError)[0] == 0
    ses = fake_session()
    assert run(ses, "/exit", "not reached")[0] == 0 and ses.conversation.n_turns == 0
    assert run(fake_session(), "/quit")[0] == 0


def test_ctrl_c_while_streaming_keeps_conversation() -> None:
    eng = FakeEngine("one two three four five six seven eight", delay=0.02, words=True)
    ses = fake_session(eng)
    view = InterruptingView(at_chunk=3)
    code, out = run(ses, "tell me", "next question", view=view)
    assert code == 0
    first = eng.tasks[0]
    assert first in eng.cancelled  # the engine was told to stop
    msgs = ses.conversation.messages
    # the user turn stays; the partial answer (what was generated before the stop) is kept
    assert msgs[0] == {"role": "user", "content": "tell me"}
    assert msgs[1]["role"] == "assistant" and msgs[1]["content"].startswith("one two")
    assert len(msgs[1]["content"].split()) < 8
    assert "[interrupted · " in out
    # the conversation goes on normally
    assert msgs[2]["content"] == "next question" and msgs[3]["content"] == "one two three four five six seven eight"


def interrupt_soon(seconds: float = 0.1) -> threading.Timer:
    """A real SIGINT (what Ctrl-C sends) to this process, while the main thread waits."""
    t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_ctrl_c_before_any_text_keeps_only_the_user_turn() -> None:
    eng = FakeEngine("alpha beta gamma", prompt_delay=5.0, words=True)
    ses = fake_session(eng)
    interrupt_soon()
    t0 = time.perf_counter()
    _, out = run(ses, "q")
    assert time.perf_counter() - t0 < 4.0  # the cancel ended the "prompt processing"
    assert eng.tasks[0] in eng.cancelled
    assert ses.conversation.messages == [{"role": "user", "content": "q"}]
    assert ses.conversation.awaiting_answer and "[interrupted · 0 tokens" in out


def test_prompt_too_long_is_one_error_and_the_turn_is_taken_back() -> None:
    ses = fake_session(n_ctx=60)
    code, out = run(ses, "short", "x" * 100, "/tokens")
    assert code == 0
    assert "error: the conversation has" in out and "more than the context size (60)" in out
    assert ses.conversation.n_turns == 1  # the long message was removed again


# ---- slash commands ------------------------------------------------------------------------
def test_set_and_show() -> None:
    ses = fake_session()
    _, out = run(ses, "/set temp 0.2", "/set top-k 5", "/set n 3", "/set seed 42", "/set stop END|\\n\\n", "/set", "/show")
    s = ses.settings
    assert s.sampling.temperature == 0.2 and s.sampling.top_k == 5 and s.n_predict == 3 and s.sampling.seed == 42
    assert s.stop == ["END", "\n\n"]
    assert "temperature = 0.2" in out and "n_predict=3" in out and "top_k=5" in out
    assert "Fake (fake)" in out and "/models/fake.gguf" in out and "chatml" in out
    # the settings reach the engine
    run(ses, "hi")
    assert ses.engine.tasks[-1].params.n_predict == 3  # type: ignore[attr-defined]
    assert ses.engine.tasks[-1].params.sampling.temperature == 0.2  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "line, message",
    [
        ("/set temp", "usage: /set PARAM VALUE"),
        ("/set nope 1", "unknown setting 'nope'"),
        ("/set top_p 2", "top_p must be between 0.0 and 1.0"),
        ("/set top_k many", "top_k takes an integer"),
        ("/set n -5", "n_predict must be -1"),
        ("/set mirostat 7", "mirostat must be 0, 1 or 2"),
        ("/frobnicate", "unknown command /frobnicate (try /help)"),
        ("/s", "did you mean /system, /set, /show, /save?"),
        ("/save", "usage: /save FILE"),
        ("/load /nonexistent/x.json", "No such file or directory: /nonexistent/x.json"),
        ("/retry", "nothing to retry"),
    ],
)
def test_command_errors_are_one_line(line: str, message: str) -> None:
    ses = fake_session()
    before = ChatSettings().to_dict()
    code, out = run(ses, line)
    assert code == 0
    errors = [x for x in out.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], out
    assert ses.settings.to_dict() == before  # a rejected /set changes nothing


def test_help_lists_every_command_and_prefixes_resolve() -> None:
    _, out = run(fake_session(), "/help")
    for c in COMMANDS:
        assert f"/{c.name}" in out
    assert "Alt+Enter" in out and "Ctrl-D" in out
    _, out = run(fake_session(), "/help set")
    assert "settable:" in out and "temp" in out
    assert find("he").name == "help" and find("q").name == "exit" and find("TOK").name == "tokens"


def test_system_clear_undo_retry_tokens() -> None:
    eng = FakeEngine(lambda t: f"reply {len(eng.tasks)}", words=True)
    ses = fake_session(eng)
    _, out = run(ses, "/system", "/system You are terse.", "a", "b", "/undo", "/tokens", "/retry", "/clear", "/tokens", "/system -")
    assert "no system prompt" in out and "system prompt set" in out
    assert "removed the last exchange (2 messages)" in out
    # /retry replaced the answer to "a" (reply 1) by a new one (reply 3)
    assert "reply 3" in out
    assert "conversation cleared (system prompt kept)" in out and "system prompt removed" in out
    tokens = [line for line in out.splitlines() if "tokens in the conversation" in line]
    after_undo = len(ses.tokenizer.tokenize(ses.template.render(
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "reply 1"}],
        add_generation_prompt=False)))
    assert tokens[0].startswith(f"{after_undo} tokens")
    assert tokens[1].startswith(f"{len(ses.tokenizer.tokenize(ses.template.render([{'role': 'system', 'content': 'You are terse.'}], add_generation_prompt=False)))} tokens")
    assert ses.conversation.messages == [] and ses.conversation.system == ""


def test_retry_after_interrupt_answers_the_pending_turn() -> None:
    eng = FakeEngine("x y z", prompt_delay=5.0, words=True)
    ses = fake_session(eng)
    interrupt_soon()
    run(ses, "q")
    assert ses.conversation.awaiting_answer
    eng.prompt_delay = 0.0
    run(ses, "/retry")
    assert ses.conversation.messages[-1] == {"role": "assistant", "content": "x y z"}


def test_save_load_round_trip(tmp_path: Path) -> None:
    ses = fake_session(FakeEngine("sure thing", words=True), system="Sys")
    path = tmp_path / "conv.json"
    code, out = run(ses, "first question", "/set temp 0.5", f"/save {path}")
    assert f"saved 2 messages to {path}" in out
    data = json.loads(path.read_text())
    assert data["format"] == "llamacli-chat" and data["system"] == "Sys" and data["model"] == "/models/fake.gguf"
    assert data["messages"] == [{"role": "user", "content": "first question"}, {"role": "assistant", "content": "sure thing"}]
    assert data["settings"]["sampling"]["temperature"] == 0.5

    other = fake_session()
    _, out = run(other, f"/load '{path}'", "/show")
    assert other.conversation == ses.conversation
    assert "loaded 2 messages (1 turn" in out and "system prompt set" in out
    assert other.settings.sampling.temperature == 0.8  # /load restores the conversation only


def test_load_accepts_openai_message_lists_and_rejects_garbage(tmp_path: Path) -> None:
    p = tmp_path / "m.json"
    p.write_text(json.dumps([{"role": "system", "content": "S"}, {"role": "user", "content": "u"}]))
    ses = fake_session()
    _, out = run(ses, f"/load {p}")
    assert ses.conversation.system == "S" and ses.conversation.awaiting_answer
    assert "/retry generates one" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _, out = run(ses, f"/load {bad}")
    assert "error: " in out and "not JSON" in out
    bad.write_text(json.dumps({"messages": [{"role": "function", "content": "x"}]}))
    _, out = run(ses, f"/load {bad}")
    assert "role must be 'user', 'assistant' or 'tool'" in out
    bad.write_text(json.dumps({"messages": [{"role": "tool", "content": "x"}]}))
    _, out = run(ses, f"/load {bad}")
    assert "a tool message needs its 'tool_call_id'" in out
    bad.write_text(json.dumps({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}]}))
    _, out = run(ses, f"/load {bad}")
    assert "tool_calls must be OpenAI's" in out
    assert ses.conversation.system == "S"  # a failed /load keeps the conversation


# ---- pieces --------------------------------------------------------------------------------
def test_conversation_undo_and_drop_answer() -> None:
    c = Conversation()
    assert c.undo() == 0 and not c.drop_answer()
    c.add_user("a"); c.add_assistant("b"); c.add_user("c")
    assert c.undo() == 1 and c.messages[-1]["content"] == "b"
    assert c.drop_answer() and c.messages == [{"role": "user", "content": "a"}]
    with pytest.raises(ConversationFileError):
        Conversation.from_dict({"messages": "nope"})
    with pytest.raises(ConversationFileError):
        Conversation.from_dict({"messages": [{"role": "user", "content": 3}]})


def test_conversation_keeps_tool_turns(tmp_path: Path) -> None:
    """The tool loop's turns: saved and loaded as OpenAI messages, given to the template, and
    dropped by /retry and /undo with the answer they belong to."""
    c = Conversation(system="S")
    call = {"id": "call_1", "type": "function", "function": {"name": "get_info", "arguments": "{}"}}
    c.add_user("where?")
    c.add_assistant("", [call])
    c.add_tool_result("call_1", "get_info", '{"cwd": "/x"}')
    c.add_assistant("In /x.")
    assert c.has_tool_turns and c.messages[1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert c.for_template()[3] == {"role": "tool", "content": '{"cwd": "/x"}', "tool_call_id": "call_1", "name": "get_info"}
    c.save(tmp_path / "c.json")
    back, _ = Conversation.load(tmp_path / "c.json")
    assert back == c
    openai = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [call]},
              {"role": "tool", "tool_call_id": "call_1", "content": "r"}]
    assert Conversation.from_dict(openai).messages[1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert c.drop_answer() and c.messages == [{"role": "user", "content": "where?"}]
    c.add_assistant("", [call])
    c.add_tool_result("call_1", "get_info", "r")
    assert c.undo() == 3 and not c.messages


def test_settings_parsing() -> None:
    s = ChatSettings()
    assert s.set("TEMP", " 0 ") == ("temperature", 0.0)
    assert s.set("mirostat-lr", "0.2") == ("mirostat_eta", 0.2)
    assert s.set("ignore_eos", "on") == ("ignore_eos", True)
    assert s.set("samplers", "top_k;temperature")[0] == "samplers"
    assert s.summary()["samplers"] == "top_k;temperature"
    assert s.set("stop", "none") == ("stop", [])
    with pytest.raises(InvalidRequest):
        s.set("ignore_eos", "maybe")
    with pytest.raises(InvalidRequest):
        s.set("logit_bias", "1")
    assert "temp" in param_names() and "logit_bias" not in param_names()
    p = s.task_params()
    assert p.ignore_eos and p.sampling.temperature == 0.0 and p.sampling is not s.sampling


def test_footer() -> None:
    st = TurnStats(n_generated=42, tokens_per_second=6.84, n_prompt=330, n_prompt_new=30, ctx_used=372, n_ctx=4096)
    assert format_footer(st) == "42 tokens · 6.8 tok/s · prompt 30 (+300 cached) · context 372/4096 (9%)"
    assert format_footer(TurnStats(n_ctx=10), interrupted=True, context_full=True) == (
        "interrupted · 0 tokens · prompt 0 · context 0/10 (0%) · context full"
    )


def test_second_turn_reports_cached_prompt() -> None:
    ses = fake_session(FakeEngine("ok", words=True))
    _, out = run(ses, "one", "two")
    footers = [line for line in out.splitlines() if line.startswith("[")]
    assert "cached" not in footers[0] and "cached)" in footers[1]
