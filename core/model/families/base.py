"""The decoder-only transformer shared by every architecture module.

An architecture module supplies `ModelArgs` (from GGUF metadata) and, where it differs from
the Llama block, overrides one of the small hooks below (embedding, attention block, FFN block).
The forward runs over a unified `Batch`: all tokens of all sequences go through each matmul
together; attention is grouped (every one-token sequence in one batched matmul, each longer
sequence chunk on its own), so there is no Python loop over tokens or heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.state.batch import Batch
from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.delta_net import DeltaNetWeights
from llamacli.core.model.families.mamba2 import Mamba2Weights
from llamacli.core.model.families.moe import MoEArgs, MoEWeights, gated_ffn, load_moe, moe_ffn
from llamacli.core.model.families.shortconv import ShortConvWeights
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.precision import Precision
from llamacli.core.model.families.decode_step import DecodeStep
from llamacli.core.model.weights.tensors import FusedLinear, Linear, WeightLoader, fuse_f32


@dataclass
class ModelArgs:
    """Hyperparameters common to the decoder families we run."""

    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    head_dim_v: int
    n_ff: int
    norm_eps: float
    n_ctx_train: int
    rope: K.RopeConfig
    rope_swa: K.RopeConfig | None = None  # rope of sliding-window layers, if different
    sliding_window: int | None = None
    swa_layers: tuple[bool, ...] = ()  # per layer: uses the sliding window (if any) and rope_swa
    attn_scale: float = 0.0  # multiplies q.k; 0 -> 1/sqrt(head_dim)
    embed_scale: float | None = None  # multiplies token embeddings (Gemma: sqrt(n_embd))
    attn_softcap: float | None = None
    final_softcap: float | None = None
    residual_scale: float = 0.0  # multiplies each block's output before it joins the residual (Granite; 0: none)
    logit_scale: float = 0.0  # the logits are multiplied by float32 1 / logit_scale (Granite; 0: none)
    activation: str = "silu"  # gated FFN activation: "silu", "gelu" or (experts) "swiglu_oai"
    scale_q: bool = False  # apply attn_scale to Q before attention (Gemma) instead of to Q.K
    moe: MoEArgs | None = None  # a mixture-of-experts FFN in every layer instead of a dense one
    n_dense_lead: int = 0  # with moe: the first layers keep a dense FFN (leading_dense_block_count)
    attn_temp: tuple[float, int] | None = None  # (scale, floor): Q times K.attn_temperature (mistral3)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.attn_scale and self.head_dim > 0:  # a head_dim below 1 is refused by check()
            self.attn_scale = 1.0 / math.sqrt(self.head_dim)
        if not self.swa_layers:
            self.swa_layers = (False,) * self.n_layer

    def layer_window(self, il: int) -> int | None:
        return self.sliding_window if self.swa_layers[il] else None

    def check(self, path: str) -> None:
        """ModelLoadError (naming the file and the key) for hyperparameters that cannot describe
        a model: what each key holds alone is checked as it is read (md_int, md_float); here,
        how they fit together."""
        a = self.arch
        for name, v, key in (("n_embd", self.n_embd, "embedding_length"), ("n_layer", self.n_layer, "block_count"),
                             ("n_head", self.n_head, "attention.head_count"),
                             ("n_head_kv", self.n_head_kv, "attention.head_count_kv"),
                             ("head_dim", self.head_dim, "attention.key_length"),
                             ("head_dim_v", self.head_dim_v, "attention.value_length"),
                             ("n_ff", self.n_ff, "feed_forward_length"), ("n_ctx_train", self.n_ctx_train, "context_length"),
                             ("n_vocab", self.n_vocab, "vocab_size")):
            if v < 1:
                raise ModelLoadError(path, f"{a}.{key} gives {name} = {v}: it must be at least 1")
        if self.n_head % self.n_head_kv:
            raise ModelLoadError(path, f"{a}.attention.head_count ({self.n_head}) is not a multiple of "
                                       f"{a}.attention.head_count_kv ({self.n_head_kv})")
        n_rot = self.rope.n_dims
        if not 0 < n_rot <= self.head_dim or n_rot % 2:
            raise ModelLoadError(path, f"{a}.rope.dimension_count is {n_rot}: it must be even and between 2 and the "
                                       f"head size ({self.head_dim})")
        if len(self.swa_layers) != self.n_layer:
            raise ModelLoadError(path, f"{a}.attention.sliding_window_pattern has {len(self.swa_layers)} entries for "
                                       f"{self.n_layer} layers")


INT_MAX = 2**31 - 1  # llama.cpp reads these keys as 32-bit integers


def md_get(md: dict[str, Any], path: str, key: str, default: Any = None, required: bool = True) -> Any:
    """Metadata value or a clear error naming the missing key."""
    if key in md:
        return md[key]
    if default is not None or not required:
        return default
    raise ModelLoadError(path, f"missing metadata key {key!r}")


def _type_name(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"an array of {v.size} {v.dtype} values"
    if isinstance(v, list):
        return f"an array of {len(v)} values"
    return f"{type(v).__name__} {v!r}"


def _uniform(md: dict[str, Any], path: str, key: str, v: Any) -> Any:
    """A per-layer array whose values are all the same, as that one value (others refused)."""
    if isinstance(v, np.ndarray) and v.size >= 1 and v.ndim == 1:
        if not np.all(v == v[0]):
            raise ModelLoadError(path, f"metadata key {key!r} has a different value per layer: not supported")
        return v[0].item()
    return v


def md_int(md: dict[str, Any], path: str, key: str, default: int | None = None, lo: int = 1, hi: int = INT_MAX) -> int:
    """An integer hyperparameter within [lo, hi]; any other type (a float, a string, a bool) or
    value is a ModelLoadError naming the file and the key. A per-layer array is taken when uniform."""
    v = _uniform(md, path, key, md[key]) if key in md else md_get(md, path, key, default)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ModelLoadError(path, f"metadata key {key!r} must be an integer, got {_type_name(v)}")
    if not lo <= int(v) <= hi:
        raise ModelLoadError(path, f"metadata key {key!r} is {int(v)}: it must be between {lo} and {hi}")
    return int(v)


def expert_counts(g: GGUFFile) -> tuple[int, int]:
    """A mixture of experts' `{arch}.expert_count` and `expert_used_count` (1 .. expert_count)."""
    md, p, arch = g.metadata, g.path, g.architecture
    n_expert = md_int(md, p, f"{arch}.expert_count")
    n_used = md_int(md, p, f"{arch}.expert_used_count")
    if n_used > n_expert:
        raise ModelLoadError(p, f"{arch}.expert_used_count ({n_used}) is above {arch}.expert_count ({n_expert})")
    return n_expert, n_used


