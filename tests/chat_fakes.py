"""A fake engine and tokenizer for the chat REPL tests (no model): scripted answers streamed
from a thread, honouring cancellation as the real engine does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from llamacli.core.chat_templates import ChatTemplate
from llamacli.core.runtime.tasks import Final, Partial, Task, Timings

from llamacli.chat.session import ChatSession, ModelInfo
from llamacli.chat.settings import ChatSettings


class FakeTokenizer:
    """One token per character (plus BOS): easy to count."""

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        s = text.decode() if isinstance(text, bytes) else text
        return ([1] if add_special else []) + [ord(c) for c in s]


class FakeEngine:
    """Answers every task with `answer(task)` split into words, one word per `delay` seconds."""

    def __init__(self, answer: Callable[[Task], str] | str = "Hello there, friend.", delay: float = 0.0, prompt_delay: float = 0.0) -> None:
        self.answer = answer if callable(answer) else (lambda _t, a=answer: a)
        self.delay = delay
        self.prompt_delay = prompt_delay  # "prompt processing" time before the first token
        self.tasks: list[Task] = []
        self.cancelled: list[Task] = []
        self.cached: list[int] = []

    def submit(self, task: Task) -> Task:
        self.tasks.append(task)
        threading.Thread(target=self._run, args=(task,), daemon=True).start()
        return task

    def _run(self, task: Task) -> None:
        text = self.answer(task)
        if self.prompt_delay:
            task.cancelled.wait(self.prompt_delay)
        words = [w + " " for w in text.split(" ")]
        words[-1] = words[-1][:-1]
        n_cache = 0
        while n_cache < min(len(self.cached), len(task.prompt_tokens) - 1) and self.cached[n_cache] == task.prompt_tokens[n_cache]:
            n_cache += 1
        out, toks = "", []
        stop = "eos"
        for i, w in enumerate(words):
            if task.cancelled.is_set():
                stop = "cancelled"
                break
            if 0 <= task.params.n_predict <= i:
                stop = "limit"
                break
            out += w
            toks.append(100 + i)
            task.results.put(Partial(w, [100 + i]))
            if self.delay:
                time.sleep(self.delay)
        if stop == "cancelled":
            self.cancelled.append(task)
        self.cached = list(task.prompt_tokens) + toks
        t = Timings(prompt_n=len(task.prompt_tokens) - n_cache, prompt_ms=10.0, predicted_n=len(toks), predicted_ms=20.0 * len(toks), cache_n=n_cache)
        task.results.put(Final(out, toks, list(task.prompt_tokens), stop, timings=t, tokens_cached=n_cache))
        task.results.close()


def fake_session(engine: FakeEngine | None = None, n_ctx: int = 4096, system: str = "") -> ChatSession:
    from llamacli.chat.conversation import Conversation

    return ChatSession(
        engine or FakeEngine(),
        FakeTokenizer(),
        ChatTemplate.from_source("chatml"),
        n_ctx,
        ChatSettings(),
        Conversation(system=system),
        ModelInfo(path="/models/fake.gguf", name="Fake", architecture="fake", n_ctx_train=8192),
    )
