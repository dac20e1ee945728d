"""The engine's counters behind /metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Metrics:
    """Counters behind /metrics (llama-server's `llamacpp:` names)."""

    prompt_tokens_total: int = 0  # processed (decoded) prompt tokens; cached ones apart
    prompt_tokens_cached_total: int = 0
    prompt_seconds_total: float = 0.0
    tokens_predicted_total: int = 0
    tokens_predicted_seconds_total: float = 0.0
    n_decode_total: int = 0
    n_busy_slots_total: int = 0
    n_tokens_max: int = 0
    requests_processing: int = 0
    requests_deferred: int = 0
    spec_draft_tokens_total: int = 0  # speculative decoding: tokens drafted and verified
    spec_accepted_tokens_total: int = 0
    spec_drafts_total: int = 0  # verification steps
