"""Single-sequence generation: prefill the prompt in chunks, then sample token by token.

This is `llama complete` (llama.cpp's llama-completion). The multi-slot engine drives the
same model forward with many sequences at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from llamacli.core.batch import Batch
from llamacli.core.errors import ContextOverflow, InvalidRequest
from llamacli.core.models.base import DecoderModel
from llamacli.core.sampling import Sampler
from llamacli.core.tokenizer import IncrementalDecoder, Tokenizer


@dataclass
class Timings:
    """llama-server's timing fields."""

    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0

    def to_dict(self) -> dict[str, float]:
        d: dict[str, float] = asdict(self)
        d["prompt_per_token_ms"] = self.prompt_ms / self.prompt_n if self.prompt_n else 0.0
        d["prompt_per_second"] = 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms else 0.0
        d["predicted_per_token_ms"] = self.predicted_ms / self.predicted_n if self.predicted_n else 0.0
        d["predicted_per_second"] = 1e3 * self.predicted_n / self.predicted_ms if self.predicted_ms else 0.0
        return d


@dataclass
class Completion:
    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)
    content: str = ""
    stop_type: str = "limit"  # "eos", "limit" (n_predict reached) or "context" (context full)
    timings: Timings = field(default_factory=Timings)


def generate(
    model: DecoderModel,
    tokenizer: Tokenizer,
    prompt_tokens: list[int],
    sampler: Sampler,
    n_predict: int = -1,
    n_ctx: int = 4096,
    n_batch: int = 512,
    ignore_eos: bool = False,
    on_text: Callable[[str], None] | None = None,
) -> Completion:
    """Greedy or sampled continuation of prompt_tokens; on_text receives text as it completes
    (never half a UTF-8 character)."""
    n_prompt = len(prompt_tokens)
    if n_prompt == 0:
        raise InvalidRequest("the prompt is empty")
    if n_prompt >= n_ctx:
        raise ContextOverflow(n_prompt, n_ctx)
    if n_batch < 1:
        raise InvalidRequest("n_batch must be at least 1")
    out = Completion(list(prompt_tokens))
    cache = model.new_cache(1, n_ctx)
    decoder = IncrementalDecoder(tokenizer)
    pieces: list[str] = []

    def emit(text: str) -> None:
        if text:
            pieces.append(text)
            if on_text is not None:
                on_text(text)

    t0 = time.perf_counter()
    logits = np.empty(0, dtype=np.float32)
    for start in range(0, n_prompt, n_batch):
        chunk = prompt_tokens[start : start + n_batch]
        logits = model.forward(Batch.single(chunk, start_pos=start), cache)[-1]
    t1 = time.perf_counter()
    out.timings.prompt_n = n_prompt
    out.timings.prompt_ms = (t1 - t0) * 1e3
    pos = n_prompt
    while n_predict < 0 or len(out.tokens) < n_predict:
        tok = sampler.sample(logits)
        if tokenizer.is_eog(tok) and not ignore_eos:
            out.stop_type = "eos"
            break
        out.tokens.append(tok)
        emit(decoder.feed(tok))
        if pos >= n_ctx:
            out.stop_type = "context"
            break
        logits = model.forward(Batch.single([tok], start_pos=pos), cache)[-1]
        pos += 1
    emit(decoder.flush())
    out.timings.predicted_n = len(out.tokens)
    out.timings.predicted_ms = (time.perf_counter() - t1) * 1e3
    out.content = "".join(pieces)
    return out
