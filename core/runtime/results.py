"""What a task's result stream receives from the engine: a `Partial` per generated token
(text held back while a stop string may be forming, probabilities, timings), prompt-progress
Partials, and the `Final` that ends the task and releases its slot.

Plain functions of a busy slot; the ones that end a task also add its counts to the engine's
`Metrics`. They run on the loop thread (or after it has stopped).
"""

from __future__ import annotations

import time

import numpy as np

from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.kernels.pooling import pool
from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.tasks import Final, Partial, Task, Timings, TokenProb


def slot_timings(s: Slot, now: float) -> Timings:
    """The task's timings so far (llama-server's `timings`)."""
    t = Timings(cache_n=s.n_cached, draft_n=s.n_draft, draft_n_accepted=s.n_draft_accepted)
    t.prompt_n = s.n_past - s.n_cached
    prompt_done = s.generating or (
        s.task is not None and s.n_past == len(s.prompt) and s.t_prompt_done >= s.t_start
    )
    done = s.t_prompt_done if prompt_done else now
    t.prompt_ms = (done - s.t_start) * 1e3 if t.prompt_n else 0.0
    t.predicted_n = len(s.generated)
    t.predicted_ms = (now - done) * 1e3 if s.generating else 0.0
    return t


def send_progress(s: Slot) -> None:
    """A prompt-progress Partial (return_progress), as llama-server's prompt_progress."""
    assert s.task is not None
    now = time.perf_counter()
    progress: dict[str, float] = {
        "total": len(s.task.prompt_tokens),
        "cache": s.n_cached,
        "processed": s.n_past,
        "time_ms": int((now - s.t_start) * 1e3) if s.n_past > s.n_cached else 0,
    }
    timings = slot_timings(s, now) if s.task.params.timings_per_token else None
    s.task.results.put(Partial("", [], timings=timings, progress=progress))


def emit(s: Slot, tok: int) -> None:
    """Stream a generated token: its text (held back while a stop string may be forming)
    and, when asked, its probabilities and the timings so far."""
    assert s.task is not None and s.sampler is not None and s.decoder is not None and s.stop is not None
    p = s.task.params
    s.generated.append(tok)
    post = p.post_sampling_probs
    probs = [TokenProb(i, pr) for i, pr in s.sampler.last_probs(p.n_probs, post_sampling=post)] if p.n_probs > 0 else []
    chosen = s.sampler.last_chosen_prob(post_sampling=post) if p.n_probs > 0 else None
    text = s.stop.push(s.decoder.feed(tok))
    s.task.results.put(
        Partial(
            text,
            [tok],
            [probs] if p.n_probs else [],
            [chosen] if chosen is not None else [],
            timings=slot_timings(s, time.perf_counter()) if p.timings_per_token else None,
        )
    )


def finish(
    s: Slot,
    stop_type: str,
    metrics: Metrics,
    error: Exception | None = None,
    embedding: np.ndarray | None = None,
) -> None:
    """End the slot's task: the held-back text (unless a stop string ended it), its counts
    into `metrics`, the Final; the slot is released."""
    task = s.task
    assert task is not None
    now = time.perf_counter()
    t = slot_timings(s, now)
    content = ""
    if s.stop is not None and s.decoder is not None:
        if stop_type != "word":
            tail = s.stop.push(s.decoder.flush()) + s.stop.flush()
            if tail:
                task.results.put(Partial(tail, []))
        content = s.stop.text
    m = metrics
    m.prompt_tokens_total += t.prompt_n
    m.prompt_tokens_cached_total += t.cache_n
    m.prompt_seconds_total += t.prompt_ms / 1e3
    m.tokens_predicted_total += t.predicted_n
    m.tokens_predicted_seconds_total += t.predicted_ms / 1e3
    task.results.put(
        Final(
            content=content,
            tokens=list(s.generated),
            prompt_tokens=list(task.prompt_tokens),
            stop_type=stop_type,
            stopping_word=s.stop.stopped_word if s.stop is not None else "",
            truncated=s.truncated,
            tokens_cached=s.n_cached,
            n_ctx_tokens=len(s.cached),
            timings=t,
            id_slot=s.id,
            error=error,
            embedding=embedding,
        )
    )
    task.results.close()
    s.release()  # cells written so far stay valid: s.cached matches the cache


def finish_embedding(s: Slot, model: DecoderModel, metrics: Metrics) -> None:
    """End an embedding task whose whole prompt has been evaluated: its hidden states pooled
    (rank pooling: the classifier's score) in the Final."""
    assert s.task is not None
    h = (
        np.concatenate(s.hidden)
        if s.hidden
        else np.zeros((0, model.args.n_embd), np.float32)
    )
    seq_ids = np.zeros(h.shape[0], dtype=np.int64)
    emb = h if s.task.pooling == "none" else pool(h, seq_ids, s.task.pooling)[0]
    if s.task.pooling == "rank":
        emb = model.classify(emb[None])[0]  # (n_cls_out,): the relevance score(s)
    finish(s, "eos", metrics, embedding=emb)


def finish_queued(task: Task, stop_type: str) -> None:
    """End a task that never reached a slot (cancelled while queued, or the engine stopped)."""
    task.results.put(Final("", [], list(task.prompt_tokens), stop_type))
    task.results.close()
