"""`deepseek2` (DeepSeek-V2/V2-Lite, V2.5, V3, R1, Kimi-K2 and the other files llama.cpp loads
as LLM_ARCH_DEEPSEEK2; src/models/deepseek2.cpp): multi-head latent attention (MLA) and a
mixture of experts with shared experts.

Attention, per token h (n_embd,), H heads, each key `nope + rope` wide (key_length_mla) and
each value v wide (value_length_mla):

    q      = wq h                      (V2-Lite: q_lora_rank 0)
           | wq_b rms(wq_a h)          (V2/V3: through a rank-q_lora_rank bottleneck)   (H, nope + rope)
    c, kr  = split(wkv_a h)            the latent (kv_lora_rank) and one rope key shared by all heads
    c      = rms(c); kr = rope(kr); q_pe = rope(q[:, nope:])   (normal, GPT-J pairs)

- absorbed (files with `attn_k_b` (H, kv_lora, nope) and `attn_v_b` (H, v, kv_lora), the
  newer converter; key_length = kv_lora + rope, value_length = kv_lora, one KV head): attention
  over the latent, as one-KV-head attention with heads kv_lora + rope wide:
      Q_h = [wk_b[h] q_h[:nope], q_pe_h]     K = [c, kr]     V = c
      o_h = wv_b[h] softmax(Q_h.K * kq_scale) V                         (H, v)
  The cache holds the rows [c, kr] only (state/latent_cache.py), as llama.cpp's.
- decompressed (older files with `attn_kv_b` (H * (nope + v), kv_lora); key_length = nope + rope,
  value_length = v): per head k_h = [(wkv_b c)_h[:nope], kr], v_h = (wkv_b c)_h[nope:], the
  usual attention with an H-head cache.

out = wo o. kq_scale = mscale^2 / sqrt(nope + rope), with mscale = attn_factor_org * (1 + 0.1 *
m * ln(1 / freq_scale)), m the YaRN log multiplier (`rope.scaling.yarn_log_multiplier`, which
the converter writes as 0.1 * mscale_all_dim: llama.cpp divides it by 0.1), as llama.cpp's graph.

FFN: the first `leading_dense_block_count` layers dense, the others `expert_count` SiLU experts
(families/moe.py) routed by `expert_gating_func` (softmax when absent, as DeepSeek-V2's files;
sigmoid with `exp_probs_b.bias` for V3), optional expert groups (`expert_group_count`,
`expert_group_used_count`), weights normalised (`expert_weights_norm`) and scaled
(`expert_weights_scale`), plus `expert_shared_count` shared experts. The `nextn_predict_layers`
multi-token-prediction layers at the end are skipped, as llama.cpp skips them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import AttnGroup, DecoderModel, LayerWeights, ModelArgs, expert_counts, md_float, md_int
from llamacli.core.model.families.llama import common_args, yarn_rope
from llamacli.core.model.families.moe import MoEArgs, gating_name
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.precision import Precision
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.state.latent_cache import LatentKVCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import ExpertLinear, Linear, WeightLoader

# expert_gating_func 0 (none) is softmax for DeepSeek-V2's files (llama.cpp's load_arch_hparams),
# sigmoid for GLM-4.7-Lite's (47 or 48 layers, 154880 tokens)


@dataclass(frozen=True)
class MLAArgs:
    """The latent attention's sizes (`{arch}.attention.*`)."""

    q_lora_rank: int  # 0: a plain wq
    kv_lora_rank: int
    n_nope: int  # per head: the key dims without rope (key_length_mla - rope.dimension_count)
    n_rope: int
    head_dim_v: int  # per head: value_length_mla (decompressed)
    absorbed: bool  # attn_k_b / attn_v_b, a latent cache


@dataclass
class MLALayerWeights(LayerWeights):
    wq_a: Linear | None = None  # (q_lora_rank, n_embd)
    q_a_norm: np.ndarray | None = None
    wq_b: Linear | None = None  # (H * (nope + rope), q_lora_rank)
    wkv_a: Linear | None = None  # (kv_lora_rank + rope, n_embd)
    kv_a_norm: np.ndarray | None = None
    wk_b: ExpertLinear | None = None  # absorbed: per head (kv_lora_rank, nope)
    wv_b: ExpertLinear | None = None  # absorbed: per head (v, kv_lora_rank)
    wkv_b: Linear | None = None  # decompressed: (H * (nope + v), kv_lora_rank)