def md_float(md: dict[str, Any], path: str, key: str, default: float | None = None, positive: bool = True) -> float:
    """A finite number (> 0 when `positive`, else >= 0); a ModelLoadError naming the key otherwise."""
    v = _uniform(md, path, key, md[key]) if key in md else md_get(md, path, key, default)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ModelLoadError(path, f"metadata key {key!r} must be a number, got {_type_name(v)}")
    f = float(v)
    if not math.isfinite(f) or f < 0 or (positive and f == 0):
        raise ModelLoadError(path, f"metadata key {key!r} is {f}: it must be a finite number "
                                   f"{'above' if positive else 'of at least'} 0")
    return f


def swa_pattern(md: dict[str, Any], path: str, key: str, n_layer: int, default: int) -> tuple[bool, ...]:
    """Which layers use the sliding window (llama.cpp's load_swa_pattern): the key as a per-layer
    array of booleans, or a period n (`default` when absent): layer il slides when il % n < n - 1
    (every layer when n is 0)."""
    pattern = md.get(key, default)
    if isinstance(pattern, (list, np.ndarray)):
        return tuple(bool(b) for b in np.asarray(pattern).reshape(-1)[:n_layer])
    n = md_int(md, path, key, default, lo=0)
    return tuple(n == 0 or il % n < n - 1 for il in range(n_layer))


