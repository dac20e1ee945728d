"""`qwen35` (Qwen3.5 / Qwen3.6 dense: 0.8B to 27B; llama.cpp's LLM_ARCH_QWEN35,
src/models/qwen35.cpp): a hybrid of gated delta-net layers (families/delta_net.py) and gated
full attention, each followed by a SiLU-gated FFN. Its two relatives, on the same layers, are
here too: `qwen35moe` (experts and a gated shared expert in place of the FFN) and `qwen3next`
(those, with NeoX rope and Qwen3-Next's tensor layout).

- A layer is recurrent per `attention.recurrent_layers` (an array of booleans) or else unless
  (il + 1) is a multiple of `full_attention_interval` (4 when absent): three delta-net layers,
  then one attention layer.
- The attention layers: `attn_q` gives per head the query then a gate of the same size; Q and K
  RMS-normed per head; IMRoPE (ggml_rope_multi, GGML_ROPE_TYPE_IMROPE) over the first
  `rope.dimension_count` dims of a head, `rope.dimension_sections` interleaved; a text token's
  four positions are (p, p, p, 0), as llama.cpp gives them; the attention output times
  sigmoid(gate) before `attn_output`.
- The pre-FFN norm is stored as `post_attention_norm.weight`.
- `nextn_predict_layers` multi-token-prediction layers at the end of `block_count` are skipped,
  as llama.cpp's main graph skips them.

The recurrent states live in the cache (state/recurrent.HybridCache): a prompt reuses a cached
prefix whole or from a context checkpoint, slot files carry the states, speculative steps roll
back (families/hybrid.py). llama.cpp cannot shift a cache of four positions per token
(get_can_shift), so neither do we: a full sequence ends.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.families.base import AttnGroup, DecoderModel, LayerWeights, ModelArgs, expert_counts, md_int
from llamacli.core.model.families.delta_net import DeltaNetArgs, DeltaNetWeights, delta_net_mixer, load_delta_net
from llamacli.core.model.families.hybrid import HybridModel
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.moe import MoEArgs
from llamacli.core.model.families.qwen2vl import rope_sections
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm.router import sigmoid_rows
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


def read_delta_net_args(g: GGUFFile, grouped: bool) -> DeltaNetArgs:
    md, p, a = g.metadata, g.path, g.architecture
    m = DeltaNetArgs(md_int(md, p, f"{a}.ssm.conv_kernel"), md_int(md, p, f"{a}.ssm.inner_size"),
                     md_int(md, p, f"{a}.ssm.state_size"), md_int(md, p, f"{a}.ssm.time_step_rank"),
                     md_int(md, p, f"{a}.ssm.group_count"), grouped)
    m.check(p, a)
    return m


def read_hybrid_args(g: GGUFFile, grouped: bool) -> ModelArgs:
    """What qwen35, qwen35moe and qwen3next read alike: the common keys (NeoX rope), the nextn
    layers left out, the delta net's keys, which layers are recurrent."""
    md, p, arch = g.metadata, g.path, g.architecture
    a = common_args(g, neox=True)
    n_nextn = md_int(md, p, f"{arch}.nextn_predict_layers", 0, lo=0, hi=a.n_layer - 1)
    n_layer = a.n_layer - n_nextn
    a = replace(a, n_layer=n_layer, swa_layers=())
    a.extra.update(delta_net=read_delta_net_args(g, grouped), recurrent=recurrent_layers(g, n_layer))
    return a


