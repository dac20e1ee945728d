"""Bounds on one request's sampling parameters, where llama.cpp has none (`llama serve
--max-dry-breakers`, `--max-logit-bias`, `--max-logit-bias-chars`, `--max-n-probs`).

Each bounds work done for one request on the engine's thread, which every slot waits for:
DRY looks every new token up against the breakers; every logit_bias entry is applied at each
sampling step (and its string keys are tokenized first); n_probs probabilities are sorted,
turned into pieces and sent for every generated token (llama.cpp clamps n_probs to the
vocabulary, which is a quarter of a million entries a token for some models).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingLimits:
    max_dry_breakers: int = 1000
    max_logit_bias: int = 65536  # entries, and (token, bias) pairs once string keys are tokenized
    max_logit_bias_chars: int = 65536  # characters of string keys, all together
    max_n_probs: int = 1000


DEFAULT_SAMPLING_LIMITS = SamplingLimits()
