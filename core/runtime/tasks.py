"""Tasks the drivers submit to the engine, and the results it streams back."""

from __future__ import annotations

import itertools
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from llamacli.core.multimodal.prompt import MediaSpan
from llamacli.core.text.grammar.spec import GrammarSpec
from llamacli.core.text.reasoning.budget import ReasoningBudgetSpec
from llamacli.core.runtime.result_stream import ResultStream
from llamacli.core.sampling import SamplingParams
from llamacli.core.speculative.config import DraftParams

if TYPE_CHECKING:
    from llamacli.core.text.grammar.matcher import CompiledGrammar

_ids = itertools.count()


def next_task_id() -> int:
    return next(_ids)


@dataclass
class TaskParams:
    """Per-request options (llama-server's /completion names and defaults)."""

    n_predict: int = -1  # -1: until EOS or the context is full
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: list[str] = field(default_factory=list)
    cache_prompt: bool = True
    n_keep: int = 0  # tokens of the prompt kept by a context shift (-1: all)
    n_probs: int = 0
    post_sampling_probs: bool = False
    ignore_eos: bool = False
    id_slot: int = -1  # -1: the engine chooses
    t_max_predict_ms: float = 0.0  # 0: no time limit on generation
    grammar: GrammarSpec | None = None  # constrained output (core/text/grammar): GBNF, JSON schema, ...
    timings_per_token: bool = False  # every Partial carries the timings so far
    return_progress: bool = False  # Partials with `progress` while the prompt is evaluated
    preserved_tokens: tuple[str, ...] = ()  # control tokens kept as text (tool-call markers)
    lora: tuple[float, ...] | None = None  # scale per loaded LoRA adapter; None: the engine's current ones
    reasoning: ReasoningBudgetSpec | None = None  # thinking budget / reasoning_end control
    speculative: DraftParams | None = None  # speculative.n_max/n_min/p_min (None: the engine's)


@dataclass
class Timings:
    """llama-server's `timings` object."""

    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    cache_n: int = 0
    draft_n: int = 0  # speculative decoding: draft tokens verified
    draft_n_accepted: int = 0  # and accepted

    def to_dict(self) -> dict[str, float]:
        d: dict[str, float] = asdict(self)
        if not self.draft_n:  # llama-server reports them only when it speculated
            del d["draft_n"], d["draft_n_accepted"]
        d["prompt_per_token_ms"] = self.prompt_ms / self.prompt_n if self.prompt_n else 0.0
        d["prompt_per_second"] = 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms else 0.0
        # the first token comes from the prompt's last batch: the rate is over the decode steps
        steps = self.predicted_n - 1
        d["predicted_per_token_ms"] = self.predicted_ms / steps if steps > 0 else 0.0
        d["predicted_per_second"] = 1e3 * steps / self.predicted_ms if steps > 0 and self.predicted_ms else 0.0
        return d


@dataclass
class TokenProb:
    id: int
    prob: float  # probability (post_sampling_probs) or natural-log probability


@dataclass
class Partial:
    """One streamed step: text that is now final (may be "" while a stop string or a UTF-8
    character is pending) and the token(s) it came from."""

    content: str
    tokens: list[int]
    probs: list[list[TokenProb]] = field(default_factory=list)  # per token: top n_probs
    chosen_probs: list[float] = field(default_factory=list)  # per token: its own probability
    timings: Timings | None = None  # with TaskParams.timings_per_token: the timings so far
    progress: dict[str, float] | None = None  # prompt progress: total, cache, processed, time_ms


@dataclass
class Final:
    """The end of a task: the whole answer and why it stopped."""

    content: str
    tokens: list[int]
    prompt_tokens: list[int]
    stop_type: str  # "eos", "limit", "word", "cancelled", "error"
    stopping_word: str = ""
    truncated: bool = False  # the context filled up (or shifted) during generation
    tokens_cached: int = 0  # prompt tokens reused from the slot's cache
    n_ctx_tokens: int = 0  # tokens in the slot's cache when the task ended (llama-server's "tokens_cached")
    timings: Timings = field(default_factory=Timings)
    id_slot: int = -1
    error: Exception | None = None
    embedding: Any = None  # np.ndarray for embedding tasks

    @property
    def finish_reason(self) -> str:
        """OpenAI's name for why generation stopped."""
        return {"eos": "stop", "word": "stop", "limit": "length"}.get(self.stop_type, self.stop_type)


Result = Partial | Final


@dataclass
class Task:
    """A completion (or embedding) request for the engine."""

    prompt_tokens: list[int]  # media positions hold negative placeholders (multimodal/prompt.py)
    params: TaskParams = field(default_factory=TaskParams)
    media: tuple[MediaSpan, ...] = ()  # the prompt's images: embeddings and where they sit
    kind: str = "completion"  # "completion" or "embedding"
    pooling: str = "mean"  # for embeddings
    id: int = field(default_factory=next_task_id)
    results: ResultStream[Result] = field(default_factory=ResultStream)
    cancelled: threading.Event = field(default_factory=threading.Event)
    end_reasoning: threading.Event = field(default_factory=threading.Event)
    # params.grammar compiled at submit (or by the driver after Engine.prepare), never on the loop
    compiled_grammar: CompiledGrammar | None = field(default=None, repr=False, compare=False)

    def cancel(self) -> None:
        """Ask the engine to stop this task; its stream ends with a `cancelled` Final."""
        self.cancelled.set()

    def request_reasoning_end(self) -> bool:
        """Ask the engine to end the thinking block now (params.reasoning.control must be on):
        it forces the end tag as if the budget ran out. False when the task is not armed."""
        if self.params.reasoning is None or not self.params.reasoning.control:
            return False
        self.end_reasoning.set()
        return True
