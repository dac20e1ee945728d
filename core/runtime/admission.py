"""Admission (phase 1 of `Engine.step`, and the checks of `Engine.submit`): whether a task
can run at all, which idle slot a queued task goes to (the longest cached prefix, else the
least recently used, among the slots whose cache was made with the task's LoRA scales), and
a slot taking its task: the KV sequence cut to the reused prefix, the completion's sampler,
decoder, stop matcher, grammar state, reasoning budget and drafter.

Plain functions: `check_task` reads only (but keeps the task's compiled grammar on it);
`place` reads the slots; `start_task` writes the slot, its cache sequence and the
speculator's per-slot state.
"""

from __future__ import annotations

from dataclasses import replace

from llamacli.core.errors import ContextOverflow, InvalidRequest
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.multimodal.prompt import snap_out_of_media
from llamacli.core.runtime.engine_config import EngineConfig
from llamacli.core.runtime.results import send_progress
from llamacli.core.runtime.scheduler import IdleSlot, choose_slot
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.stop import StopMatcher
from llamacli.core.runtime.tasks import Task
from llamacli.core.sampling import Sampler
from llamacli.core.speculative.speculator import Speculator
from llamacli.core.text.grammar import GrammarConstraint, compile_grammar
from llamacli.core.text.reasoning import ReasoningBudget
from llamacli.core.text.tokenizer import IncrementalDecoder, Tokenizer
from llamacli.core.text.tool_calls.tokens import preserving


def check_task(
    task: Task, model: DecoderModel, tokenizer: Tokenizer, config: EngineConfig, n_ctx_slot: int, n_adapters: int
) -> None:
    """Raise InvalidRequest (or ContextOverflow, GrammarError) for a task the engine cannot run."""
    if not task.prompt_tokens:
        raise InvalidRequest("the prompt is empty")
    if task.params.id_slot >= config.n_parallel:
        raise InvalidRequest(
            f"id_slot {task.params.id_slot} does not exist (slots: {config.n_parallel})"
        )
    if len(task.prompt_tokens) >= n_ctx_slot:
        raise ContextOverflow(len(task.prompt_tokens), n_ctx_slot)
    if task.kind == "completion" and not model.has_lm_head:
        raise InvalidRequest(f"this model ({model.args.arch}) is an encoder: it computes embeddings, not text")
    model.check_input(len(task.prompt_tokens), config.n_batch)
    if task.media:
        check_media(task, config)
    if task.kind == "embedding" and task.pooling == "rank" and not model.n_cls_out:
        raise InvalidRequest("rank pooling needs a model with a classification head (cls, cls.output)")
    if task.params.sampling is not None:
        task.params.sampling.validate(config.sampling_limits)
    if task.params.lora is not None and len(task.params.lora) != n_adapters:
        raise InvalidRequest(f"lora: {len(task.params.lora)} scales given for {n_adapters} adapters")
    if task.params.grammar is not None and task.kind == "completion" and task.compiled_grammar is None:
        task.compiled_grammar = compile_grammar(tokenizer, task.params.grammar, config.grammar_limits)  # GrammarError


def check_media(task: Task, config: EngineConfig) -> None:
    """A prompt with images: each non-causal image fits one batch; no drafting or context shift
    with media (llama-server disables both when a projector is loaded)."""
    for sp in task.media:
        if sp.non_causal and sp.end - sp.start > config.n_batch:
            raise InvalidRequest(f"an image takes {sp.end - sp.start} tokens in one batch: raise -b/--batch-size (now {config.n_batch})")
    if config.speculative.enabled:
        raise InvalidRequest("speculative decoding is not supported with media in the prompt")
    if config.context_shift:
        raise InvalidRequest("context shift is not supported with media in the prompt")


def task_lora(task: Task, lora_scales: tuple[float, ...]) -> tuple[float, ...]:
    """The LoRA scales a task runs with: its own, else the engine's current ones."""
    return lora_scales if task.params.lora is None else tuple(task.params.lora)


def place(task: Task, slots: list[Slot], similarity: float, lora: tuple[float, ...]) -> tuple[Slot, int] | None:
    """The idle slot a queued task goes to (the one it names, if any) and the length of the
    prefix its cache shares with the prompt; None while no such slot is idle."""
    idle = [s for s in slots if not s.busy]
    if task.params.id_slot >= 0:
        idle = [s for s in idle if s.id == task.params.id_slot]
    if not idle:
        return None
    # a cache made with other adapters is no prefix of this task's (llama-server clears it)
    cand = [IdleSlot(s.id, s.cached if s.lora == lora else (), s.last_used) for s in idle]
    sid, lcp = choose_slot(cand, task.prompt_tokens, similarity)
    return slots[sid], lcp


def start_task(
    s: Slot, task: Task, lcp: int, order: int, cache: KVCache, tokenizer: Tokenizer, spec: Speculator | None,
    n_batch: int = 512,
) -> None:
    """The slot takes the task (arrival number `order`), reusing up to lcp cached tokens; its
    prompt is evaluated n_batch tokens at a time."""
    p = task.params
    n_reuse = lcp if (p.cache_prompt and task.kind == "completion") else 0
    n_reuse = min(n_reuse, len(task.prompt_tokens) - 1)  # evaluate at least one token
    n_reuse = snap_out_of_media(n_reuse, task.media)  # an image is reused whole or not at all
    # a recurrent state keeps its whole sequence, or goes back to a context checkpoint, or to
    # nothing (llama-server: the prompt is then processed again from its start)
    n_reuse = cache.reusable(s.id, n_reuse)
    cache.truncate(s.id, n_reuse)
    if task.kind == "completion":
        cache.plan_checkpoints(s.id, len(task.prompt_tokens), n_reuse, n_batch)
    s.assign(task, n_reuse, order)  # the slot owns the task: an error below fails it
    if task.kind != "completion":
        return
    sampling = replace(p.sampling, ignore_eos=p.sampling.ignore_eos or p.ignore_eos)
    s.sampler = Sampler.for_tokenizer(sampling, tokenizer, s.n_ctx)
    s.sampler.accept_prompt([t for t in task.prompt_tokens if t >= 0] if task.media else task.prompt_tokens)
    s.decoder = IncrementalDecoder(preserving(tokenizer, p.preserved_tokens))
    s.stop = StopMatcher(list(p.stop))
    if p.grammar is not None:
        s.grammar = GrammarConstraint(task.compiled_grammar or compile_grammar(tokenizer, p.grammar))
    if p.reasoning is not None and p.reasoning.active:
        s.budget = ReasoningBudget.for_tokenizer(p.reasoning, tokenizer)
    if spec is not None:
        spec.begin(s.id, task.prompt_tokens)
    if p.return_progress:
        send_progress(s)  # 0% before any prompt token is evaluated
