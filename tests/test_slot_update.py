"""The per-slot update after a forward, without a model: the n_predict cap, embedding
chunks pooled when the prompt is done, prompt chunks that do not sample, the error that ends
a grammar's task."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from llamacli.core.runtime.batch_plan import SlotRows
from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.slot_update import SlotUpdate, limit, pick
from llamacli.core.runtime.tasks import Final, Partial, Task, TaskParams
from llamacli.core.sampling import Sampler, SamplingParams


def test_the_server_cap_bounds_n_predict() -> None:
    assert limit(10, -1) == 10 and limit(-1, -1) == -1
    assert limit(10, 4) == 4 and limit(-1, 4) == 4 and limit(3, 4) == 3


def update() -> SlotUpdate:
    model = SimpleNamespace(args=SimpleNamespace(n_embd=2))
    return SlotUpdate(model, None, Metrics(), None, frozenset(), -1)  # type: ignore[arg-type]


def test_an_embedding_is_pooled_once_its_prompt_is_done() -> None:
    s = Slot(0, n_ctx=16)
    task = Task([1, 2, 3], kind="embedding", pooling="mean")
    s.assign(task, 0, order=1)
    hidden = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    up = update()
    up(s, SlotRows(0, False, (1, 2), 0, slice(0, 2), slice(0, 0)), hidden, None)
    assert s.busy and s.cached == [1, 2] and s.n_past == 2
    up(s, SlotRows(0, False, (3,), 0, slice(2, 3), slice(0, 0), prompt_done=True), hidden, None)
    (final,) = list(task.results)
    assert isinstance(final, Final) and final.stop_type == "eos" and final.embedding.tolist() == [3.0, 4.0]
    assert not s.busy and s.cached == [1, 2, 3]


def test_a_prompt_chunk_reports_progress_and_samples_nothing_before_the_end() -> None:
    s = Slot(0, n_ctx=16)
    task = Task([1, 2, 3], TaskParams(return_progress=True))
    s.assign(task, 0, order=1)
    update()(s, SlotRows(0, False, (1, 2), 0, slice(0, 0), slice(0, 0)), np.zeros((0, 2)), None)
    p = task.results.get(timeout=0)
    assert isinstance(p, Partial) and p.progress is not None and p.progress["processed"] == 2
    assert not s.generating and s.n_prompt_left == 1


def test_a_grammar_that_gives_up_after_an_allowed_token_names_its_limit(tmp_path: Path) -> None:
    """Issue #30 item d: the token ("a", one of the grammar's first tokens) was one its mask
    allowed, so the task's error is the parser's own (its row limit, met on "a"), not
    'logit_bias or ignore_eos removed every allowed token'."""
    from llamacli.core.model.weights.gguf_file import read_metadata
    from llamacli.core.text.grammar import GrammarConstraint, GrammarSpec, compile_grammar
    from llamacli.core.text.tokenizer import load_tokenizer
    from tests.tiny_models import write_tiny_model

    tok = load_tokenizer(read_metadata(write_tiny_model("gemma3", "Q8_0", tmp_path / "g.gguf")))
    words = " | ".join(f'"aw{i}"' for i in range(2001))
    grammar = compile_grammar(tok, GrammarSpec.gbnf(f'root ::= "ok" | "a" ({words})'))
    s = Slot(0, n_ctx=16)
    task = Task([1], TaskParams())
    s.assign(task, 0, order=1)
    s.sampler = Sampler(SamplingParams(top_k=1), eog_ids=tok.vocab.eog_ids, n_vocab=tok.n_vocab)
    s.grammar = GrammarConstraint(grammar)

    def logits_for(token: int) -> np.ndarray:
        out = np.zeros(tok.n_vocab, np.float32)
        out[token] = 10.0
        return out

    assert pick(s, logits_for(tok.vocab.token_to_id["a"]), Metrics()) is None
    final = list(task.results)[-1]
    assert isinstance(final, Final) and final.stop_type == "error"
    msg = str(final.error)
    assert msg.startswith("the grammar cannot go on after this token: the parser would hold") and "logit_bias" not in msg
