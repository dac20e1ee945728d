"""The tests' fake model: a tokenizer, an engine and their ModelInfo, no weights.

One fake for the HTTP app (tests/test_http_*.py) and the chat REPL (tests/test_chat*.py): the
engine has the surface the HTTP layer types as `ServingEngine` (http/state.py: submit, call,
slots, metrics, config, n_ctx_slot, LoRA and slot-file methods) and the `submit` the chat
session uses. Answers stream from a thread and honour cancellation as the real engine does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamacli.chat.conversation import Conversation
from llamacli.chat.session import ChatSession
from llamacli.chat.settings import ChatSettings
from llamacli.core.text.chat_templates import ChatTemplate
from llamacli.core.errors import ContextOverflow, InvalidRequest
from llamacli.core.model.state.lora import LoraAdapter
from llamacli.core.model.loaded import ModelInfo, SpecialTokens
from llamacli.core.runtime.engine import EngineConfig, Metrics
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.slot_store import SaveResult, SlotFileError, slot_path
from llamacli.core.runtime.tasks import Final, Partial, Task, Timings

BOS, EOS = 1, 2
OFFSET = 10  # token id = code point + OFFSET
WORD0 = 100  # in word mode the n-th word of an answer is token WORD0 + n


@dataclass
class FakeVocab:
    bos: int | None = BOS
    eos: int | None = EOS
    add_bos: bool = True
    add_eos: bool = False
    fim_pre: int | None = None
    fim_suf: int | None = None
    fim_mid: int | None = None
    fim_rep: int | None = None
    fim_sep: int | None = None
    eog_ids: frozenset[int] = field(default_factory=lambda: frozenset({EOS}))


class FakeTokenizer:
    """One token per character (id = code point + 10); "<s>" and "</s>" are BOS and EOS."""

    max_token_chars = 4  # "</s>"

    def __init__(self, n_vocab: int = 70000, fim: bool = False) -> None:
        self.n_vocab = n_vocab
        self.vocab = FakeVocab()
        if fim:
            self.vocab.fim_pre, self.vocab.fim_suf, self.vocab.fim_mid = 3, 4, 5

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        s = text.decode() if isinstance(text, bytes) else text
        out = [BOS] if add_special and self.vocab.add_bos else []
        i = 0
        while i < len(s):
            if parse_special and s.startswith("<s>", i):
                out.append(BOS)
                i += 3
            elif parse_special and s.startswith("</s>", i):
                out.append(EOS)
                i += 4
            else:
                out.append(ord(s[i]) + OFFSET)
                i += 1
        return out

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        if token == BOS:
            return b"<s>" if special else b""
        if token == EOS:
            return b"</s>" if special else b""
        if token < OFFSET:
            return b"<fim>" if special else b""
        return chr(token - OFFSET).encode("utf-8")

    def detokenize(self, ids: Any, remove_special: bool = False, unparse_special: bool = False) -> str:
        return b"".join(self.token_to_piece(t, unparse_special) for t in ids).decode("utf-8", "replace")


class FakeEngine:
    """Answers every completion with `reply` (or `reply(task)`): one token per character, or
    per word with `words=True`, `delay` s apart after `prompt_delay` s of "prompt processing";
    honours n_predict, stop strings, n_probs and cancellation, and reports the prompt prefix it
    saw last as cached. Embeddings are [len(prompt), 1, 2, ...]."""

    def __init__(
        self,
        reply: str | Callable[[Task], str] = "Hello world",
        delay: float = 0.0,
        prompt_delay: float = 0.0,
        *,
        words: bool = False,
        tokenizer: FakeTokenizer | None = None,
        n_ctx: int = 256,
        n_parallel: int = 2,
    ) -> None:
        self.reply = reply
        self.delay = delay
        self.prompt_delay = prompt_delay
        self.words = words
        self.tokenizer = tokenizer or FakeTokenizer()
        self.configure(n_ctx, n_parallel)
        self.metrics = Metrics()
        self.loras: list[LoraAdapter] = []
        self.lora_scales: tuple[float, ...] = ()
        self.submitted: list[Task] = []
        self.cancelled: list[Task] = []
        self.cached: list[int] = []  # the last task's prompt and answer
        self.saved: dict[str, list[int]] = {}

    def configure(self, n_ctx: int, n_parallel: int) -> None:
        """`n_parallel` slots sharing `n_ctx` tokens, as EngineConfig splits them."""
        self.config = EngineConfig(n_ctx=n_ctx, n_parallel=n_parallel, n_batch=64)
        self.n_ctx_slot = self.config.n_ctx_slot
        self.slots = [Slot(i, self.n_ctx_slot) for i in range(n_parallel)]

    @property
    def tasks(self) -> list[Task]:
        return self.submitted

    @property
    def n_queued(self) -> int:
        return 0

    def prepare(self, task: Task) -> None:
        return None  # no grammar engine: nothing to compile

    def submit(self, task: Task) -> Task:
        if not task.prompt_tokens:
            raise InvalidRequest("the prompt is empty")
        if task.params.id_slot >= self.config.n_parallel:
            raise InvalidRequest(f"id_slot {task.params.id_slot} does not exist")
        if len(task.prompt_tokens) >= self.n_ctx_slot:
            raise ContextOverflow(len(task.prompt_tokens), self.n_ctx_slot)
        task.params.sampling.validate()
        self.submitted.append(task)
        threading.Thread(target=self._run, args=(task,), daemon=True).start()
        return task

    def _pieces(self, task: Task) -> list[tuple[str, int]]:
        """The answer to `task` as (text, token) pieces."""
        text = self.reply(task) if callable(self.reply) else self.reply
        if not self.words:
            return [(ch, ord(ch) + OFFSET) for ch in text]
        words = [w + " " for w in text.split(" ")]
        words[-1] = words[-1][:-1]
        return [(w, WORD0 + i) for i, w in enumerate(words)]

    def _run(self, task: Task) -> None:
        slot = next((s for s in self.slots if s.task is None), self.slots[0])
        slot.task = task
        self.metrics.requests_processing += 1
        try:
            if task.kind == "embedding":
                emb = [float(len(task.prompt_tokens))] + [float(i) for i in range(1, 8)]
                task.results.put(Final("", [], list(task.prompt_tokens), "eos", id_slot=slot.id, embedding=emb))
                return
            if self.prompt_delay:
                task.cancelled.wait(self.prompt_delay)
            p = task.params
            n_cache = 0
            while n_cache < min(len(self.cached), len(task.prompt_tokens) - 1) and self.cached[n_cache] == task.prompt_tokens[n_cache]:
                n_cache += 1
            text, toks, stop_type, word = "", [], "eos", ""
            for piece, tok in self._pieces(task):
                if self.delay:
                    time.sleep(self.delay)
                if task.cancelled.is_set():
                    stop_type = "cancelled"
                    break
                if 0 <= p.n_predict <= len(toks):
                    stop_type = "limit"
                    break
                toks.append(tok)
                slot.generated = list(toks)
                hit = next((s for s in p.stop if (text + piece).endswith(s)), None)
                if hit:
                    text = (text + piece)[: -len(hit)]
                    stop_type, word = "word", hit
                    break
                text += piece
                probs = [[(tok, 0.5), (OFFSET + ord("x"), 0.25)][: p.n_probs]] if p.n_probs else []
                task.results.put(Partial(piece, [tok], probs, [0.5] if p.n_probs else []))
            if stop_type == "cancelled":
                self.cancelled.append(task)
            self.cached = list(task.prompt_tokens) + toks
            t = Timings(prompt_n=len(task.prompt_tokens) - n_cache, prompt_ms=10.0, predicted_n=len(toks),
                        predicted_ms=20.0 * len(toks), cache_n=n_cache)
            task.results.put(Final(text, toks, list(task.prompt_tokens), stop_type, word, timings=t, id_slot=slot.id,
                                   tokens_cached=n_cache))
        finally:
            task.results.close()
            slot.task = None
            slot.generated = []
            self.metrics.requests_processing -= 1

    def call(self, fn: Callable[[], Any]) -> Any:
        return fn()

    def set_lora_scales(self, scales: tuple[float, ...]) -> None:
        if len(scales) != len(self.loras):
            raise InvalidRequest(f"{len(scales)} LoRA scales given for {len(self.loras)} adapters")
        self.lora_scales = tuple(scales)

    def save_slot(self, slot_id: int, directory: str, filename: str) -> SaveResult:
        slot_path(directory, filename)
        self.saved[filename] = [1, 2, 3]
        return SaveResult(3, 100, 0.5)

    def restore_slot(self, slot_id: int, directory: str, filename: str) -> SaveResult:
        slot_path(directory, filename)
        if filename not in self.saved:
            raise SlotFileError(f"slot file {filename!r} not found")
        return SaveResult(3, 100, 0.5)

    def erase_slot(self, slot_id: int) -> int:
        return 7

    def stop(self, cancel: bool = True) -> None:
        pass


def fake_model(tokenizer: FakeTokenizer, template: str = "chatml") -> ModelInfo:
    """The ModelInfo of the fake model, as core.models.loaded.model_info builds it for a real one."""
    special = SpecialTokens.of(tokenizer)
    return ModelInfo(
        path="/models/fake.gguf",
        tokenizer=tokenizer,
        template=ChatTemplate.from_source(template, bos_token=special.bos_text, eos_token=special.eos_text),
        n_vocab=tokenizer.n_vocab,
        n_ctx_train=1024,
        n_embd=8,
        n_params=1000,
        size=4000,
        name="Fake",
        architecture="fake",
        special=special,
    )


def fake_session(engine: FakeEngine | None = None, n_ctx: int = 4096, system: str = "") -> ChatSession:
    """A chat session on the fake engine (by default one that answers word by word)."""
    engine = engine or FakeEngine(words=True)
    engine.configure(n_ctx * engine.config.n_parallel, engine.config.n_parallel)  # as chat.launch.start_session
    model = fake_model(engine.tokenizer)
    assert model.template is not None
    return ChatSession(engine, engine.tokenizer, model.template, n_ctx, ChatSettings(), Conversation(system=system), model)