@dataclass
class LayerWeights:
    attn_norm: np.ndarray
    wq: Linear | None  # the attention's; None on a recurrent layer (hybrid families: `mixer`)
    wk: Linear | None
    wv: Linear | None
    wo: Linear | None
    ffn_norm: np.ndarray
    w_gate: Linear | None = None  # the dense FFN (None where the layer has experts instead)
    w_up: Linear | None = None
    w_down: Linear | None = None
    moe: MoEWeights | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffn_norm: np.ndarray | None = None
    attn_sinks: np.ndarray | None = None  # (n_head,): per-head logits in the softmax (gpt-oss)
    qkv: FusedLinear | None = None  # wq|wk|wv side by side when their inputs round alike
    gate_up: FusedLinear | None = None
    mixer: Mamba2Weights | DeltaNetWeights | ShortConvWeights | None = None  # a recurrent layer's mixer in place of attention
    out_scale: np.float32 | None = None  # the layer's output times this (`layer_output_scale`: gemma4)


@dataclass
class AttnGroup:
    """Sequences attended together: S sequences with Tq query tokens each.

    tok_idx (S, Tq): indices into the batch; q_pos (S, Tq): their positions; see_upto (S, Tq):
    the last key position each query sees when attention is non-causal (None: causal).
    """

    seq_ids: np.ndarray
    tok_idx: np.ndarray
    q_pos: np.ndarray
    masks: dict[int | None, tuple[int, np.ndarray]] = field(default_factory=dict)
    see_upto: np.ndarray | None = None

    def pairs(self) -> int:
        """About how many (query, key) products the group's attention computes: each query
        sees the keys up to its position (or up to see_upto)."""
        return int((self.q_pos if self.see_upto is None else self.see_upto).sum()) + self.q_pos.size

    def mask(self, window: int | None) -> tuple[int, np.ndarray]:
        """(k_start, additive mask (S, Tq, L)) for a layer with this window; cached per group."""
        if window not in self.masks:
            q_max = int(self.q_pos.max() if self.see_upto is None else self.see_upto.max())
            k_start = 0 if window is None else max(0, int(self.q_pos.min()) - window + 1)
            n_keys = q_max + 1 - k_start
            self.masks[window] = (k_start, K.attention_mask(self.q_pos, k_start, n_keys, window, self.see_upto))
        return self.masks[window]


# Query rows per attention group for long chunks: with causal masking, a chunk of 128
# queries only needs keys up to its own last position, so splitting a 512-token prefill
# skips ~40% of the score matrix (the masked upper triangle) and its softmax.
QUERY_BLOCK = 128


