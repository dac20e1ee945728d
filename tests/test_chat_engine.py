"""The chat session on the real engine and demo model, in-process: prompt-cache reuse across
turns, Ctrl-C during a reply, concurrent batch prompts."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from llamacli.core.runtime.engine import Engine
from llamacli.core.sampling import SamplingParams

from llamacli.chat.conversation import Conversation
from llamacli.chat.launch import start_session
from llamacli.chat.pipes import PipeOutput, answer_lines
from llamacli.chat.render import PlainView
from llamacli.chat.repl import ChatLoop
from llamacli.chat.session import ChatSession
from llamacli.chat.settings import ChatSettings
from llamacli.loading import OpenedModel, open_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rt(demo_model: str) -> OpenedModel:
    return open_model(demo_model)


@pytest.fixture
def greedy(rt: OpenedModel) -> Iterator[tuple[Engine, ChatSession]]:
    engine, session = start_session(rt, ChatSettings(SamplingParams(temperature=0.0), n_predict=4), n_ctx=512)
    yield engine, session
    engine.stop()


class StopAfter(PlainView):
    def __init__(self, n: int) -> None:
        super().__init__(io.StringIO())
        self.n, self.seen = n, 0

    def stream(self, text: str) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise KeyboardInterrupt
        super().stream(text)


def test_turns_reuse_the_prompt_cache(greedy: tuple[Engine, ChatSession]) -> None:
    _, ses = greedy
    ses.conversation.system = "Answer briefly."
    loop = ChatLoop(ses, lambda: (_ for _ in ()).throw(EOFError()), PlainView(io.StringIO()))
    loop.handle("Hello!")
    r1 = loop.last_reply
    loop.handle("And again?")
    r2 = loop.last_reply
    assert r1 is not None and r2 is not None and r1.final is not None and r2.final is not None
    assert len(r1.final.tokens) == 4 and r1.final.stop_type == "limit"
    # the second prompt starts with the first exchange: only the new part is processed
    assert r2.final.tokens_cached > len(r1.final.prompt_tokens)
    assert r2.stats.n_prompt_new < 20 and r2.stats.ctx_used == len(r2.final.prompt_tokens) + 4
    assert "Answer briefly." in ses.render() and ses.conversation.n_turns == 2


def test_ctrl_c_cancels_the_task_and_the_chat_goes_on(greedy: tuple[Engine, ChatSession]) -> None:
    _, ses = greedy
    ses.settings.n_predict = 200
    ses.settings.ignore_eos = True
    view = StopAfter(3)
    loop = ChatLoop(ses, lambda: "", view)
    loop.handle("Count from one to a hundred.")
    r = loop.last_reply
    assert r is not None and r.interrupted and r.final is not None and r.final.stop_type == "cancelled"
    assert 2 <= len(r.final.tokens) < 20  # stopped within a step or two of the Ctrl-C
    assert ses.conversation.messages[0]["content"] == "Count from one to a hundred."
    assert ses.conversation.messages[1] == {"role": "assistant", "content": r.content}
    assert "[interrupted · " in view.out.getvalue()  # type: ignore[attr-defined]
    # the slot is free again and its cache still holds the conversation
    ses.settings.n_predict = 2
    loop.view = PlainView(io.StringIO())
    loop.handle("Stop.")
    r2 = loop.last_reply
    assert r2 is not None and not r2.interrupted and len(r2.final.tokens) == 2  # type: ignore[union-attr]
    assert r2.final.tokens_cached > 10  # type: ignore[union-attr]


def test_batch_prompts_share_the_engine_slots(rt: OpenedModel) -> None:
    engine, ses = start_session(rt, ChatSettings(SamplingParams(temperature=0.0), n_predict=3), n_ctx=256, n_parallel=3)
    try:
        assert engine.config.n_parallel == 3 and engine.n_ctx_slot == 256
        tasks = [ses.submit(Conversation("", [{"role": "user", "content": q}])) for q in ("a", "b", "c")]
        replies = [ses.stream(t, lambda _s: None) for t in tasks]
        assert sorted(r.final.id_slot for r in replies) == [0, 1, 2]  # type: ignore[union-attr]
        out = io.StringIO()
        assert answer_lines(ses, ["x", "y"], PipeOutput(out, None), as_json=False) == 0
        assert len(out.getvalue().splitlines()) == 2
    finally:
        engine.stop()