def read_shared_moe(g: GGUFFile, a: ModelArgs) -> MoEArgs:
    """qwen35moe's and qwen3next's experts: softmax router, top `expert_used_count` normalised,
    experts of `expert_feed_forward_length` rows, a shared FFN of
    `expert_shared_feed_forward_length` rows (else `feed_forward_length`) behind its sigmoid gate."""
    md, p, arch = g.metadata, g.path, g.architecture
    n_expert, n_used = expert_counts(g)
    n_ff_exp = md_int(md, p, f"{arch}.expert_feed_forward_length", max(a.n_ff // n_used, 1))
    n_ff_shexp = md_int(md, p, f"{arch}.expert_shared_feed_forward_length", a.n_ff)
    return MoEArgs(n_expert, n_used, n_ff_exp, norm_weights=True, n_shared=1, n_ff_shared=n_ff_shexp, shared_gate=True)


def recurrent_layers(g: GGUFFile, n_layer: int) -> tuple[bool, ...]:
    """Which layers are delta-net layers (llama.cpp's is_recr): `attention.recurrent_layers`,
    else every layer but each `full_attention_interval`-th."""
    md, p, a = g.metadata, g.path, g.architecture
    key = f"{a}.attention.recurrent_layers"
    if key in md:
        v = np.asarray(md[key]).reshape(-1)
        if v.size < n_layer or v.dtype.kind not in "biu":
            raise ModelLoadError(p, f"metadata key {key!r} must hold a boolean for each of the {n_layer} layers")
        return tuple(bool(x) for x in v[:n_layer])
    n = md_int(md, p, f"{a}.full_attention_interval", 4)
    return tuple((il + 1) % n != 0 for il in range(n_layer))


class Qwen35Model(HybridModel):
    arch = "qwen35"
    has_qk_norm = True
    ffn_norm_name = "post_attention_norm"
    can_shift = False  # IMRoPE: four positions per token (llama_kv_cache::get_can_shift)

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = read_hybrid_args(g, grouped=False)
        a.extra["rope_sections"] = rope_sections(g)
        return a

    @property
    def delta_net(self) -> DeltaNetArgs:
        m: DeltaNetArgs = self.args.extra["delta_net"]
        return m

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        a = self.args
        p = f"blk.{il}."
        attn_norm = ld.vector(p + "attn_norm.weight", a.n_embd)
        ffn_norm = ld.vector(p + self.ffn_norm_name + ".weight", a.n_embd)
        if self.recurrent[il]:
            lw = LayerWeights(attn_norm, None, None, None, None, ffn_norm,
                              mixer=load_delta_net(ld, p, a.n_embd, self.delta_net))
        else:  # attn_q: per head the query, then its gate
            lw = LayerWeights(attn_norm, wq=ld.linear(p + "attn_q", a.n_embd, 2 * a.n_head * a.head_dim),
                              wk=ld.linear(p + "attn_k", a.n_embd, a.n_head_kv * a.head_dim),
                              wv=ld.linear(p + "attn_v", a.n_embd, a.n_head_kv * a.head_dim_v),
                              wo=ld.linear(p + "attn_output", a.n_head * a.head_dim_v, a.n_embd), ffn_norm=ffn_norm,
                              q_norm=ld.vector(p + "attn_q_norm.weight", a.head_dim),
                              k_norm=ld.vector(p + "attn_k_norm.weight", a.head_dim))
        self._load_ffn(ld, il, lw)
        return lw

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        m = self.delta_net
        return (m.conv_dim, m.d_conv - 1), (m.n_v_head, m.d_state, m.d_state)

    def recurrent_mixer(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: HybridCache) -> np.ndarray:
        assert isinstance(lw.mixer, DeltaNetWeights)
        return delta_net_mixer(self.precision, lw.mixer, self.delta_net, h, batch, cache, il, self.args.norm_eps)

    def rope_angles(self, batch: Batch, rope: K.RopeConfig) -> tuple[np.ndarray, np.ndarray]:
        pos4 = batch.rope_pos
        if pos4 is None:  # text: (p, p, p, 0)
            p = batch.positions
            pos4 = np.stack([p, p, p, np.zeros_like(p)], axis=1)
        return K.mrope_cos_sin(pos4, rope, self.args.extra["rope_sections"], interleaved=True)

    def attention(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: KVCache,
                  groups: list[AttnGroup], cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """The delta net on a recurrent layer; else gated attention: out * sigmoid(gate)."""
        if lw.mixer is not None:
            return super().attention(il, lw, h, batch, cache, groups, cos, sin)
        a, pr = self.args, self.precision
        T = h.shape[0]
        assert lw.wq is not None and lw.wk is not None and lw.wv is not None and lw.wo is not None
        qg, k, v = pr.linears(h, [lw.wq, lw.wk, lw.wv], lw.qkv)
        qg = qg.reshape(T, a.n_head, 2, a.head_dim)
        out = self.attend(il, lw, qg[:, :, 0], k.reshape(T, a.n_head_kv, a.head_dim),
                          v.reshape(T, a.n_head_kv, a.head_dim_v), batch, cache, groups, cos, sin)
        gate = sigmoid_rows(np.ascontiguousarray(qg[:, :, 1].reshape(T, a.n_head * a.head_dim)))
        return pr.linear(out.reshape(T, a.n_head * a.head_dim_v) * gate, lw.wo)

    def shift_cache(self, cache: KVCache, seq: int, n_keep: int, n_discard: int) -> None:
        raise InvalidRequest(f"context shift is not supported with IMRoPE ({self.args.arch}), as in llama.cpp")


class Qwen35MoeModel(Qwen35Model):
    """`qwen35moe` (Qwen3.5 / Qwen3.6 MoE: 35B-A3B, 122B-A10B, 397B-A17B; llama.cpp's
    src/models/qwen35moe.cpp): qwen35 with a mixture of experts in every layer (families/moe.py:
    softmax router, top `expert_used_count` normalised, experts of `expert_feed_forward_length`
    rows) plus a shared SiLU-gated FFN of `expert_shared_feed_forward_length` rows (else
    `feed_forward_length`) whose output is scaled by sigmoid(h . ffn_gate_inp_shexp)."""

    arch = "qwen35moe"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = Qwen35Model.read_args(g)
        a.moe = read_shared_moe(g, a)
        return a


class Qwen3NextModel(Qwen35MoeModel):
    """`qwen3next` (Qwen3-Next-80B-A3B; llama.cpp's src/models/qwen3next.cpp): qwen35moe's
    layers with plain NeoX rope over `rope.dimension_count` dims (so its cache shifts, as
    granitehybrid's: the attention cells move, the recurrent states stay) and the delta net in
    Qwen3-Next's layout (families/delta_net.py: value heads grouped by key head, `ssm_ba`, and
    in files from its first converter `ssm_in`)."""

    arch = "qwen3next"
    can_shift = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = read_hybrid_args(g, grouped=True)
        a.moe = read_shared_moe(g, a)
        return a

    rope_angles = DecoderModel.rope_angles
    shift_cache = HybridModel.shift_cache