def heads_linear(pr: Precision, x: np.ndarray, w: ExpertLinear) -> np.ndarray:
    """x (T, H, n_in) -> (T, H, n_out): head h through its matrix w[h] (attn_k_b, attn_v_b).
    ggml multiplies them with ggml_mul_mat broadcast over the heads, each head's product the
    2-D matmul's; Precision.expert_linears runs each expert's (head's) rows through the same
    kernels as a 2-D weight, so the same bits, in one call for all heads."""
    t, h, n_in = x.shape
    # one (token, head) row per "token" of one slot: a one-token step also takes the batched
    # path (all heads in one call) instead of one call per head
    heads = np.tile(np.arange(h), t).reshape(t * h, 1)
    (y,) = pr.expert_linears(np.ascontiguousarray(x).reshape(t * h, 1, n_in), [w], heads)
    return y.reshape(t, h, -1)


def kq_scale(rope: K.RopeConfig, rope_attn_factor: float, log_mul: float, head_k: int) -> float:
    """llama.cpp's deepseek2 kq_scale in float32: cparams.yarn_attn_factor (llama_context: with
    YaRN get_mscale(f, m) / get_mscale(f, m) = 1, or get_mscale(f, 1) without a log multiplier,
    over 1 + 0.1 ln f; times rope.scaling.attn_factor), back to attn_factor_org, then mscale."""
    f32 = np.float32
    freq_scale = f32(rope.scale)
    ln_f = f32(math.log(f32(1.0) / freq_scale))
    attn = f32(rope_attn_factor)
    if rope.ext_factor:
        factor = f32(1.0) / freq_scale
        ln = f32(math.log(factor))
        base = f32(1.0) if log_mul or factor <= 1 else f32(f32(0.1) * ln + f32(1.0))
        attn = f32(f32(base * f32(f32(1.0) / f32(f32(1.0) + f32(0.1) * ln))) * attn)
    org = f32(attn * f32(f32(1.0) + f32(0.1) * ln_f))
    mscale = f32(org * f32(f32(1.0) + f32(f32(0.1) * f32(log_mul)) * ln_f))
    return float(f32(f32(mscale * mscale) / f32(math.sqrt(head_k))))


