"""Which ggml type each tensor gets: a port of src/llama-quant.cpp (llama.cpp b-0.3.36 vendored in
llama-cpp-python) — `tensor_allows_quantization`, `llama_tensor_get_type(_impl)`,
`tensor_type_fallback` — for the file types we write, with
--tensor-type overrides, COPY (only_copy) and the rules an importance matrix changes.

The mixture rules count attn_v / ffn_down tensors as they are met, so tensors must be visited in
llama.cpp's order: `tensor_order` sorts them as llama_model_loader's weights_map does (layer
number of `blk.N.`, -1 for others, then name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from . import ftypes as FT

_UNQUANTIZED = (QT.F32, QT.F16, QT.BF16, QT.F64, QT.I8, QT.I16, QT.I32, QT.I64)
_BLK = re.compile(r"blk\.(\d+)\.")


def is_quantized(t: QT) -> bool:
    """ggml_is_quantized: every type but the float and integer ones."""
    return t not in _UNQUANTIZED


def _layer(name: str) -> int:
    """sscanf(name, "blk.%d.") or -1 (at the start of the name only, as sscanf)."""
    m = _BLK.match(name)
    return int(m.group(1)) if m else -1


def tensor_order(names: list[str]) -> list[str]:
    """llama_model_loader::weight_name_comparer: by layer number (-1 first), then by name."""
    return sorted(names, key=lambda n: (_layer(n), n.encode()))


# tensor_get_category (first match wins; order matters: "attn_qkv" before "attn_q", ...)
OUTPUT, TOKEN_EMBD, ATTN_QKV, ATTN_KV_B, ATTN_V, ATTN_K, ATTN_Q, ATTN_OUTPUT = range(8)
FFN_UP, FFN_GATE, FFN_DOWN, OTHER = range(8, 12)
_CATEGORY_SUBSTRINGS = (
    ("attn_qkv.weight", ATTN_QKV), ("attn_kv_b.weight", ATTN_KV_B), ("attn_v.weight", ATTN_V),
    ("attn_k.weight", ATTN_K), ("attn_q.weight", ATTN_Q), ("attn_output.weight", ATTN_OUTPUT),
    ("ffn_up", FFN_UP), ("ffn_gate", FFN_GATE), ("ffn_down", FFN_DOWN),
)


def category(name: str) -> int:
    if name == "output.weight":
        return OUTPUT
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return TOKEN_EMBD
    for sub, cat in _CATEGORY_SUBSTRINGS:
        if sub in name:
            return cat
    return OTHER


def _is_attn_v(cat: int) -> bool:
    return cat in (ATTN_V, ATTN_QKV, ATTN_KV_B)


# Substrings that keep a tensor unquantized (tensor_allows_quantization), beyond the rules below.
_NEVER_QUANTIZE = (
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
    "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
    "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
    "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
    "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
    "mm.a.code_embd",
)


def n_dims(shape: tuple[int, ...]) -> int:
    """ggml_n_dims: the number of dimensions once trailing size-1 dims (ggml order) are dropped.
    `shape` is numpy order, so those are the leading ones."""
    dims = list(shape)
    while len(dims) > 1 and dims[0] == 1:
        dims.pop(0)
    return max(1, len(dims))


def allows_quantization(name: str, shape: tuple[int, ...], leave_output: bool) -> bool:
    """tensor_allows_quantization: 2-D/3-D tensors named *weight, minus norms, routers, small
    special tensors, positional embeddings (and output.weight with --leave-output-tensor)."""
    if n_dims(shape) < 2 or not name.endswith("weight"):
        return False
    if leave_output and name == "output.weight":
        return False
    if name in ("position_embd.weight", "token_types.weight"):
        return False
    return not any(s in name for s in _NEVER_QUANTIZE)


@dataclass(frozen=True)
class ModelInfo:
    """The hyperparameters the rules look at."""

    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_expert: int
    is_70b: bool  # llama.cpp's LLM_TYPE_70B (llama, 80 layers, GQA)

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @staticmethod
    def from_metadata(meta: dict[str, Any], tensor_names: list[str]) -> ModelInfo:
        arch = str(meta.get("general.architecture", ""))

        def first(key: str, default: int) -> int:
            v = meta.get(f"{arch}.{key}", default)
            if hasattr(v, "__len__") and not isinstance(v, str):  # per-layer arrays: layer 0
                v = v[0] if len(v) else default
            return int(v)

        layers = [_layer(n) for n in tensor_names]
        n_layer = first("block_count", max(layers, default=-1) + 1)
        n_head = first("attention.head_count", 0)
        n_head_kv = first("attention.head_count_kv", n_head)
        n_expert = first("expert_count", 0)
        is_70b = arch == "llama" and n_layer == 80 and n_head != n_head_kv
        return ModelInfo(arch, n_layer, n_head, n_head_kv, n_expert, is_70b)


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    # C integer division and remainder (truncation toward zero)
    d8 = n_layers // 8
    r = i_layer - d8
    rem = r - int(r / 3) * 3
    return i_layer < d8 or i_layer >= 7 * n_layers // 8 or rem == 2


# tensor_type_fallback: the type for a row length the target's block does not divide
_FALLBACK = {
    **dict.fromkeys((QT.IQ1_S, QT.IQ1_M, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.IQ4_XS), QT.IQ4_NL),
    **dict.fromkeys((QT.Q2_K, QT.Q3_K, QT.TQ1_0, QT.TQ2_0), QT.Q4_0),
    QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0,
}
# the 1-2 bit IQ file types, whose mixture rules are their own branch of llama_tensor_get_type_impl
_IQ12 = (FT.IQ2_XXS, FT.IQ2_XS, FT.IQ1_S, FT.IQ2_S, FT.IQ2_M, FT.IQ1_M)
_IQ2_SM = (FT.IQ2_S, FT.IQ2_M)


@dataclass
class TypeChooser:
    """llama_tensor_get_type with its counters (quantize_state_impl). Call `choose` once per
    tensor, in `tensor_order`."""

    model: ModelInfo
    ftype: FT.FileType
    pure: bool = False
    output_tensor_type: QT | None = None
    token_embedding_type: QT | None = None
    leave_output: bool = False
    tensor_names: list[str] = field(default_factory=list)
    tensor_types: tuple[tuple[str, QT], ...] = ()  # --tensor-type: (regex, type), first match wins
    has_imatrix: bool = False
    only_copy: bool = False
    n_fallback: int = 0

    def __post_init__(self) -> None:
        cats = [category(n) for n in self.tensor_names]
        self.n_attention_wv = sum(_is_attn_v(c) for c in cats)
        self.has_tied_embeddings = OUTPUT not in cats
        self.n_ffn_down = self.n_ffn_gate = self.n_ffn_up = self.model.n_layer
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0
        self._patterns = [(re.compile(p), t) for p, t in self.tensor_types]  # std::regex_search

    def allows(self, name: str, shape: tuple[int, ...]) -> bool:
        """tensor_allows_quantization with these options (nothing under COPY)."""
        return not self.only_copy and allows_quantization(name, shape, self.leave_output)

    def _manual(self, name: str) -> QT | None:
        return next((t for p, t in self._patterns if p.search(name)), None)

    def choose(self, name: str, shape: tuple[int, ...], cur_type: QT) -> tuple[QT, bool]:
        """(the tensor's new type, whether the row-length fallback changed it)."""
        if not self.allows(name, shape):
            return cur_type, False
        cat = category(name)
        # per_layer_token_embd follows --token-embedding-type unless a --tensor-type names it
        if self.token_embedding_type is not None and cat == TOKEN_EMBD and not (
            name == "per_layer_token_embd.weight" and self._manual(name) is not None
        ):
            return self.token_embedding_type, False
        if self.output_tensor_type is not None and cat == OUTPUT:
            return self.output_tensor_type, False
        new_type = self.ftype.default_type
        if not is_quantized(new_type):
            return new_type, False
        manual = self._manual(name)
        if manual is not None:
            new_type = manual
        elif not self.pure:
            new_type = self._impl(new_type, name, shape, cat)
        return self._fallback(new_type, shape)

    def _fallback(self, target: QT, shape: tuple[int, ...]) -> tuple[QT, bool]:
        """tensor_type_fallback: a row length that the type's block does not divide."""
        ncols = shape[-1]
        block = GGML_QUANT_SIZES[target][0]
        if ncols % block == 0:
            return target, False
        self.n_fallback += 1
        ret = _FALLBACK.get(target, target)
        if ncols % GGML_QUANT_SIZES[ret][0]:
            ret = QT.F16  # not even a multiple of 32
        return ret, True

    def _layer_info(self, i: int, n: int, name: str) -> tuple[int, int]:
        if self.model.n_expert > 1:
            # experts of a layer are not consecutive: take the layer from the name
            layer = _layer(name)
            if layer < 0 or layer >= n:
                raise ValueError(f"cannot determine the layer of tensor {name!r}")
            return layer, n
        return i, n

    def _impl(self, new_type: QT, name: str, shape: tuple[int, ...], cat: int) -> QT:
        """llama_tensor_get_type_impl for our file types."""
        m, ft = self.model, self.ftype.id
        falcon = m.arch == "falcon"
        if cat == OUTPUT or (self.has_tied_embeddings and cat == TOKEN_EMBD):
            if self.output_tensor_type is not None:
                return self.output_tensor_type
            nx = shape[-1]
            if ft == FT.MXFP4_MOE or falcon or nx % GGML_QUANT_SIZES[new_type][0]:
                return QT.Q8_0
            if ft in _IQ12 or ft == FT.IQ3_XXS:
                return QT.Q5_K
            return new_type if new_type == QT.Q8_0 else QT.Q6_K
        if ft == FT.MXFP4_MOE:
            # expert tensors (3-D, more than one matrix) MXFP4, the rest Q8_0
            experts = len(shape) >= 3 and shape[-3] > 1
            if m.arch == "bailingmoe3" and cat not in (FFN_UP, FFN_GATE, FFN_DOWN):
                experts = False
            return QT.MXFP4 if experts else QT.Q8_0
        if cat == TOKEN_EMBD:
            if ft in (FT.IQ2_XXS, FT.IQ2_XS, FT.IQ1_S, FT.IQ1_M):
                return QT.Q2_K
            if ft in (*_IQ2_SM, FT.IQ3_XXS):
                return QT.IQ3_S
            return QT.Q4_K if ft in (FT.TQ1_0, FT.TQ2_0) else new_type
        if ft in _IQ12:
            return self._impl_iq12(new_type, cat)
        if _is_attn_v(cat):
            if ft == FT.Q2_K:
                new_type = QT.Q4_K if m.n_gqa >= 4 else QT.Q3_K
            elif ft == FT.Q2_K_S:
                if m.n_gqa >= 4:
                    new_type = QT.Q4_K
            elif ft == FT.IQ3_XXS:
                new_type = QT.Q4_K if m.n_gqa >= 4 else QT.IQ3_XXS if self.has_imatrix else QT.IQ3_S
            elif ft in (FT.IQ3_XS, FT.IQ3_S) and m.n_gqa >= 4 or ft == FT.IQ3_M:
                new_type = QT.Q4_K
            elif ft == FT.Q3_K_M:
                new_type = QT.Q5_K if self.i_attention_wv < 2 else QT.Q4_K
            elif ft == FT.Q3_K_L:
                new_type = QT.Q5_K
            elif ft in (FT.Q4_K_M, FT.Q5_K_M) and _use_more_bits(self.i_attention_wv, self.n_attention_wv):
                new_type = QT.Q6_K
            elif ft in (FT.IQ4_NL, FT.IQ4_XS) and m.n_gqa >= 4:
                new_type = QT.Q5_K
            elif ft == FT.Q4_K_S and self.i_attention_wv < 4:
                new_type = QT.Q5_K
            if m.is_70b and new_type in (QT.Q3_K, QT.Q4_K):
                new_type = QT.Q5_K
            if m.n_expert == 8:
                new_type = QT.Q8_0
            self.i_attention_wv += 1
        elif cat == ATTN_K:
            if m.n_expert == 8:
                new_type = QT.Q8_0
            elif ft == FT.IQ3_XS:
                new_type = QT.IQ3_XXS
            elif ft == FT.IQ3_XXS:
                new_type = QT.IQ2_S
        elif cat == ATTN_Q:
            if ft == FT.IQ3_XS:
                new_type = QT.IQ3_XXS
            elif ft == FT.IQ3_XXS:
                new_type = QT.IQ2_S
        elif cat == FFN_DOWN:
            i_layer, n_layer = self._layer_info(self.i_ffn_down, self.n_ffn_down, name)
            if ft == FT.Q2_K:
                new_type = QT.Q3_K
            elif ft == FT.Q2_K_S:
                if i_layer < n_layer // 8:
                    new_type = QT.Q4_K
            elif ft == FT.IQ3_XXS and not self.has_imatrix:
                new_type = QT.Q4_K if i_layer < n_layer // 8 else QT.Q3_K
            elif ft == FT.Q3_K_M:
                if i_layer < n_layer // 16:
                    new_type = QT.Q5_K
                elif not falcon or _use_more_bits(i_layer, n_layer):
                    new_type = QT.Q4_K
                else:
                    new_type = QT.Q3_K
            elif ft == FT.IQ3_M and (i_layer < n_layer // 8 or (m.n_expert == 8 and _use_more_bits(i_layer, n_layer))):
                new_type = QT.Q4_K
            elif ft == FT.Q3_K_L:
                new_type = QT.Q4_K if falcon else QT.Q5_K
            elif ft == FT.Q4_K_M:
                if falcon:
                    new_type = (QT.Q6_K if i_layer < n_layer // 16
                                else QT.Q5_K if _use_more_bits(i_layer, n_layer) else QT.Q4_K)
                elif _use_more_bits(i_layer, n_layer):
                    new_type = QT.Q6_K
            elif ft == FT.Q5_K_M and _use_more_bits(i_layer, n_layer):
                new_type = QT.Q6_K
            elif ft == FT.Q4_K_S and not falcon and i_layer < n_layer // 8:
                new_type = QT.Q5_K
            elif i_layer < n_layer // 8 and ft in (FT.IQ4_NL, FT.IQ4_XS) and not self.has_imatrix:
                new_type = QT.Q5_K
            elif ft in (FT.Q4_0, FT.Q5_0) and self.has_imatrix and i_layer < n_layer // 8:
                # llama.cpp's guard for the first ffn_down layers, only with an imatrix
                new_type = QT.Q4_1 if ft == FT.Q4_0 else QT.Q5_1
            self.i_ffn_down += 1
        elif cat == ATTN_OUTPUT:
            if not falcon:
                if m.n_expert == 8:
                    if ft in (FT.Q2_K, FT.IQ3_XS, FT.IQ3_XXS, FT.Q3_K_S, FT.Q3_K_M, FT.IQ4_NL, FT.Q4_K_S, FT.Q4_K_M,
                              FT.IQ3_S, FT.IQ3_M, FT.IQ4_XS):
                        new_type = QT.Q5_K
                elif ft == FT.Q2_K:
                    new_type = QT.Q3_K
                elif ft == FT.IQ3_XXS:
                    new_type = QT.IQ3_S
                elif ft in (FT.Q3_K_M, FT.IQ3_M):
                    new_type = QT.Q4_K
                elif ft == FT.Q3_K_L:
                    new_type = QT.Q5_K
            elif ft == FT.Q3_K_L:
                new_type = QT.Q4_K
        # (llama.cpp's ATTENTION_QKV branch here is unreachable: attn_qkv is attn_v-like above)
        elif cat == FFN_GATE:
            i_layer, n_layer = self._layer_info(self.i_ffn_gate, self.n_ffn_gate, name)
            new_type = self._iq3_xs_middle(new_type, i_layer, n_layer)
            self.i_ffn_gate += 1
        elif cat == FFN_UP:
            i_layer, n_layer = self._layer_info(self.i_ffn_up, self.n_ffn_up, name)
            new_type = self._iq3_xs_middle(new_type, i_layer, n_layer)
            self.i_ffn_up += 1
        return new_type

    def _iq3_xs_middle(self, new_type: QT, i_layer: int, n_layer: int) -> QT:
        """ffn_gate / ffn_up of IQ3_XS: IQ3_XXS outside the first and last eighth of the layers."""
        if self.ftype.id == FT.IQ3_XS and n_layer // 8 <= i_layer < 7 * n_layer // 8:
            return QT.IQ3_XXS
        return new_type

    def _impl_iq12(self, new_type: QT, cat: int) -> QT:
        """The IQ1_S / IQ1_M / IQ2_* branch of llama_tensor_get_type_impl (no per-layer lookup:
        ffn_down counts its tensors even in MoE models)."""
        m, ft = self.model, self.ftype.id
        low = QT.IQ3_S if ft in _IQ2_SM else QT.Q2_K
        if _is_attn_v(cat):
            new_type = QT.Q4_K if m.n_gqa >= 4 or m.n_expert >= 4 else low
            self.i_attention_wv += 1
        elif m.n_expert == 8 and cat == ATTN_K:
            new_type = QT.Q4_K
        elif cat == FFN_DOWN:
            if self.i_ffn_down < self.n_ffn_down // 8:
                new_type = low
            self.i_ffn_down += 1
        elif cat == ATTN_OUTPUT:
            if m.n_expert == 8:
                new_type = QT.Q5_K
            elif ft in (FT.IQ1_S, FT.IQ1_M):
                new_type = QT.IQ2_XXS
            elif ft in _IQ2_SM:
                new_type = QT.IQ3_S
        return new_type