def plan_attention(batch: Batch, per_sequence: bool = False, singles_per_group: int = 0) -> list[AttnGroup]:
    """Group the batch's tokens for attention.

    Fast: the one-token sequences in batched groups (keys padded to the longest; at most
    singles_per_group sequences each when > 0, so that groups can run side by side), each
    longer sequence alone. per_sequence: every sequence alone, over exactly its own keys, so
    its result does not depend on the others (padding keys changes how BLAS sums). Long
    chunks are split into blocks of QUERY_BLOCK queries (their own, batch-independent shapes).
    """
    if batch.n_tokens == 1:  # one sequence decoding (the common step): the group the code below forms
        return [AttnGroup(batch.seq_ids[:1], np.zeros((1, 1), dtype=np.intp), batch.positions[:1, None])]
    seqs, counts = np.unique(batch.seq_ids, return_counts=True)
    groups: list[AttnGroup] = []
    singles = seqs[counts == 1] if not per_sequence else seqs[:0]
    if singles.size:
        pos_in_batch = np.flatnonzero(np.isin(batch.seq_ids, singles))
        order = np.argsort(batch.seq_ids[pos_in_batch], kind="stable")
        every = pos_in_batch[order]
        step = singles_per_group if singles_per_group > 0 else every.shape[0]
        for a in range(0, every.shape[0], step):
            idx = every[a : a + step]
            groups.append(AttnGroup(batch.seq_ids[idx], idx[:, None], batch.positions[idx][:, None]))
    for s in seqs if per_sequence else seqs[counts > 1]:
        idx = np.flatnonzero(batch.seq_ids == s)
        for a in range(0, idx.shape[0], QUERY_BLOCK):
            blk = idx[a : a + QUERY_BLOCK]
            groups.append(AttnGroup(np.array([s]), blk[None, :], batch.positions[blk][None, :]))
    if batch.see_upto is not None:  # non-causal rows (media) see beyond their own position
        for g in groups:
            g.see_upto = batch.see_upto[g.tok_idx]
    # the costliest first: threads that take the groups in turn (threads.run_each) then end
    # together (a prompt's causal blocks cost 1, 3, 5, 7 (x 64 keys per query): in that order
    # two threads end at 6 and 10, in this one at 8 and 8)
    return sorted(groups, key=lambda g: -g.pairs())


