"""core/quality/task_files.py and choices.py: the benchmarks' files read as llama-perplexity
reads them, its random picks, and the scoring (checked against plain per-sequence forwards on
a tiny model)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.loaded import LoadedModel, load
from llamacli.core.model.state.batch import Batch
from llamacli.core.quality import choices as C
from llamacli.core.quality import task_files as F
from llamacli.core.quality.logprobs import choice_logprobs, softmax_logprobs
from tests.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load(write_tiny_model("llama", "Q8_0", tmp_path_factory.mktemp("mc") / "l.gguf"), "ggml", 2, with_template=False)


def _tok(m: LoadedModel):  # type: ignore[no-untyped-def]
    return lambda text: m.tokenizer.tokenize(text, add_special=True, parse_special=False)


def mc_bytes(tasks: list[tuple[str, list[str], list[int]]]) -> bytes:
    def s(x: str) -> bytes:
        return struct.pack("<I", len(x.encode())) + x.encode()

    def answers(a: list[str], lab: list[int]) -> bytes:
        return struct.pack("<I", len(a)) + b"".join(s(x) for x in a) + struct.pack(f"<{len(lab)}i", *lab)

    bodies = [s(q) + answers(a, lab) * 2 for q, a, lab in tasks]
    offsets = np.cumsum([4 + 4 * len(tasks)] + [len(b) for b in bodies[:-1]]).tolist()
    return struct.pack(f"<I{len(tasks)}I", len(tasks), *offsets) + b"".join(bodies)


def test_mt19937_and_libstdcxx_draws() -> None:
    r = F.Mt19937(1)
    assert [r() for _ in range(3)] == [1791095845, 4282876139, 3093770124]  # std::mt19937(1)
    r, raw = F.Mt19937(1), F.Mt19937(1)
    for n in (10, 7, 1000, 3):
        x = raw()
        assert r.uniform(n) == (x * n) >> 32  # Lemire's method, no rejection for these draws
    # llama-perplexity --winogrande-tasks 5 over 10 tasks scored tasks 5, 9, 6, 7, 1 (its output,
    # tests/fixtures/quality/llamacpp.json): the same picks
    assert F.pick_scaled(list(range(10)), 5) == [4, 8, 5, 6, 0]


def test_hellaswag_file() -> None:
    text = b"".join(b"ctx %d\n%d\nA\nB\nC\nD\n" % (i, i % 4) for i in range(5))
    tasks = F.read_hellaswag(text[:-1], 3)  # -f drops the last newline: the last line still counts
    assert len(tasks) == 3 and all(t.context.startswith("ctx ") and t.endings == ["A", "B", "C", "D"] for t in tasks)
    assert [t.gold for t in tasks] == [int(t.context[4:]) % 4 for t in tasks]
    assert len({t.context for t in F.read_hellaswag(text, 100)}) == 5  # all of them, in random order
    with pytest.raises(F.TaskFileError, match="not a multiple of 6"):
        F.read_hellaswag(b"a\nb\n", 5)


def test_winogrande_file() -> None:
    text = (b'index,sentence,option1,option2,answer\n'
            b'0,The cup is on the _ now.,table,floor,1\n'
            b'1,"Well, the _ said so.",man,woman,2\n'
            b'2,no commas here\n'
            b'3,No blank.,a,b,1\n'
            b'4,The _ ends the file.,line,text,1')
    warn: list[str] = []
    tasks = F.read_winogrande(text, 0, warn)
    assert [(t.first, t.second, t.choices, t.answer) for t in tasks] == [
        ("The cup is on the ", " now.", ("table", "floor"), 1), ("Well, the ", " said so.", ("man", "woman"), 2)]
    # the header (its sentence has no blank), the broken lines; the last line is never read
    # (llama.cpp's getline meets the end of the text)
    assert warn == ["no _ in <sentence>", "failed to find comma separators in <2,no commas here>", "no _ in <No blank.>"]
    warn.clear()
    assert len(F.read_winogrande(text + b"\n", 0, warn)) == 3  # with a newline at the end it is read


def test_multiple_choice_file() -> None:
    data = mc_bytes([("Q1", ["a", "b"], [0, 1]), ("Q2", ["c", "d", "e"], [1, 0, 0]), ("Q3", ["f", "g"], [0, 1])])
    tasks, n = F.read_multiple_choice(data, 0)
    assert n == 3 and [(t.question, t.answers, t.labels) for t in tasks][1] == ("Q2", ["c", "d", "e"], [1, 0, 0])
    picked, _ = F.read_multiple_choice(data, 2)
    assert [t.question for t in picked] == [f"Q{i + 1}" for i in F.pick_scaled([0, 1, 2], 2)]
    with pytest.raises(F.TaskFileError, match="no tasks"):
        F.read_multiple_choice(b"", 0)
    with pytest.raises(F.TaskFileError, match="failed to read task 2 of 3"):
        F.read_multiple_choice(data[:70], 0)  # the header (16 bytes) and task 1 (50) are whole


def test_logprob_arithmetic() -> None:
    x = np.random.default_rng(0).standard_normal((3, 500)).astype(np.float32) * 3
    ref = x.astype(np.float64) - np.log(np.exp(x.astype(np.float64)).sum(1, keepdims=True))
    np.testing.assert_allclose(choice_logprobs(x, np.array([1, 2, 3])), ref[[0, 1, 2], [1, 2, 3]], rtol=1e-5)
    np.testing.assert_allclose(softmax_logprobs(x[0], np.array([5, 6])), ref[0, [5, 6]], rtol=1e-5)


def _plain_logprobs(m: LoadedModel, seq: list[int]) -> np.ndarray:
    """log p(seq[j+1] | seq[:j+1]) for every j, one sequence alone, float64."""
    lg = m.model.forward(Batch.single(seq, all_logits=True), m.model.new_cache(1, len(seq))).astype(np.float64)
    lp = lg - lg.max(1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(1, keepdims=True))
    return lp[np.arange(len(seq) - 1), seq[1:]]


def test_hellaswag_scores_are_mean_logprobs_of_the_endings(tiny: LoadedModel) -> None:
    tasks = [F.HellaswagTask("the cat sat on the", 1, ["mat and slept", "dog", "hat in the sun", "floor"]),
             F.HellaswagTask("one two three", 0, ["four five", "ten", "nine eight", "seven"])]
    runner = C.ChoiceRunner(tiny.model, 2048, 2048, 8)  # both tasks in one group
    scores = list(C.hellaswag(runner, tasks, _tok(tiny)))
    assert [s.done for s in scores] == [1, 2]
    for t, s in zip(tasks, scores):
        seqs = [_tok(tiny)(t.context + " " + e) for e in t.endings]
        cp = C.ChoiceTask(seqs).common_prefix
        want = [_plain_logprobs(tiny, q)[cp - 1 :].mean() for q in seqs]
        np.testing.assert_allclose(s.scores, want, rtol=1e-5)
        assert s.chosen == int(np.argmax(want))
    assert scores[1].correct == sum(s.chosen == t.gold for s, t in zip(scores, tasks))


def test_winogrande_scores_the_words_after_the_choice(tiny: LoadedModel) -> None:
    t = F.WinograndeTask("the dog ate the ", " because it was hungry and tired.", ("cat", "bone"), 1)
    runner = C.ChoiceRunner(tiny.model, 2048, 2048, 4)
    (s,) = list(C.winogrande(runner, [t], _tok(tiny)))
    tok = _tok(tiny)
    for k, choice in enumerate(t.choices):
        seq = tok(t.first + choice + t.second)
        base = len(tok(t.first + choice))
        want = _plain_logprobs(tiny, seq)[base - 1 : len(seq) - 2].mean()  # the last token is left out
        assert s.scores[k] == pytest.approx(want, rel=1e-5)


def test_tasks_that_do_not_fit(tiny: LoadedModel) -> None:
    tok = _tok(tiny)
    task = F.HellaswagTask("the cat sat on the", 0, ["mat", "hat", "dog", "sun"])
    with pytest.raises(InvalidRequest, match="requires a higher -np"):
        list(C.hellaswag(C.ChoiceRunner(tiny.model, 2048, 2048, 3), [task], tok))
    with pytest.raises(InvalidRequest, match="does not fit in the context window"):
        list(C.hellaswag(C.ChoiceRunner(tiny.model, 8, 2048, 4), [task], tok))
    q = F.ChoiceQuestion("", ["a"], [1])
    with pytest.raises(InvalidRequest, match="empty question"):
        list(C.multiple_choice(C.ChoiceRunner(tiny.model, 2048, 2048, 4), [q], tok))


def test_wilson_interval() -> None:
    lo, hi = C.wilson(1, 2)  # llama.cpp's line 2 of the fixture: 50% [9.4531%, 90.5469%]
    assert (round(100 * lo, 4), round(100 * hi, 4)) == (9.4531, 90.5469)
    assert Path  # noqa: B018 (keeps the import for readers of the helpers above)
