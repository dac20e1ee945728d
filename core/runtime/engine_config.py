"""The engine's settings (llama-server's flags, already parsed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from llamacli.core.sampling.limits import SamplingLimits
from llamacli.core.speculative.config import SpecConfig
from llamacli.core.text.grammar.limits import GrammarLimits


@dataclass
class EngineConfig:
    """Engine-wide settings (llama-server's flags, already parsed)."""

    n_ctx: int = 4096  # total context, shared by the slots
    n_parallel: int = 1
    n_batch: int = 512  # most tokens in one forward pass
    slot_prompt_similarity: float = 0.10
    context_shift: bool = False
    ctx_checkpoints: int = 32  # --ctx-checkpoints: per slot, for a recurrent state
    kv_unified: bool = (
        False  # every slot may use all n_ctx cells (memory grows with n_parallel)
    )
    n_predict_max: int = -1  # server-wide cap on n_predict (-1: none)
    speculative: SpecConfig = field(default_factory=SpecConfig)  # --spec-type and friends
    grammar_limits: GrammarLimits = field(default_factory=GrammarLimits)  # --max-grammar-*
    sampling_limits: SamplingLimits = field(default_factory=SamplingLimits)  # --max-dry-breakers, ...

    @property
    def n_ctx_slot(self) -> int:
        return (
            self.n_ctx
            if self.kv_unified
            else max(1, self.n_ctx // max(1, self.n_parallel))
        )
