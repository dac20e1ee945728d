"""Opening a model for a CLI command: resolve the path, load weights and tokenizer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gguf import GGMLQuantizationType

from llamacli.core.model.state.lora import LoraAdapter, load_lora
from llamacli.core.model.load import load_model
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.loaded import LoadedModel, load
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.text.tokenizer import load_tokenizer
from llamacli.options.model_path import resolve_model
from llamacli.recent_models import remember


@dataclass
class OpenedModel(LoadedModel):
    """A loaded model with the LoRA adapters a command asked for."""

    loras: list[tuple[LoraAdapter, float]] = field(default_factory=list)  # adapters, initial scales


def weight_types(g: GGUFFile) -> set[GGMLQuantizationType]:
    """The ggml types of a model's matrices (its tensors of two dimensions or more)."""
    return {t.qtype for t in g.tensors.values() if len(t.shape) >= 2}


def prepare_kernels(numerics: str, qtypes: Iterable[GGMLQuantizationType] | None = None, model: DecoderModel | None = None) -> None:
    """Compile the kernels that weights of these types need (None: every type), and the
    model's one-token step (without a model: every kind), now if this machine has not cached
    them, saying so on stderr."""
    if numerics != "ggml":
        return
    from llamacli.core.model.kernels import warmup as kernel_warmup

    qtypes = None if qtypes is None else set(qtypes)
    steps = None if model is None else model.kernel_kinds()
    if kernel_warmup.needs_compile(qtypes, steps):
        import sys

        print("llama: compiling the matmul kernels for this CPU (once; later runs load them from the cache)", file=sys.stderr, flush=True)
    kernel_warmup.warmup(qtypes, steps)


def open_model(
    path: str | None,
    numerics: str = "ggml",
    threads: int = -1,
    batch_invariant: bool = False,
    loras: list[tuple[str, float]] | None = None,
    chat_template: str | None = None,
    use_jinja: bool = True,
    with_template: bool = True,
) -> OpenedModel:
    """Load the model at `path` (or the demo model) with its tokenizer, chat template (or
    --chat-template's name / source), ModelInfo and LoRA adapters ((path, scale) pairs)."""
    resolved = resolve_model(path)
    m = load(resolved, numerics, threads, batch_invariant, chat_template, use_jinja, with_template)
    if path:
        remember(resolved)  # for `llama list`
    prepare_kernels(numerics, weight_types(m.gguf), m.model)
    q = m.model.precision.quantized_weights
    adapters = [(load_lora(p, m.gguf, quantized=q), scale) for p, scale in loras or []]
    return OpenedModel(m.model, m.gguf, m.tokenizer, m.info, m.stats, adapters)


def open_draft(path: str, rt: OpenedModel, numerics: str = "ggml", threads: int = -1) -> DecoderModel:
    """The -md draft model, checked to share the target's vocabulary."""
    from llamacli.core.speculative.draft_model import check_compatible

    resolved = resolve_model(path)
    model, g, _ = load_model(resolved, numerics=numerics, threads=threads)
    check_compatible(rt.tokenizer.vocab, load_tokenizer(g.metadata).vocab, resolved)
    return model