class DeepSeek2Model(DecoderModel):
    arch = "deepseek2"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        a = common_args(g, neox=False)
        n_nextn = md_int(md, p, f"{arch}.nextn_predict_layers", 0, lo=0, hi=a.n_layer - 1)
        n_layer = a.n_layer - n_nextn
        kv_lora = md_int(md, p, f"{arch}.attention.kv_lora_rank")
        q_lora = md_int(md, p, f"{arch}.attention.q_lora_rank", 0, lo=0)
        k_mla = md_int(md, p, f"{arch}.attention.key_length_mla", 0, lo=0)
        v_mla = md_int(md, p, f"{arch}.attention.value_length_mla", 0, lo=0)
        if (k_mla == 0) != (v_mla == 0):
            raise ModelLoadError(p, f"{arch}.attention.key_length_mla and value_length_mla must be both set or both absent")
        absorbed = k_mla > 0
        head_k, head_v = (k_mla, v_mla) if absorbed else (a.head_dim, a.head_dim_v)
        n_rope = a.rope.n_dims
        if head_k - n_rope < 1:
            raise ModelLoadError(p, f"{arch}: the key length ({head_k}) must exceed rope.dimension_count ({n_rope})")
        if absorbed and (a.n_head_kv != 1 or a.head_dim != kv_lora + n_rope or a.head_dim_v != kv_lora):
            raise ModelLoadError(p, f"{arch} with key_length_mla (the latent cache) needs head_count_kv 1, key_length "
                                    f"kv_lora_rank + rope.dimension_count ({kv_lora + n_rope}) and value_length "
                                    f"kv_lora_rank ({kv_lora}); the file has {a.n_head_kv}, {a.head_dim}, {a.head_dim_v}")
        if not absorbed and a.n_head_kv != a.n_head:
            raise ModelLoadError(p, f"{arch} without key_length_mla needs head_count_kv = head_count ({a.n_head})")
        mla = MLAArgs(q_lora, kv_lora, head_k - n_rope, n_rope, head_v, absorbed)

        # the converter writes 0.1 * mscale_all_dim; llama.cpp divides by 0.1f, in float32
        log_mul = float(np.float32(md_float(md, p, f"{arch}.rope.scaling.yarn_log_multiplier", 0.0, positive=False))
                        / np.float32(0.1))
        rope_attn_factor = md_float(md, p, f"{arch}.rope.scaling.attn_factor", 1.0)
        if md.get(f"{arch}.rope.scaling.type") == "yarn":
            n_orig = md_int(md, p, f"{arch}.rope.scaling.original_context_length", a.n_ctx_train)
            # llama_context: get_mscale(f, m) / get_mscale(f, m) for deepseek2, i.e. log multiplier 1
            a.rope = yarn_rope(a.rope, n_orig, rope_attn_factor,
                               md_float(md, p, f"{arch}.rope.scaling.yarn_beta_fast", 32.0),
                               md_float(md, p, f"{arch}.rope.scaling.yarn_beta_slow", 1.0), 1.0 if log_mul else 0.0)
        temp = md_float(md, p, f"{arch}.attention.temperature_scale", 0.0, positive=False)
        if temp:  # Mistral-Large-3's Llama-4 temperature: Q times it after rope
            a.attn_temp = (temp, md_int(md, p, f"{arch}.attention.temperature_length"))

        n_vocab_md = len(md.get("tokenizer.ggml.tokens", ()))
        gating = md_int(md, p, f"{arch}.expert_gating_func", 0, lo=0)
        if gating == 0:
            gating = 2 if n_layer in (47, 48) and n_vocab_md == 154880 else 1
        n_dense = md_int(md, p, f"{arch}.leading_dense_block_count", 0, lo=0, hi=n_layer)
        norm = md.get(f"{arch}.expert_weights_norm", False)
        if not isinstance(norm, (bool, np.bool_)):
            raise ModelLoadError(p, f"metadata key '{arch}.expert_weights_norm' must be a boolean")
        moe = None
        if n_dense < n_layer:
            n_expert, n_used = expert_counts(g)
            n_group = md_int(md, p, f"{arch}.expert_group_count", 0, lo=0)
            n_group_used = md_int(md, p, f"{arch}.expert_group_used_count", 0, lo=0, hi=max(n_group, 0))
            if n_group > 1 and (n_expert % n_group or n_group_used < 1 or n_used > n_group_used * (n_expert // n_group)):
                raise ModelLoadError(p, f"{arch}: {n_expert} experts in {n_group} groups, {n_group_used} of them used, "
                                        f"cannot give {n_used} experts a token")
            moe = MoEArgs(
                n_expert, n_used, md_int(md, p, f"{arch}.expert_feed_forward_length"),
                norm_weights=bool(norm),
                weights_scale=md_float(md, p, f"{arch}.expert_weights_scale", 0.0, positive=False),
                gating=gating_name(g, gating),
                probs_bias=f"blk.{n_dense}.exp_probs_b.bias" in g.tensors,
                n_shared=md_int(md, p, f"{arch}.expert_shared_count", lo=0),
                n_group=n_group if n_group > 1 else 0, n_group_used=n_group_used if n_group > 1 else 0,
            )
        a = replace(a, n_layer=n_layer, swa_layers=(), moe=moe, n_dense_lead=n_dense,
                    attn_scale=kq_scale(a.rope, rope_attn_factor, log_mul, head_k))
        a.extra["mla"] = mla
        return a

    @property
    def mla(self) -> MLAArgs:
        m: MLAArgs = self.args.extra["mla"]
        return m

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        a, m, p = self.args, self.mla, f"blk.{il}."
        H, E, head_k = a.n_head, a.n_embd, m.n_nope + m.n_rope
        lw = MLALayerWeights(
            attn_norm=ld.vector(p + "attn_norm.weight", E), wq=None, wk=None, wv=None,
            wo=ld.linear(p + "attn_output", H * m.head_dim_v, E),
            ffn_norm=ld.vector(p + "ffn_norm.weight", E),
            wkv_a=ld.linear(p + "attn_kv_a_mqa", E, m.kv_lora_rank + m.n_rope),
            kv_a_norm=ld.vector(p + "attn_kv_a_norm.weight", m.kv_lora_rank),
        )
        if m.q_lora_rank:
            lw.wq_a = ld.linear(p + "attn_q_a", E, m.q_lora_rank)
            lw.q_a_norm = ld.vector(p + "attn_q_a_norm.weight", m.q_lora_rank)
            lw.wq_b = ld.linear(p + "attn_q_b", m.q_lora_rank, H * head_k)
        else:
            lw.wq = ld.linear(p + "attn_q", E, H * head_k)
        if m.absorbed:
            lw.wk_b = ld.experts(p + "attn_k_b.weight", H, m.n_nope, m.kv_lora_rank)
            lw.wv_b = ld.experts(p + "attn_v_b.weight", H, m.kv_lora_rank, m.head_dim_v)
        else:
            lw.wkv_b = ld.linear(p + "attn_kv_b", m.kv_lora_rank, H * (m.n_nope + m.head_dim_v))
        self._load_ffn(ld, il, lw)
        return lw

    def new_cache(self, n_seq: int, n_ctx: int) -> KVCache:
        m = self.mla
        if m.absorbed:
            return LatentKVCache(self.args.n_layer, n_seq, n_ctx, m.kv_lora_rank, m.n_rope)
        return super().new_cache(n_seq, n_ctx)

    def shift_cache(self, cache: KVCache, seq: int, n_keep: int, n_discard: int) -> None:
        """As the base class's, rotating each key's rope part (its last n_rope dims) back."""
        n = int(cache.lengths[seq])
        m = n - n_keep - n_discard
        if m <= 0:
            cache.truncate(seq, n_keep)
            return
        src, dst = slice(n_keep + n_discard, n), slice(n_keep, n - n_discard)
        rope = self.ropes(cache.n_ctx)[0]
        cos, sin = K.rope_cos_sin(np.full(m, -n_discard, dtype=np.int64), rope)
        r = cache.k[0].shape[3] - self.mla.n_rope
        for il in range(self.args.n_layer):
            k = cache.k[il][seq, :, src].copy()  # (Hkv, m, D)
            k[..., r:] = self.precision.kv(K.apply_rope(k[..., r:].transpose(1, 0, 2), cos, sin, rope.n_dims,
                                                        rope.neox).transpose(1, 0, 2))
            cache.k[il][seq, :, dst] = k
            if not self.mla.absorbed:
                cache.v[il][seq, :, dst] = cache.v[il][seq, :, src]
        cache.lengths[seq] = n - n_discard

    def attention(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: KVCache,
                  groups: list[AttnGroup], cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """Latent attention of layer il over h (T, n_embd); writes this batch's cells."""
        assert isinstance(lw, MLALayerWeights) and lw.wkv_a is not None and lw.wo is not None
        a, m, pr = self.args, self.mla, self.precision
        T, H, nope = h.shape[0], a.n_head, m.n_nope
        if lw.wq is not None:
            q = pr.linear(h, lw.wq)
        else:
            assert lw.wq_a is not None and lw.wq_b is not None and lw.q_a_norm is not None
            q = pr.linear(K.rms_norm(pr.linear(h, lw.wq_a), lw.q_a_norm, a.norm_eps), lw.wq_b)
        q = q.reshape(T, H, nope + m.n_rope)
        ckr = pr.linear(h, lw.wkv_a)  # (T, kv_lora_rank + rope)
        kr = pr.rope(np.ascontiguousarray(ckr[:, None, m.kv_lora_rank:]), cos, sin, self._rope)  # (T, 1, rope)
        c = K.rms_norm(np.ascontiguousarray(ckr[:, :m.kv_lora_rank]), lw.kv_a_norm, a.norm_eps)
        q_pe = pr.rope(np.ascontiguousarray(q[:, :, nope:]), cos, sin, self._rope)  # (T, H, rope)
        if m.absorbed:
            assert lw.wk_b is not None and lw.wv_b is not None
            q_c = heads_linear(pr, q[:, :, :nope], lw.wk_b)  # (T, H, kv_lora)
            q = np.concatenate([q_c, q_pe], axis=2)
            k = np.concatenate([c[:, None, :], kr], axis=2)  # (T, 1, kv_lora + rope)
            v = None
        else:
            assert lw.wkv_b is not None
            kv = pr.linear(c, lw.wkv_b).reshape(T, H, nope + m.head_dim_v)
            q = np.concatenate([q[:, :, :nope], q_pe], axis=2)
            k = np.concatenate([kv[:, :, :nope], np.broadcast_to(kr, (T, H, m.n_rope))], axis=2)
            v = pr.kv(np.ascontiguousarray(kv[:, :, nope:]))
        if a.attn_temp is not None:
            q = q * K.attn_temperature(batch.positions, *a.attn_temp)[:, None, None]
        cache.write(il, batch.seq_ids, batch.positions, pr.kv(k), v)  # type: ignore[arg-type]
        d_out = m.kv_lora_rank if m.absorbed else m.head_dim_v
        out = np.empty((T, H, d_out), dtype=np.float32)

        def attend(g: AttnGroup) -> None:
            k_start, mask = g.mask(None)
            kc, vc = cache.view(il, g.seq_ids, k_start, k_start + mask.shape[-1])
            o = pr.attention(q[g.tok_idx].transpose(0, 2, 1, 3), kc, vc, mask, a.attn_scale, None)  # (S, H, Tq, d_out)
            out[g.tok_idx] = o.transpose(0, 2, 1, 3)

        pr.run_each(attend, groups)
        if lw.wv_b is not None:  # absorbed: back from the latent to each head's value (llama.cpp's v_mla)
            out = heads_linear(pr, out, lw.wv_b)  # (T, H, v)
        return pr.linear(out.reshape(T, H * m.head_dim_v), lw.wo)
