"""Opening a model for a CLI command: resolve the path, load weights and tokenizer."""

from __future__ import annotations

from dataclasses import dataclass, field

from llamacli.core.gguf_file import GGUFFile
from llamacli.core.lora import LoraAdapter, load_lora
from llamacli.core.models.load import LoadStats, load_model
from llamacli.core.models.base import DecoderModel
from llamacli.core.tokenizer import Tokenizer, load_tokenizer
from llamacli.model_path import resolve_model


@dataclass
class Runtime:
    path: str
    model: DecoderModel
    gguf: GGUFFile
    tokenizer: Tokenizer
    stats: LoadStats
    loras: list[tuple[LoraAdapter, float]] = field(default_factory=list)  # adapters, initial scales


def prepare_kernels(numerics: str) -> None:
    """Compile the matmul kernels now if this machine has none cached, saying so on stderr."""
    if numerics != "ggml":
        return
    from llamacli.core import qmm

    if qmm.needs_compile():
        import sys

        print("llama: compiling the matmul kernels for this CPU (once; later runs load them from the cache)", file=sys.stderr, flush=True)
    qmm.warmup()


def open_model(
    path: str | None,
    numerics: str = "ggml",
    threads: int = -1,
    batch_invariant: bool = False,
    loras: list[tuple[str, float]] | None = None,
) -> Runtime:
    """Load the model at `path` (or the demo model) with its tokenizer and LoRA adapters
    ((path, scale) pairs)."""
    resolved = resolve_model(path)
    prepare_kernels(numerics)
    model, g, stats = load_model(resolved, numerics=numerics, threads=threads, batch_invariant=batch_invariant)
    tok = load_tokenizer(g.metadata)
    q = model.precision.quantized_weights
    adapters = [(load_lora(p, g, quantized=q), scale) for p, scale in loras or []]
    return Runtime(resolved, model, g, tok, stats, adapters)


def open_draft(path: str, rt: Runtime, numerics: str = "ggml", threads: int = -1) -> DecoderModel:
    """The -md draft model, checked to share the target's vocabulary."""
    from llamacli.core.speculative.draft_model import check_compatible

    resolved = resolve_model(path)
    model, g, _ = load_model(resolved, numerics=numerics, threads=threads)
    check_compatible(rt.tokenizer.vocab, load_tokenizer(g.metadata).vocab, resolved)
    return model
