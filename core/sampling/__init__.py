"""llama.cpp's sampler chain over a NumPy logits vector (src/llama-sampler.cpp,
common/sampling.cpp): logit bias, penalties, DRY, top-n-sigma, top-k, typical, top-p, min-p,
XTC, temperature (dynamic too), then dist / mirostat / adaptive-p, with the same float32
arithmetic, candidate order and std::mt19937 draws, so a seed picks the same token.

    from llamacli.core.sampling import Sampler, SamplingParams
    s = Sampler(SamplingParams(seed=42), eog_ids=eog, n_vocab=n_vocab)
    s.accept_prompt(prompt); tok = s.sample(logits); s.accept(tok)
"""

from llamacli.core.sampling.candidates import Candidates
from llamacli.core.sampling.dry import DryVocab
from llamacli.core.sampling.limits import DEFAULT_SAMPLING_LIMITS, SamplingLimits
from llamacli.core.sampling.logit_bias import resolve_logit_bias
from llamacli.core.sampling.params import (
    DEFAULT_DRY_BREAKERS,
    DEFAULT_SAMPLERS,
    SamplingParams,
    parse_samplers,
)
from llamacli.core.sampling.rng import DEFAULT_SEED, Mt19937
from llamacli.core.sampling.sampler import Sampler, build_chain

__all__ = [
    "DEFAULT_DRY_BREAKERS",
    "DEFAULT_SAMPLING_LIMITS",
    "DEFAULT_SAMPLERS",
    "DEFAULT_SEED",
    "Candidates",
    "DryVocab",
    "Mt19937",
    "Sampler",
    "SamplingLimits",
    "SamplingParams",
    "build_chain",
    "parse_samplers",
    "resolve_logit_bias",
]