class DecoderModel:
    """Llama-style decoder. Subclasses override hooks for their architecture's differences."""

    arch = ""
    #: optional per-arch tensors; missing required ones raise ModelLoadError at load
    has_qk_norm = False
    has_post_norms = False
    has_attn_sinks = False
    #: V RMS-normed per head without a weight before the cache (gemma4)
    v_norm = False
    #: the pre-FFN norm's tensor (gpt-oss names it `post_attention_norm`)
    ffn_norm_name = "ffn_norm"
    #: the final norm's tensor (lfm2 names it `token_embd_norm`)
    output_norm_name = "output_norm"
    #: decoders attend causally over a KV cache, so a prompt may be split across batches;
    #: encoders (bert) see the whole sequence and need it in one batch
    causal = True
    has_lm_head = True  # encoders have none: they only serve embeddings
    n_cls_out = 0  # outputs of a classification head (rerankers); 0: none
    can_shift = True  # a full sequence may shift its cache (M-RoPE may not: llama.cpp's get_can_shift)
    mrope = False  # media tokens take M-RoPE positions (Batch.rope_pos; core/multimodal/mrope.py)
    #: embed_scale also multiplies given embeddings (media rows): llama.cpp's build_inp_embd
    #: scales every input row by `embedding_scale` (Granite); Gemma's scale is the tokens' only
    scale_media_embd = False

    def check_input(self, n_tokens: int, n_batch: int) -> None:
        """Raise InvalidRequest when a sequence of n_tokens cannot be evaluated (encoders)."""

    def classify(self, pooled: np.ndarray) -> np.ndarray:
        """The classification head (rank pooling) over pooled rows (n, n_embd)."""
        raise InvalidRequest(f"{self.args.arch} has no classification head: it cannot rerank")

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        """Hyperparameters from the file's metadata (each architecture module defines it)."""
        raise ModelLoadError(g.path, "DecoderModel is abstract")

    def __init__(self, args: ModelArgs, gguf: GGUFFile, precision: Precision, loader: WeightLoader) -> None:
        self.args = args
        self.path = gguf.path
        self.precision = precision
        self.tok_embd = loader.embedding("token_embd.weight")
        self.output_norm = loader.vector(self.output_norm_name + ".weight", args.n_embd)
        self.output = loader.output("output.weight", tied_to=self.tok_embd)
        self.layers = [self._load_layer(loader, il) for il in range(args.n_layer)]
        a = args
        self._rope = a.rope
        self._rope_swa = a.rope_swa or a.rope
        # one-token steps through one compiled call per layer where the model allows
        # (core/model/families/decode_step.py); False: always the operations one by one
        self.fused_decode = True
        self._decode_step: DecodeStep | None = None
        self._decode_step_planned = False

    # ---- loading -------------------------------------------------------------------------
    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        p = f"blk.{il}."
        a = self.args
        lw = LayerWeights(
            attn_norm=ld.vector(p + "attn_norm.weight"),
            wq=ld.linear(p + "attn_q", a.n_embd, a.n_head * a.head_dim),
            wk=ld.linear(p + "attn_k", a.n_embd, a.n_head_kv * a.head_dim),
            wv=ld.linear(p + "attn_v", a.n_embd, a.n_head_kv * a.head_dim_v),
            wo=ld.linear(p + "attn_output", a.n_head * a.head_dim_v, a.n_embd),
            ffn_norm=ld.vector(p + self.ffn_norm_name + ".weight"),
        )
        self._load_ffn(ld, il, lw)
        if self.has_qk_norm:
            lw.q_norm = ld.vector(p + "attn_q_norm.weight", a.head_dim)
            lw.k_norm = ld.vector(p + "attn_k_norm.weight", a.head_dim)
        if self.has_attn_sinks:
            lw.attn_sinks = ld.vector(p + "attn_sinks.weight", a.n_head)
        if self.has_post_norms:
            lw.post_attn_norm = ld.vector(p + "post_attention_norm.weight")
            lw.post_ffn_norm = ld.vector(p + "post_ffw_norm.weight")
        return lw

    def _load_ffn(self, ld: WeightLoader, il: int, lw: LayerWeights) -> None:
        """Layer il's feed-forward weights into lw: the experts, or the dense gated FFN."""
        a = self.args
        p = f"blk.{il}."
        if a.moe is not None and il >= a.n_dense_lead:
            lw.moe = load_moe(ld, p, a.n_embd, a.moe)
        else:
            lw.w_gate = ld.linear(p + "ffn_gate", a.n_embd, a.n_ff)
            lw.w_up = ld.linear(p + "ffn_up", a.n_embd, a.n_ff)
            lw.w_down = ld.linear(p + "ffn_down", a.n_ff, a.n_embd)

    def _fuse_layers(self) -> None:
        """After loading (f32 numerics): fuse Q/K/V and gate/up into one matmul each. The ggml
        numerics keep the GGUF blocks and share the activation's quantization instead."""
        if self.precision.quantized_weights:
            return
        for lw in self.layers:
            if lw.wq is not None and lw.wk is not None and lw.wv is not None:
                lw.qkv = fuse_f32([lw.wq, lw.wk, lw.wv])
            if lw.w_gate is not None and lw.w_up is not None:
                lw.gate_up = fuse_f32([lw.w_gate, lw.w_up])

    def new_cache(self, n_seq: int, n_ctx: int) -> KVCache:
        a = self.args
        return KVCache(a.n_layer, n_seq, n_ctx, a.n_head_kv, a.head_dim, a.head_dim_v)

    def attn_shape(self, il: int) -> tuple[int, int, int]:
        """Layer il's (KV heads, head size of Q and K, head size of V): the model's, or the
        layer's own where a family's layers differ (gemma4)."""
        a = self.args
        return a.n_head_kv, a.head_dim, a.head_dim_v

    # ---- hooks ---------------------------------------------------------------------------
    def ropes(self, n_ctx: int) -> tuple[K.RopeConfig, K.RopeConfig]:
        """(global, sliding-window) rope for a cache of n_ctx cells per sequence (Phi-3's
        LongRoPE picks its frequency factors by the context size)."""
        return self._rope, self._rope_swa

    def rope_angles(self, batch: Batch, rope: K.RopeConfig) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin (T, n_dims/2) of the batch's tokens under `rope` (M-RoPE: qwen2vl)."""
        return K.rope_cos_sin(batch.positions, rope)

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        """(T,) token ids -> (T, n_embd)."""
        x = self.tok_embd.rows(tokens)
        self.precision.add_lora_rows(tokens, "token_embd.weight", x)
        if self.args.embed_scale is not None:
            x = x * np.float32(self.args.embed_scale)
        return x

    def embed_batch(self, batch: Batch) -> np.ndarray:
        """The batch's input rows (T, n_embd): token embeddings, and the given embeddings for
        media rows (negative tokens) as they are (llama.cpp scales only token embeddings), or
        where `scale_media_embd` times embed_scale too."""
        if batch.embd is None:
            return self.embed(batch.tokens)
        if batch.embd.shape[1] != self.args.n_embd:
            raise ValueError(f"embeddings of width {batch.embd.shape[1]} for a model of n_embd {self.args.n_embd}")
        media = batch.tokens < 0
        x = batch.embd.copy()
        if self.scale_media_embd and self.args.embed_scale is not None:
            x = x * np.float32(self.args.embed_scale)  # (the token rows are replaced below)
        if not media.all():
            x[~media] = self.embed(batch.tokens[~media])
        return x

    def ffn(self, lw: LayerWeights, h: np.ndarray) -> np.ndarray:
        """Gated FFN: down(act(gate(h)) * up(h)), or the mixture of experts; h (T, n_embd)."""
        pr = self.precision
        if lw.moe is not None:
            assert self.args.moe is not None
            return moe_ffn(pr, lw.moe, h, self.args.moe, self.args.activation)
        assert lw.w_gate is not None and lw.w_up is not None and lw.w_down is not None
        return gated_ffn(pr, h, lw.w_gate, lw.w_up, lw.w_down, lw.gate_up, self.args.activation)

    # ---- forward -------------------------------------------------------------------------
    def forward(self, batch: Batch, cache: KVCache, return_hidden: bool = False) -> np.ndarray:
        """Run the batch, update the cache; logits (n_out, n_vocab) for batch.output tokens,
        or the final-normed hidden states (n_out, n_embd) when return_hidden."""
        h = self.forward_hidden(batch, cache)
        return h if return_hidden else self.logits(h)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """Vocabulary logits (n, n_vocab) of final-normed hidden states (n, n_embd)."""
        if hidden.shape[0] == 0:
            return np.zeros((0, self.args.n_vocab), dtype=np.float32)
        out = self.precision.output(hidden, self.output)
        if self.args.final_softcap:
            out = K.softcap(out, self.args.final_softcap)
        if self.args.logit_scale:  # ggml_scale by the float32 reciprocal
            out = out * (np.float32(1.0) / np.float32(self.args.logit_scale))
        return out

    def forward_hidden(self, batch: Batch, cache: KVCache) -> np.ndarray:
        """Run the batch, update the cache; final-normed hidden states of the output rows."""
        a = self.args
        if batch.n_tokens == 0:
            return np.zeros((0, a.n_embd), dtype=np.float32)
        if int(batch.positions.max()) >= cache.n_ctx:
            raise ValueError(f"position {int(batch.positions.max())} is beyond the cache size {cache.n_ctx}")
        self.precision.begin_batch(batch)
        rope, rope_swa = self.ropes(cache.n_ctx)
        cs_global = self.rope_angles(batch, rope)
        cs_swa = cs_global if rope_swa is rope else self.rope_angles(batch, rope_swa)
        x = self.embed_batch(batch)  # (T, n_embd)
        step = self._one_token_step(batch)
        if step is not None:
            x = step.run(self, x, batch, cache, cs_global, cs_swa)
        else:
            groups = plan_attention(batch, self.precision.batch_invariant, self.precision.singles_per_group)
        for il, lw in enumerate(self.layers if step is None else ()):
            cos, sin = cs_swa if a.swa_layers[il] else cs_global
            x = self.block(il, lw, x, batch, cache, groups, cos, sin)
        cache.commit(batch.seq_ids, batch.positions)
        return K.rms_norm(x[batch.output], self.output_norm, a.norm_eps)  # (n_out, n_embd)

    def block(self, il: int, lw: LayerWeights, x: np.ndarray, batch: Batch, cache: KVCache, groups: list[AttnGroup],
              cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """Layer il on the residual stream x (T, n_embd): the attention block, then the FFN
        block, each normed first and added to x, then the layer's output scale if any; returns
        the new x."""
        a = self.args
        h = K.rms_norm(x, lw.attn_norm, a.norm_eps)
        h = self.attention(il, lw, h, batch, cache, groups, cos, sin)
        if lw.post_attn_norm is not None:
            h = K.rms_norm(h, lw.post_attn_norm, a.norm_eps)
        x = x + self._residual(h)
        h = K.rms_norm(x, lw.ffn_norm, a.norm_eps)
        h = self.ffn(lw, h)
        if lw.post_ffn_norm is not None:
            h = K.rms_norm(h, lw.post_ffn_norm, a.norm_eps)
        x = x + self._residual(h)
        return x if lw.out_scale is None else x * lw.out_scale  # ggml_mul by a 1-element tensor

    def _residual(self, h: np.ndarray) -> np.ndarray:
        """A block's output (the mixer's or the FFN's) as it joins the residual stream: times
        residual_scale where the family has one (ggml_scale, then ggml_add)."""
        rs = self.args.residual_scale
        return h * np.float32(rs) if rs else h

    def _one_token_step(self, batch: Batch) -> DecodeStep | None:
        """The compiled decode step, for a batch of one token per sequence (one sequence, or an
        aggregate step of several: DecodeStep.takes) when the model allows it and no LoRA
        adapter is active."""
        if not self.fused_decode or self.precision.lora or batch.embd is not None:
            return None
        step = self._planned_step()
        return step if step is not None and step.takes(self, batch) else None

    def _planned_step(self) -> DecodeStep | None:
        if not self._decode_step_planned:
            self._decode_step = DecodeStep.plan(self)
            self._decode_step_planned = True
        return self._decode_step

    def one_token_step_kind(self) -> str | None:
        """The kind of compiled one-token step this model runs ("gelu" or "silu", the FFN's
        gate; "moe" with experts: core/model/kernels/warmup.py compiles it), or None where it
        runs none."""
        step = self._planned_step()
        return None if step is None else step.kind

    def kernel_kinds(self) -> list[str]:
        """The model-specific kernels the warmup compiles (core/model/kernels/warmup.py): the
        kind of its one-token step, if any."""
        return [k for k in [self.one_token_step_kind()] if k]

    def shift_cache(self, cache: KVCache, seq: int, n_keep: int, n_discard: int) -> None:
        """Context shift: drop cells [n_keep, n_keep + n_discard) of a sequence and move the
        rest down, rotating their keys back by n_discard positions (as llama.cpp's K-shift)."""
        n = int(cache.lengths[seq])
        src = slice(n_keep + n_discard, n)
        dst = slice(n_keep, n - n_discard)
        m = n - n_keep - n_discard
        if m <= 0:
            cache.truncate(seq, n_keep)
            return
        delta = np.full(m, -n_discard, dtype=np.int64)
        ropes = self.ropes(cache.n_ctx)
        for il in range(self.args.n_layer):
            rope = self.shift_rope(il, ropes)
            cos, sin = K.rope_cos_sin(delta, rope)
            k = cache.k[il][seq, :, src].transpose(1, 0, 2)  # (m, Hkv, D)
            k = self.precision.kv(K.apply_rope(k, cos, sin, rope.n_dims, rope.neox))
            cache.k[il][seq, :, dst] = k.transpose(1, 0, 2)
            cache.v[il][seq, :, dst] = cache.v[il][seq, :, src]
        cache.lengths[seq] = n - n_discard

    def shift_rope(self, il: int, ropes: tuple[K.RopeConfig, K.RopeConfig]) -> K.RopeConfig:
        """The rope a context shift turns layer il's cached keys by, of ropes() (global,
        sliding-window): the one the layer's forward uses (smollm3: llama.cpp's own choice)."""
        return ropes[1] if self.args.swa_layers[il] else ropes[0]

    def attention(
        self,
        il: int,
        lw: LayerWeights,
        h: np.ndarray,
        batch: Batch,
        cache: KVCache,
        groups: list[AttnGroup],
        cos: np.ndarray,
        sin: np.ndarray,
    ) -> np.ndarray:
        """Self-attention of layer il over h (T, n_embd); writes this batch's K/V to the cache.
        Without a V matrix (gemma4) V is K's projection, before K's norm and rope; `v_norm`:
        V RMS-normed per head without a weight."""
        a = self.args
        T = h.shape[0]
        n_kv, d, d_v = self.attn_shape(il)
        assert lw.wq is not None and lw.wk is not None and lw.wo is not None
        q, k, *v = self.precision.linears(h, [lw.wq, lw.wk] + ([] if lw.wv is None else [lw.wv]), lw.qkv)
        v3 = (v[0] if v else k).reshape(T, n_kv, d_v)
        if self.v_norm:
            v3 = K.rms_norm(v3, None, a.norm_eps)
        out = self.attend(il, lw, q.reshape(T, a.n_head, d), k.reshape(T, n_kv, d), v3, batch, cache, groups, cos, sin)
        return self.precision.linear(out.reshape(T, a.n_head * d_v), lw.wo)

    def attend(self, il: int, lw: LayerWeights, q: np.ndarray, k: np.ndarray, v: np.ndarray, batch: Batch,
               cache: KVCache, groups: list[AttnGroup], cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """The attention of layer il from its projections q (T, n_head, D), k and v (T,
        n_head_kv, .) (D: head_dim, or the layer's own: gemma4): Q/K norms, rope, this batch's K/V into the cache, then attention over the
        cache; returns (T, n_head, head_dim_v) before the output projection."""
        a = self.args
        pr = self.precision
        T = q.shape[0]
        if lw.q_norm is not None:  # per head, or over all of q / k (olmoe): as long as the norm's weight
            q = K.rms_norm(q.reshape(T, -1, lw.q_norm.shape[0]), lw.q_norm, a.norm_eps).reshape(q.shape)
            assert lw.k_norm is not None
            k = K.rms_norm(k.reshape(T, -1, lw.k_norm.shape[0]), lw.k_norm, a.norm_eps).reshape(k.shape)
        rope = self._rope_swa if a.swa_layers[il] else self._rope  # its n_dims and neox: as ropes() gives
        q = pr.rope(q, cos, sin, rope)
        k = pr.rope(k, cos, sin, rope)
        if a.attn_temp is not None:
            q = q * K.attn_temperature(batch.positions, *a.attn_temp)[:, None, None]
        scale = a.attn_scale
        if a.scale_q:
            q = q * np.float32(scale)
            scale = 1.0
        cache.write(il, batch.seq_ids, batch.positions, pr.kv(k), pr.kv(v))
        out = np.empty((T, q.shape[1], v.shape[2]), dtype=np.float32)  # the layer's own shape (gemma4)
        window = a.layer_window(il)

        def attend(g: AttnGroup) -> None:  # groups are independent: they may run side by side
            k_start, mask = g.mask(window)
            kc, vc = cache.view(il, g.seq_ids, k_start, k_start + mask.shape[-1])
            qg = q[g.tok_idx].transpose(0, 2, 1, 3)  # (S, H, Tq, D)
            o = pr.attention(qg, kc, vc, mask, scale, a.attn_softcap, lw.attn_sinks)  # (S, H, Tq, Dv)
            out[g.tok_idx] = o.transpose(0, 2, 1, 3)

        pr.run_each(attend, groups)
        return out
