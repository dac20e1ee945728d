"""LoRA adapters (GGUF files with `general.type` = adapter, `adapter.type` = lora), as
llama.cpp loads and applies them (src/llama-adapter.cpp, build_lora_mm in llama-graph.cpp).

An adapter holds, for some weights W (n_out, n_in) of the base model, a pair of tensors
`<name>.lora_a` A (rank, n_in) and `<name>.lora_b` B (n_out, rank). Every matmul with W then
becomes

    y = x W^T + ((x A^T) B^T) * scale,   scale = user_scale * alpha / rank  (alpha = 0: user_scale)

with the adapter's product added before W's bias, one adapter after the other. For the token
embedding (n_vocab, n_embd) the pair is stored the other way round, A (n_vocab, rank) and
B (n_embd, rank), and a token's row gains A[token] B^T * scale (llama.cpp's build_inp_embd). `alpha` is the
file's `adapter.lora.alpha`; rank is B's inner size. The products run through the same
numerics as the base matmuls (A and B are ordinary GGUF tensors, usually F32 or F16).
`<name>_norm.weight` tensors are ignored, as llama.cpp does.

A set of adapters with their scales (`LoraSet`) is what a forward pass applies; the engine
never mixes two sets in one batch, and a slot's cached K/V are only reused by a task with the
same set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import Embedding, Linear, WeightLoader


@dataclass
class LoraWeight:
    a: Linear | Embedding  # (rank, n_in): x -> x A^T; token_embd: rows (n_vocab, rank)
    b: Linear  # (n_out, rank); token_embd: (n_embd, rank)

    @property
    def rank(self) -> int:
        return self.b.n_in

    def scale(self, alpha: float, user_scale: float) -> float:
        """llama_adapter_lora_weight::get_scale (in float32, as there)."""
        if alpha:
            return float(np.float32(user_scale) * np.float32(alpha) / np.float32(self.rank))
        return float(np.float32(user_scale))


@dataclass
class LoraAdapter:
    path: str
    alpha: float
    weights: dict[str, LoraWeight]  # base tensor name (e.g. "blk.0.attn_q.weight") -> A, B
    task_name: str = ""
    prompt_prefix: str = ""


@dataclass(frozen=True)
class LoraSet:
    """The adapters a forward pass applies, with their user scales (zero-scale ones left out)."""

    active: tuple[tuple[LoraAdapter, float], ...] = field(default_factory=tuple)

    def __bool__(self) -> bool:
        return bool(self.active)


NO_LORA = LoraSet()


def load_lora(path: str | os.PathLike[str], base: GGUFFile, quantized: bool, threads: int = 2) -> LoraAdapter:
    """Read and validate an adapter for the model in `base`; ModelLoadError on any mismatch."""
    g = GGUFFile(path)
    md = g.metadata
    p = g.path
    if md.get("general.type") != "adapter":
        raise ModelLoadError(p, f"expect general.type to be 'adapter', but got: {md.get('general.type', '')!r}")
    if md.get("adapter.type") != "lora":
        raise ModelLoadError(p, f"expect adapter.type to be 'lora', but got: {md.get('adapter.type', '')!r}")
    if g.architecture != base.architecture:
        raise ModelLoadError(p, f"model arch ({base.architecture}) and LoRA arch ({g.architecture}) mismatch")
    pairs: dict[str, list[str]] = {}
    for name in g.tensors:
        if name.endswith(".lora_a") or name.endswith(".lora_b"):
            pairs.setdefault(name[:-7], []).append(name[-6:])
        elif not name.endswith("_norm.weight"):
            raise ModelLoadError(p, f"LoRA tensor {name!r} has unexpected suffix")
    loader = WeightLoader(g, threads=threads, quantized=quantized)
    weights: dict[str, LoraWeight] = {}
    try:
        for name, parts in sorted(pairs.items()):
            if sorted(parts) != ["lora_a", "lora_b"]:
                raise ModelLoadError(p, f"LoRA tensor pair for {name!r} is missing one component")
            if name not in base.tensors:
                raise ModelLoadError(p, f"LoRA tensor {name!r} does not exist in base model (hint: maybe wrong base model?)")
            weights[name] = _pair(g, loader, name, base.tensors[name].shape)
    finally:
        loader.finish()
    return LoraAdapter(
        path=str(path),
        alpha=float(md.get("adapter.lora.alpha", 0.0) or 0.0),
        weights=weights,
        task_name=str(md.get("adapter.lora.task_name", "") or ""),
        prompt_prefix=str(md.get("adapter.lora.prompt_prefix", "") or ""),
    )


def _pair(g: GGUFFile, loader: WeightLoader, name: str, shape: tuple[int, ...]) -> LoraWeight:
    """The A, B pair of base weight `name` (NumPy shape `shape`), shapes checked as llama.cpp."""
    p = g.path
    a_shape, b_shape = g.tensors[name + ".lora_a"].shape, g.tensors[name + ".lora_b"].shape
    bad = ModelLoadError(p, f"tensor {name!r} has incorrect shape (hint: maybe wrong base model?)")
    if len(shape) != 2 or len(a_shape) != 2 or len(b_shape) != 2:
        raise bad
    if name == "token_embd.weight":  # A (n_vocab, rank), B (n_embd, rank)
        if a_shape[0] != shape[0] or b_shape[0] != shape[1] or a_shape[1] != b_shape[1]:
            raise bad
        return LoraWeight(loader.embedding(name + ".lora_a"), loader.linear(name, b_shape[1], shape[1], weight=".lora_b"))
    if a_shape[1] != shape[1] or b_shape[0] != shape[0]:
        raise bad
    if a_shape[0] != b_shape[1]:
        raise ModelLoadError(p, 'lora_a tensor is not transposed (hint: adapter from "finetune" example is no longer supported)')
    rank, n_in, n_out = a_shape[0], shape[1], shape[0]
    return LoraWeight(loader.linear(name, n_in, rank, weight=".lora_a"), loader.linear(name, rank, n_out, weight=".lora_b"))
