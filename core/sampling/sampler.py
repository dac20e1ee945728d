"""One sequence's sampler: llama.cpp's common_sampler chain, its history and random state.

s = Sampler(params, eog_ids=tok.vocab.eog_ids, n_vocab=n_vocab)
s.accept_prompt(prompt_tokens)        # llama-server feeds the prompt to the penalties
tok = s.sample(logits); s.accept(tok)  # each generated token
s.last_probs(n_probs)                  # what llama-server reports for that step
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from llamacli.core.errors import InvalidRequest
from llamacli.core.sampling.candidates import F32, Candidates, top_indices
from llamacli.core.sampling.dry import Dry, DryVocab, TokenizerLike
from llamacli.core.sampling.filters import (
    MinP,
    Temperature,
    TemperatureExt,
    TopK,
    TopNSigma,
    TopP,
    Typical,
    Xtc,
)
from llamacli.core.sampling.logit_bias import LogitBias
from llamacli.core.sampling.params import SamplingParams
from llamacli.core.sampling.penalties import Penalties
from llamacli.core.sampling.rng import resolve_seed
from llamacli.core.sampling.selectors import AdaptiveP, Dist, Mirostat, MirostatV2
from llamacli.core.sampling.step import Step

_DRY_VOCABS: weakref.WeakKeyDictionary[Any, DryVocab] = weakref.WeakKeyDictionary()


def _history_len(last_n: int, n_ctx: int | None) -> int | None:
    """repeat_last_n / dry_penalty_last_n: -1 is the context size (None: unbounded)."""
    return (n_ctx if n_ctx else None) if last_n < 0 else last_n


def build_chain(
    params: SamplingParams,
    seed: int,
    eog_ids: Iterable[int] = (),
    n_vocab: int = 0,
    n_ctx: int | None = None,
    dry_vocab: DryVocab | None = None,
) -> list[Step]:
    """The steps common_sampler_init builds, in order: logit bias (with EOG bans when
    ignore_eos), then the `samplers` order ending in dist or adaptive-p; with mirostat,
    temperature and mirostat only."""
    p = params
    names = p.sampler_names()
    steps: list[Step] = []
    biases = [(t, -np.inf if b is False else float(b)) for t, b in p.logit_bias]
    if p.ignore_eos:
        biases += [(t, -np.inf) for t in sorted(eog_ids)]
    if biases:
        steps.append(LogitBias(biases))
    if p.mirostat == 1:
        return [
            *steps,
            Temperature(p.temperature),
            Mirostat(n_vocab, seed, p.mirostat_tau, p.mirostat_eta, 100),
        ]
    if p.mirostat == 2:
        return [
            *steps,
            Temperature(p.temperature),
            MirostatV2(seed, p.mirostat_tau, p.mirostat_eta),
        ]
    for name in names:
        if name == "dry":
            dry = Dry(
                p.dry_multiplier,
                p.dry_base,
                p.dry_allowed_length,
                _history_len(p.dry_penalty_last_n, n_ctx),
            )
            if not dry.disabled and any(p.dry_sequence_breakers):
                if dry_vocab is None:
                    raise InvalidRequest(
                        "DRY sequence breakers need the model vocabulary, which this engine did"
                        " not give the sampler (Sampler.for_tokenizer or dry_vocab=)"
                    )
                dry.breakers = dry_vocab.breakers(p.dry_sequence_breakers)
            steps.append(dry)
        elif name == "top_k":
            steps.append(TopK(p.top_k))
        elif name == "top_p":
            steps.append(TopP(p.top_p, p.min_keep))
        elif name == "top_n_sigma":
            steps.append(TopNSigma(p.top_n_sigma))
        elif name == "min_p":
            steps.append(MinP(p.min_p, p.min_keep))
        elif name == "xtc":
            steps.append(Xtc(p.xtc_probability, p.xtc_threshold, p.min_keep, seed))
        elif name == "typ_p":
            steps.append(Typical(p.typical_p, p.min_keep))
        elif name == "temperature":
            steps.append(
                TemperatureExt(p.temperature, p.dynatemp_range, p.dynatemp_exponent)
            )
        elif name == "penalties":
            last_n = _history_len(p.repeat_last_n, n_ctx)
            steps.append(
                Penalties(
                    last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty
                )
            )
    if "adaptive_p" in names:
        steps.append(AdaptiveP(p.adaptive_target, p.adaptive_decay, seed))
    else:
        steps.append(Dist(seed))
    return steps


class Sampler:
    """The sampler chain of one sequence.

    eog_ids: end-of-generation tokens, banned when params.ignore_eos. n_vocab: the logits
    beyond it are ignored (and mirostat's Zipf estimate uses it). n_ctx: what a history
    length of -1 means. dry_vocab: needed when DRY runs with sequence breakers.
    """

    def __init__(
        self,
        params: SamplingParams | None = None,
        eog_ids: Iterable[int] = frozenset(),
        n_vocab: int | None = None,
        n_ctx: int | None = None,
        dry_vocab: DryVocab | None = None,
    ) -> None:
        self.params = params if params is not None else SamplingParams()
        self.eog_ids = frozenset(int(t) for t in eog_ids)
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.dry_vocab = dry_vocab
        self.seed = 0
        self.steps: list[Step] = []
        self._last: Candidates | None = None
        self._raw: np.ndarray | None = None
        self._token = -1
        self.reset()

    @classmethod
    def for_tokenizer(
        cls, params: SamplingParams, tokenizer: TokenizerLike, n_ctx: int | None = None
    ) -> Sampler:
        """A sampler for a model's tokenizer: its EOG ids, vocabulary size and (cached per
        tokenizer) the token texts DRY's breakers need."""
        dry_vocab = _DRY_VOCABS.get(tokenizer)
        if dry_vocab is None:
            dry_vocab = _DRY_VOCABS[tokenizer] = DryVocab.from_tokenizer(tokenizer)
        eog = getattr(getattr(tokenizer, "vocab", None), "eog_ids", ())
        return cls(
            params,
            eog_ids=eog,
            n_vocab=tokenizer.n_vocab,
            n_ctx=n_ctx,
            dry_vocab=dry_vocab,
        )

    def reset(self) -> None:
        """Fresh history and random state (a random seed is drawn again when params ask)."""
        self.seed = resolve_seed(self.params.seed)
        self.steps = build_chain(
            self.params,
            self.seed,
            self.eog_ids,
            self.n_vocab or 0,
            self.n_ctx,
            self.dry_vocab,
        )
        self._last = None
        self._raw = None
        self._token = -1

    def accept(self, token: int) -> None:
        """Record a token of the sequence (penalty and DRY history, adaptive-p's average)."""
        for step in self.steps:
            step.accept(token)

    def accept_prompt(self, tokens: Sequence[int]) -> None:
        """Record the prompt, as llama-server does before generating (penalties see it)."""
        keep = self._history_capacity()
        for t in tokens if keep is None else tokens[max(0, len(tokens) - keep) :]:
            self.accept(t)

    def _history_capacity(self) -> int | None:
        caps = [s.last_n for s in self.steps if isinstance(s, (Penalties, Dry))]
        if any(c is None for c in caps):
            return None
        return max([c for c in caps if c is not None], default=1) or 1

    def sample(self, logits: np.ndarray) -> int:
        """Run the chain over logits (n_vocab,) and return the chosen token id."""
        lg = np.asarray(logits)
        if self.n_vocab is not None:
            lg = lg[: self.n_vocab]
        c = Candidates.from_logits(lg)
        self._raw = c.logits.copy()
        for step in self.steps:
            if isinstance(step, Mirostat) and step.n_vocab <= 0:
                step.n_vocab = len(c)
            step.apply(c)
        if c.selected < 0 or len(c) == 0:
            raise ValueError("the sampler chain left no candidate to choose from")
        self._last = c
        self._token = int(c.ids[c.selected])
        return self._token

    # ---- probabilities of the last step (llama-server's n_probs) ---------------------------

    def last_probs(
        self, n: int, post_sampling: bool | None = None
    ) -> list[tuple[int, float]]:
        """The top n (token id, probability) of the last sample() call, as llama-server's
        populate_token_probs: by default the softmax of the raw logits (no sampler applied);
        post_sampling (default: params.post_sampling_probs): the probabilities the chain
        ended with, zero-probability tokens left out."""
        if self._raw is None or self._last is None or n <= 0:
            return []
        post = (
            self.params.post_sampling_probs if post_sampling is None else post_sampling
        )
        if post:
            c = self._last
            order = np.arange(len(c)) if c.sorted else np.argsort(-c.p, kind="stable")
            out = []
            for i in order[:n]:
                if c.p[i] == 0:
                    break
                out.append((int(c.ids[i]), float(c.p[i])))
            return out
        raw = self._raw
        idx = top_indices(raw, min(n, raw.shape[0]))
        e, total = self._raw_softmax_parts()
        return [(int(i), float(F32(e[i] / total))) for i in idx]

    def last_chosen_prob(self, post_sampling: bool | None = None) -> float:
        """The probability of the token the last sample() returned (same two modes)."""
        if self._raw is None or self._last is None:
            return 0.0
        post = (
            self.params.post_sampling_probs if post_sampling is None else post_sampling
        )
        if post:
            c = self._last
            hit = np.flatnonzero(c.ids == self._token)
            return float(c.p[hit[0]]) if hit.shape[0] else 1.0
        e, total = self._raw_softmax_parts()
        return float(F32(e[self._token] / total))

    def _raw_softmax_parts(self) -> tuple[np.ndarray, np.float32]:
        assert self._raw is not None
        raw = self._raw
        with np.errstate(under="ignore"):
            e = np.exp(raw - raw.max(), dtype=F32)
        return e, F32(e.sum(dtype=np.float64))
