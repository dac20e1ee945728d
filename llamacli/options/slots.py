"""`llama serve`'s slot options: how many slots, the context they share, batch sizes, the
tokens a request generates, prompt caching, context shifting and idle sleep. They become one
SlotOptions (the engine's share of it becomes an EngineConfig in options/serve_options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from llamacli.options.common import BATCH_SIZE, CTX_SIZE, N_PREDICT, PARALLEL
from llamacli.options.groups import COMMON, SLOTS, Opt, at_least, in_panel
from llamacli.options.llama_flags import note

OPTIONS: list[Opt] = [
    CTX_SIZE.but(help="Context size shared by the slots (0: the model's training context)."),
    BATCH_SIZE.but(default=2048, help="Logical batch size (limits /infill context)."),
    Opt("ubatch_size", int, 512, ("-ub", "--ubatch-size"), "Most tokens in one forward pass.", panel=COMMON, check=at_least(1)),
    N_PREDICT.but(help="Tokens per request when the request gives none or -1 (-1: no limit)."),
    Opt("keep", int, 0, ("--keep",), "Prompt tokens kept by a context shift (-1: all).", panel=COMMON, check=at_least(-1)),
] + in_panel(SLOTS, [
    PARALLEL.but(help="Number of slots (-1: auto, 4 with a unified KV cache)."),
    Opt("n_predict_max", int, -1, ("--n-predict-max",),
        "Cap on any request's tokens to generate (-1: none; generation always stops when the slot's context is full, "
        "unless --context-shift).", check=at_least(-1)),
    Opt("context_shift", bool, False, ("--context-shift/--no-context-shift",), "Shift the context instead of stopping when it fills."),
    Opt("ctx_checkpoints", int, 32, ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"),
        "Most context checkpoints per slot: copies of a hybrid model's recurrent state that a later prompt can go "
        "back to.", check=at_least(0)),
    Opt("cache_prompt", bool, True, ("--cache-prompt/--no-cache-prompt",), "Reuse cached prompt prefixes across requests."),
    Opt("cache_reuse", int, 0, ("--cache-reuse",), "Accepted; prefixes are reused, chunks after a difference are not."),
    Opt("kv_unified", Optional[bool], None, ("-kvu/-no-kvu", "--kv-unified/--no-kv-unified"),
        "Every slot may use the whole context (default: on when -np is auto)."),
    Opt("slot_prompt_similarity", float, 0.10, ("-sps", "--slot-prompt-similarity"), "Prompt overlap needed to prefer a slot's cache."),
    Opt("sleep_idle_seconds", float, -1, ("--sleep-idle-seconds",),
        "Seconds with no task after which the model and its KV cache are released (the next task reloads it; -1: never)."),
])


@dataclass(frozen=True)
class SlotOptions:
    ctx_size: int  # 0: the model's training context
    n_parallel: int  # -np, auto resolved
    kv_unified: bool  # -kvu, its default resolved
    batch_size: int  # logical (bounds /infill's context)
    ubatch_size: int  # tokens in one forward pass
    n_predict: int
    keep: int
    n_predict_max: int
    context_shift: bool
    ctx_checkpoints: int
    cache_prompt: bool
    slot_prompt_similarity: float
    sleep_idle_seconds: float


def build(values: dict[str, Any]) -> SlotOptions:
    """SlotOptions from the options' values: -np -1 is 4 slots sharing a unified KV cache."""
    if values["cache_reuse"] > 0:
        note("--cache-reuse: cached prefixes are reused; chunks after the first difference are recomputed")
    parallel, kv_unified = values["parallel"], values["kv_unified"]
    return SlotOptions(
        ctx_size=values["ctx_size"], n_parallel=4 if parallel < 0 else parallel,
        kv_unified=(parallel < 0) if kv_unified is None else kv_unified,
        batch_size=values["batch_size"], ubatch_size=values["ubatch_size"], n_predict=values["n_predict"], keep=values["keep"],
        n_predict_max=values["n_predict_max"], context_shift=values["context_shift"], cache_prompt=values["cache_prompt"],
        ctx_checkpoints=values["ctx_checkpoints"],
        slot_prompt_similarity=values["slot_prompt_similarity"], sleep_idle_seconds=values["sleep_idle_seconds"],
    )
