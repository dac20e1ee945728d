"""llama-perplexity's multiple-choice benchmarks: HellaSwag, Winogrande and the binary
multiple-choice format (ARC, MMLU, TruthfulQA), scored as tools/perplexity/perplexity.cpp
scores them.

A task is one token sequence per choice (question or context followed by the choice). The
tokens the choices share (the common prefix) are evaluated once, in the first sequence, then
copied into the others' KV cache; the rest of every sequence follows in one batch. llama.cpp
puts the shared tokens in all sequences of one batch instead; each row's logits are the same
either way (the ggml numerics do not depend on the batch). Tasks are packed into groups that
fit the context and the sequence limit, as llama.cpp packs them.

The logits of a task are laid out as llama.cpp's batch has them (the last shared token, then
each sequence's own tokens that ask for an output), since Winogrande indexes into that layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.batch import Batch
from llamacli.core.quality.chunks import logit_blocks
from llamacli.core.quality.logprobs import choice_logprobs, softmax_logprobs
from llamacli.core.quality.task_files import ChoiceQuestion, HellaswagTask, WinograndeTask

F32 = np.float32
Tokenize = Callable[[str], list[int]]  # text -> ids, BOS added as the vocabulary asks
WINOGRANDE_MIN_TRAILING = 3  # llama.cpp's k_min_trailing_ctx


def _common_prefix(seqs: list[list[int]]) -> int:
    n = min(len(s) for s in seqs)
    k = 0
    while k < n and all(s[k] == seqs[0][k] for s in seqs):
        k += 1
    return k


@dataclass
class ChoiceTask:
    """Token sequences of the choices; `all_outputs`: every token after the shared prefix gets
    a logit (Winogrande's batch), else all but each sequence's last (HellaSwag, multiple choice)."""

    seqs: list[list[int]]
    all_outputs: bool = False

    def __post_init__(self) -> None:
        self.common_prefix = _common_prefix(self.seqs)
        if self.common_prefix == 0:
            raise InvalidRequest("a task's choices share no first token (the model adds no BOS): cannot score it")
        if any(len(s) == self.common_prefix for s in self.seqs):
            raise InvalidRequest("a task's choice adds no token to what the choices share")
        self.required_tokens = self.common_prefix + sum(len(s) - self.common_prefix for s in self.seqs)

    def n_outputs(self, s: int) -> int:
        """Logit rows of sequence s after the shared one."""
        return len(self.seqs[s]) - self.common_prefix - (0 if self.all_outputs else 1)


@dataclass
class Evaluated:
    """A task's final-normed hidden states in llama.cpp's logit layout: row 0 the last shared
    token, then sequence by sequence the rows of `ChoiceTask.n_outputs`."""

    task: ChoiceTask
    hidden: np.ndarray  # (1 + sum n_outputs, n_embd)

    def start(self, s: int) -> int:
        """Layout row of sequence s's first own token."""
        return 1 + sum(self.task.n_outputs(i) for i in range(s))


# llama.cpp's task batches hold at most this many sequences (and no more than its -np)
MAX_SEQ = {"hellaswag": 4 * 32, "winogrande": 2 * 128, "multiple-choice": 4 * 32}


class ChoiceRunner:
    """Evaluates tasks in groups that fit n_ctx tokens and max_seq sequences."""

    def __init__(self, model: DecoderModel, n_ctx: int, n_batch: int, max_seq: int) -> None:
        self.model, self.n_ctx, self.n_batch, self.max_seq = model, n_ctx, n_batch, max_seq

    @classmethod
    def for_benchmark(cls, model: DecoderModel, kind: str, n_ctx: int, n_batch: int, n_parallel: int) -> ChoiceRunner:
        """llama-perplexity's context for a benchmark: max(4, -np) sequences sharing
        max(4, -np) * -c cells (padded to 256, as llama_context pads it)."""
        n_par = max(4, n_parallel)
        total = (n_par * n_ctx + 255) // 256 * 256
        return cls(model, total, min(n_batch, total), min(MAX_SEQ[kind], n_par))

    def run(self, tasks: list[ChoiceTask]) -> Iterator[list[Evaluated]]:
        """The tasks evaluated, group by group, in order."""
        i0 = 0
        while i0 < len(tasks):
            i1, n_cur, n_seq = i0, 0, 0
            while i1 < len(tasks) and n_cur + tasks[i1].required_tokens <= self.n_ctx:
                k = len(tasks[i1].seqs)
                if n_seq + k > self.max_seq:
                    if n_seq == 0:
                        raise InvalidRequest(f"task {i0} requires a higher -np|--parallel value (at least {k})")
                    break
                n_cur += tasks[i1].required_tokens
                n_seq += k
                i1 += 1
            if i1 == i0:
                raise InvalidRequest(f"task {i0} does not fit in the context window "
                                     f"(requires {tasks[i0].required_tokens} tokens)")
            yield self._group(tasks[i0:i1])
            i0 = i1

    def _forward(self, batch: Batch, cache: object) -> np.ndarray:
        """Hidden states of the batch's outputs, the batch run in pieces of n_batch tokens."""
        parts = []
        for a in range(0, batch.n_tokens, self.n_batch):
            sl = slice(a, a + self.n_batch)
            sub = Batch(batch.tokens[sl], batch.seq_ids[sl], batch.positions[sl], batch.output[sl])
            parts.append(self.model.forward_hidden(sub, cache))  # type: ignore[arg-type]
        return np.concatenate(parts)

    def _group(self, tasks: list[ChoiceTask]) -> list[Evaluated]:
        first_seq = np.cumsum([0] + [len(t.seqs) for t in tasks])
        cache = self.model.new_cache(int(first_seq[-1]), max(len(s) for t in tasks for s in t.seqs))
        # the shared tokens, in each task's first sequence; output: the last of them
        toks, seqs, pos, out = [], [], [], []
        for t, s0 in zip(tasks, first_seq):
            cp = t.common_prefix
            toks += t.seqs[0][:cp]
            seqs += [int(s0)] * cp
            pos += list(range(cp))
            out += [False] * (cp - 1) + [True]
        shared = self._forward(Batch(toks, seqs, pos, out), cache)
        for t, s0 in zip(tasks, first_seq):
            for s in range(1, len(t.seqs)):
                cache.copy_seq(int(s0), int(s0) + s, t.common_prefix)
        toks, seqs, pos, out = [], [], [], []
        for t, s0 in zip(tasks, first_seq):
            cp = t.common_prefix
            for s, seq in enumerate(t.seqs):
                toks += seq[cp:]
                seqs += [int(s0) + s] * (len(seq) - cp)
                pos += list(range(cp, len(seq)))
                out += [True] * t.n_outputs(s) + ([] if t.all_outputs else [False])
        own = self._forward(Batch(toks, seqs, pos, out), cache)
        result, a = [], 0
        for i, t in enumerate(tasks):
            n = sum(t.n_outputs(s) for s in range(len(t.seqs)))
            result.append(Evaluated(t, np.concatenate([shared[i : i + 1], own[a : a + n]])))
            a += n
        return result

    def logprobs(self, hidden: np.ndarray, rows: list[int], targets: list[int]) -> np.ndarray:
        """llama.cpp's compute_logprobs for (layout row, token) pairs: float32 (n,)."""
        out = np.empty(len(rows), dtype=F32)
        if not rows:
            return out
        uniq, inv = np.unique(np.asarray(rows), return_inverse=True)
        t = np.asarray(targets, dtype=np.int64)
        for sl in logit_blocks(uniq.shape[0], self.model.args.n_vocab):
            logits = self.model.logits(hidden[uniq[sl]])
            pick = (inv >= sl.start) & (inv < sl.stop)
            out[pick] = choice_logprobs(logits[inv[pick] - sl.start], t[pick])
        return out

    def first_logprobs(self, hidden: np.ndarray, targets: list[int]) -> np.ndarray:
        """log of softmax(row 0)[target] for each target (float32 probabilities, their float log)."""
        return softmax_logprobs(self.model.logits(hidden[:1])[0], np.asarray(targets, dtype=np.int64))


def wilson(correct: float, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion (llama.cpp's HellaSwag lines)."""
    za = 1.95996398454
    freq = correct / n
    z = za * za / n
    cnf = z * math.sqrt(n * (4.0 * freq * (1 - freq) + z)) / (za + za)
    return (freq + z * 0.5 - cnf) / (1.0 + z), (freq + z * 0.5 + cnf) / (1.0 + z)


@dataclass(frozen=True)
class TaskScore:
    """One task's outcome and the running accuracy (fractions)."""

    index: int  # 1-based
    correct: int  # tasks right so far
    done: int  # tasks so far
    scores: tuple[float, ...]  # per choice (HellaSwag, multiple choice: mean log-prob; Winogrande: its two)
    chosen: int  # the index picked (Winogrande: 1 or 2)
    answer: int  # the right one (Winogrande: 1 or 2; multiple choice: first correct index)

    @property
    def accuracy(self) -> float:
        return self.correct / self.done


def _mean_logprobs(runner: ChoiceRunner, ev: Evaluated, float32: bool) -> list[float]:
    """Per choice: (log p(first own token) + the log-probs of the rest) / their count, summed in
    float64 (HellaSwag) or float32 (multiple choice) as llama.cpp does."""
    t = ev.task
    cp = t.common_prefix
    first = runner.first_logprobs(ev.hidden, [s[cp] for s in t.seqs])
    rows, targets = [], []
    for s, seq in enumerate(t.seqs):
        start = ev.start(s)
        for j in range(cp, len(seq) - 1):
            rows.append(start + j - cp)
            targets.append(seq[j + 1])
    lp = runner.logprobs(ev.hidden, rows, targets)
    out, k = [], 0
    for s, seq in enumerate(t.seqs):
        n = len(seq) - 1 - cp
        if float32:
            acc = F32(first[s])
            for v in lp[k : k + n]:
                acc = F32(acc + v)
            out.append(float(F32(acc / F32(n + 1))))
        else:
            total = float(first[s])
            for v in lp[k : k + n]:
                total += float(v)
            out.append(total / (n + 1))
        k += n
    return out


def _argmax(values: list[float]) -> int:
    best = 0
    for i in range(1, len(values)):
        if values[i] > values[best]:
            best = i
    return best


def hellaswag(runner: ChoiceRunner, tasks: list[HellaswagTask], tokenize: Tokenize) -> Iterator[TaskScore]:
    """acc_norm over the tasks: the ending whose tokens have the highest mean log-probability."""
    prepared = [ChoiceTask([tokenize(t.context + " " + e) for e in t.endings]) for t in tasks]
    correct, done = 0, 0
    for group in runner.run(prepared):
        for ev in group:
            task = tasks[done]
            scores = _mean_logprobs(runner, ev, float32=False)
            chosen = _argmax(scores)
            correct += chosen == task.gold
            done += 1
            yield TaskScore(done, correct, done, tuple(scores), chosen, task.gold)


def multiple_choice(runner: ChoiceRunner, tasks: list[ChoiceQuestion], tokenize: Tokenize) -> Iterator[TaskScore]:
    """The answer with the highest mean log-probability; right when its mc1 label is 1."""
    prepared = []
    for q in tasks:
        if not q.question or not q.answers or any(not a for a in q.answers):
            raise InvalidRequest("found bad task with empty question and/or answers")
        prepared.append(ChoiceTask([tokenize(q.question + " " + a) for a in q.answers]))
    correct, done = 0, 0
    for group in runner.run(prepared):
        for ev in group:
            q = tasks[done]
            scores = _mean_logprobs(runner, ev, float32=True)
            chosen = _argmax(scores)
            correct += q.labels[chosen] == 1
            done += 1
            yield TaskScore(done, correct, done, tuple(scores), chosen, q.labels.index(1) if 1 in q.labels else -1)


@dataclass
class _Wino:
    task: WinograndeTask
    choice: ChoiceTask
    n_base: tuple[int, int]  # tokens of first part + choice, each


def winogrande(runner: ChoiceRunner, tasks: list[WinograndeTask], tokenize: Tokenize) -> Iterator[TaskScore]:
    """Per choice the mean log-probability of the sentence's tokens after the choice (or of the
    choice and after, when either side has 3 tokens or fewer), llama.cpp's index arithmetic
    included (for the second sentence it starts from a row of the first when the choice is
    scored, which llama.cpp's source marks as questionable; reproduced on purpose so that the
    scores equal llama-perplexity's)."""
    prepared = []
    for t in tasks:
        seqs = [tokenize(t.first + c + t.second) for c in t.choices]
        prepared.append(_Wino(t, ChoiceTask(seqs, all_outputs=True),
                              (len(tokenize(t.first + t.choices[0])), len(tokenize(t.first + t.choices[1])))))
    correct, done = 0, 0
    for group in runner.run([w.choice for w in prepared]):
        for ev in group:
            w = prepared[done]
            s1, s2 = _winogrande_scores(runner, ev, w.n_base)
            chosen = 1 if s1 > s2 else 2
            correct += chosen == w.task.answer
            done += 1
            yield TaskScore(done, correct, done, (s1, s2), chosen, w.task.answer)


def _winogrande_scores(runner: ChoiceRunner, ev: Evaluated, n_base: tuple[int, int]) -> tuple[float, float]:
    t = ev.task
    cp = t.common_prefix
    seq0, seq1 = t.seqs
    skip = len(seq0) - cp > WINOGRANDE_MIN_TRAILING and len(seq1) - cp > WINOGRANDE_MIN_TRAILING
    spans = []
    for s, seq in enumerate(t.seqs):
        base = n_base[s] if skip else cp
        last = 1 if len(seq) - base > 1 else 0
        li = base - cp if s == 0 else len(seq0) - cp + base - cp
        js = range(base - 1, len(seq) - 1 - last)
        if li < 0 or not js:
            raise InvalidRequest("a Winogrande task's choice cannot be scored (its sentence tokenizes unexpectedly)")
        spans.append(([li + k for k in range(len(js))], [seq[j + 1] for j in js]))
    lp = runner.logprobs(ev.hidden, spans[0][0] + spans[1][0], spans[0][1] + spans[1][1])
    n0 = len(spans[0][0])
    out = []
    for vals in (lp[:n0], lp[n0:]):
        acc = F32(0)
        for v in vals:
            acc = F32(acc + v)
        out.append(float(F32(acc / F32(len(vals)))))
    return out[0], out[1]
