"""`bert` and `nomic-bert`: the encoders served for embeddings and reranking (bge, all-MiniLM,
nomic-embed, bge-reranker), as llama.cpp's src/models/bert.cpp builds them.

Post-norm blocks with LayerNorm (weight and bias) instead of RMSNorm:

    x = LN(tok_embd[t] + token_types[0] + pos_embd[p])            (nomic-bert: no pos_embd)
    per layer:  x = LN(x + Wo . attn(Wq x, Wk x, Wv x))           (nomic-bert: NeoX rope on Q, K)
                x = LN(x + down(gelu(up x)))                      (nomic-bert: down(silu(gate x) * up x))

Attention sees the whole sequence (`{arch}.attention.causal`, false in every converted
encoder) and keeps no KV cache: a sequence is evaluated in one batch, so the engine schedules
its prompt whole. Token types are always 0 ("sentence A"), as llama.cpp hard-codes them.
The output is the last layer's hidden state per token (no final norm, no vocabulary head);
pooling happens after (core/model/kernels/pooling.py), and `classify` is the reranker's head on the
pooled CLS row: cls_out(tanh(cls . h + cls_b)) + cls_out_b (llama-graph.cpp build_pooling).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.state.batch import Batch
from llamacli.core.errors import InvalidRequest
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.families.base import DecoderModel, ModelArgs, md_float, md_int
from llamacli.core.model.precision import Precision
from llamacli.core.model.weights.tensors import Linear, WeightLoader

@dataclass
class Norm:
    """LayerNorm parameters (n_embd,) each."""

    w: np.ndarray
    b: np.ndarray

    def __call__(self, x: np.ndarray, eps: float) -> np.ndarray:
        return K.layer_norm(x, self.w, self.b, eps)


@dataclass
class EncoderLayer:
    wqkv: list[Linear]  # [q, k, v], or [qkv] when the file fuses them (nomic-bert)
    wo: Linear
    attn_out_norm: Norm
    ffn_up: Linear
    ffn_down: Linear
    layer_out_norm: Norm
    ffn_gate: Linear | None = None


@dataclass
class ClassifierHead:
    """The reranker head; either part may be missing (llama.cpp applies what the file has)."""

    cls: Linear | None
    cls_out: Linear | None


class BertModel(DecoderModel):
    arch = "bert"
    has_lm_head = False
    position_embeddings = True  # bert: learnt absolute positions; nomic-bert: rope
    gated_ffn = False

    @classmethod
    def read_args(cls, g: GGUFFile) -> ModelArgs:
        md = g.metadata
        a = g.architecture
        p = g.path
        n_embd = md_int(md, p, f"{a}.embedding_length")
        n_head = md_int(md, p, f"{a}.attention.head_count")
        head_dim = max(n_embd // n_head, 1)
        return ModelArgs(
            arch=a,
            n_vocab=g.tensor("token_embd.weight").shape[0],
            n_embd=n_embd,
            n_layer=md_int(md, p, f"{a}.block_count"),
            n_head=n_head,
            n_head_kv=md_int(md, p, f"{a}.attention.head_count_kv", n_head),
            head_dim=head_dim,
            head_dim_v=head_dim,
            n_ff=md_int(md, p, f"{a}.feed_forward_length"),
            norm_eps=md_float(md, p, f"{a}.attention.layer_norm_epsilon", positive=False),
            n_ctx_train=md_int(md, p, f"{a}.context_length"),
            rope=K.RopeConfig(
                md_int(md, p, f"{a}.rope.dimension_count", head_dim),
                md_float(md, p, f"{a}.rope.freq_base", 10000.0),
                1.0,
                True,  # NeoX rope (llama_model_rope_type)
                None,
            ),
            extra={"causal": bool(md.get(f"{a}.attention.causal", True))},
        )

    def __init__(self, args: ModelArgs, gguf: GGUFFile, precision: Precision, loader: WeightLoader) -> None:
        self.args = args
        self.path = gguf.path
        self.precision = precision
        self.causal = bool(args.extra["causal"])
        a = args
        self.tok_embd = loader.embedding("token_embd.weight")
        self.type_row0 = loader.vector("token_types.weight")[: a.n_embd] if loader.has("token_types.weight") else None
        self.pos_embd = loader.embedding("position_embd.weight") if self.position_embeddings else None
        self.tok_norm = self._norm(loader, "token_embd_norm")
        self.encoder_layers = [self._load_encoder_layer(loader, il) for il in range(a.n_layer)]
        self.head = ClassifierHead(self._opt_linear(loader, "cls", a.n_embd, a.n_embd), None)
        if loader.has("cls.output.weight"):
            n_out = loader.gguf.tensor("cls.output.weight").shape[0]
            self.head.cls_out = loader.linear("cls.output", a.n_embd, n_out)
        # outputs of the head: cls.output's, else cls's own (n_embd), else none
        head = self.head.cls_out or self.head.cls
        self.n_cls_out = head.n_out if head is not None else 0
        self._rope = a.rope

    def one_token_step_kind(self) -> str | None:
        """None: an encoder reads whole sequences, it has no one-token decode step to compile."""
        return None

    # ---- loading -------------------------------------------------------------------------
    def _norm(self, ld: WeightLoader, prefix: str) -> Norm:
        n = self.args.n_embd
        return Norm(ld.vector(prefix + ".weight", n), ld.vector(prefix + ".bias", n))

    @staticmethod
    def _opt_linear(ld: WeightLoader, prefix: str, n_in: int, n_out: int) -> Linear | None:
        return ld.linear(prefix, n_in, n_out) if ld.has(prefix + ".weight") else None

    def _load_encoder_layer(self, ld: WeightLoader, il: int) -> EncoderLayer:
        p = f"blk.{il}."
        a = self.args
        n_kv = a.n_head_kv * a.head_dim
        if ld.has(p + "attn_qkv.weight"):
            wqkv = [ld.linear(p + "attn_qkv", a.n_embd, a.n_embd + 2 * n_kv)]
        else:
            wqkv = [ld.linear(p + n, a.n_embd, d) for n, d in (("attn_q", a.n_embd), ("attn_k", n_kv), ("attn_v", n_kv))]
        return EncoderLayer(
            wqkv=wqkv,
            wo=ld.linear(p + "attn_output", a.n_embd, a.n_embd),
            attn_out_norm=self._norm(ld, p + "attn_output_norm"),
            ffn_up=ld.linear(p + "ffn_up", a.n_embd, a.n_ff),
            ffn_down=ld.linear(p + "ffn_down", a.n_ff, a.n_embd),
            layer_out_norm=self._norm(ld, p + "layer_output_norm"),
            ffn_gate=ld.linear(p + "ffn_gate", a.n_embd, a.n_ff) if self.gated_ffn else None,
        )

    def _fuse_layers(self) -> None:
        """Nothing to fuse: the encoder's matmuls are few and its prompts short."""

    def new_cache(self, n_seq: int, n_ctx: int) -> KVCache:
        """No K/V are kept (each sequence is evaluated in one batch): only the lengths."""
        return KVCache(0, n_seq, n_ctx, self.args.n_head_kv, self.args.head_dim, self.args.head_dim_v)

    def check_input(self, n_tokens: int, n_batch: int) -> None:
        if n_tokens > n_batch:
            raise InvalidRequest(
                f"input ({n_tokens} tokens) is too large to process. increase the physical batch size "
                f"(current batch size: {n_batch})"
            )
        if self.pos_embd is not None and n_tokens > self.pos_embd.n_vocab:
            raise InvalidRequest(
                f"input ({n_tokens} tokens) is longer than the model's {self.pos_embd.n_vocab} positions"
            )

    # ---- forward -------------------------------------------------------------------------
    def forward_hidden(self, batch: Batch, cache: KVCache) -> np.ndarray:
        """Hidden states (n_out, n_embd) of the batch's output rows. Every sequence of the
        batch must be complete in it (positions 0..n-1): attention sees only this batch."""
        a = self.args
        pr = self.precision
        if batch.n_tokens == 0:
            return np.zeros((0, a.n_embd), dtype=np.float32)
        pr.begin_batch(batch)
        x = self.tok_embd.rows(batch.tokens)  # (T, n_embd)
        pr.add_lora_rows(batch.tokens, "token_embd.weight", x)
        if self.type_row0 is not None:
            x = x + self.type_row0
        if self.pos_embd is not None:
            x = self.pos_embd.rows(batch.positions) + x
        x = self.tok_norm(x, a.norm_eps)
        seqs = [np.flatnonzero(batch.seq_ids == s) for s in np.unique(batch.seq_ids)]
        cos, sin = K.rope_cos_sin(batch.positions, self._rope) if not self.position_embeddings else (None, None)
        for lw in self.encoder_layers:
            h = self._attention(lw, x, batch, seqs, cos, sin)
            x = lw.attn_out_norm(h + x, a.norm_eps)
            x = lw.layer_out_norm(self._ffn(lw, x) + x, a.norm_eps)
        cache.commit(batch.seq_ids, batch.positions)
        return x[batch.output]

    def _attention(
        self,
        lw: EncoderLayer,
        x: np.ndarray,
        batch: Batch,
        seqs: list[np.ndarray],
        cos: np.ndarray | None,
        sin: np.ndarray | None,
    ) -> np.ndarray:
        a = self.args
        pr = self.precision
        T = x.shape[0]
        outs = pr.linears(x, lw.wqkv, None)
        if len(outs) == 1:  # fused: columns [q | k | v]
            n_kv = a.n_head_kv * a.head_dim
            outs = [outs[0][:, : a.n_embd], outs[0][:, a.n_embd : a.n_embd + n_kv], outs[0][:, a.n_embd + n_kv :]]
        q = outs[0].reshape(T, a.n_head, a.head_dim)
        k = outs[1].reshape(T, a.n_head_kv, a.head_dim)
        v = outs[2].reshape(T, a.n_head_kv, a.head_dim_v)
        if cos is not None and sin is not None:
            q = pr.rope(q, cos, sin, self._rope)
            k = pr.rope(k, cos, sin, self._rope)
        out = np.empty((T, a.n_head, a.head_dim_v), dtype=np.float32)
        for idx in seqs:  # each sequence attends over its own tokens only
            pos = batch.positions[idx]
            mask = np.zeros((1, idx.shape[0], idx.shape[0]), dtype=np.float32)
            if self.causal:
                mask = np.where(pos[None, :] <= pos[:, None], np.float32(0.0), np.float32(-np.inf))[None]
            o = encoder_attention(
                q[idx].transpose(1, 0, 2)[None], k[idx].transpose(1, 0, 2)[None], v[idx].transpose(1, 0, 2)[None],
                mask, a.attn_scale,
            )  # (1, H, Tq, Dv)
            out[idx] = o[0].transpose(1, 0, 2)
        return pr.linear(out.reshape(T, a.n_head * a.head_dim_v), lw.wo)

    def _ffn(self, lw: EncoderLayer, x: np.ndarray) -> np.ndarray:
        pr = self.precision
        if lw.ffn_gate is not None:
            g, u = pr.linears(x, [lw.ffn_gate, lw.ffn_up], None)
            return pr.linear(pr.silu(g) * u, lw.ffn_down)
        return pr.linear(pr.gelu(pr.linear(x, lw.ffn_up)), lw.ffn_down)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        raise InvalidRequest(f"{self.args.arch} is an encoder: it has no vocabulary head to generate text with")

    def classify(self, pooled: np.ndarray) -> np.ndarray:
        """The reranker head over pooled CLS rows (n, n_embd) -> (n, n_cls_out)."""
        if not self.n_cls_out:
            return super().classify(pooled)  # raises: no head
        pr = self.precision
        h = pooled
        if self.head.cls is not None:
            h = np.tanh(pr.linear(h, self.head.cls))
        if self.head.cls_out is not None:
            h = pr.linear(h, self.head.cls_out)
        return h

    def shift_cache(self, cache: KVCache, seq: int, n_keep: int, n_discard: int) -> None:
        raise InvalidRequest("an encoder has no context to shift")


class NomicBertModel(BertModel):
    """nomic-embed: rope instead of position embeddings, fused QKV, SiLU-gated FFN."""

    arch = "nomic-bert"
    position_embeddings = False
    gated_ffn = True


def encoder_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float) -> np.ndarray:
    """softmax(q k^T * scale + mask) v over float32 K/V (no f16 cache: llama.cpp's encoders
    attend over the batch's own K/V). q (S, H, Tq, D), k (S, Hkv, L, D), v (S, Hkv, L, Dv),
    mask (S, Tq, L) -> (S, H, Tq, Dv). Products summed in float64 and rounded once, so the
    result does not depend on the BLAS kernel of this CPU."""
    S, H, Tq, D = q.shape
    Hkv = k.shape[1]
    G = H // Hkv
    qg = q.reshape(S, Hkv, G * Tq, D).astype(np.float64)
    w = np.matmul(qg, k.astype(np.float64).transpose(0, 1, 3, 2)).astype(np.float32)  # (S, Hkv, G*Tq, L)
    w *= np.float32(scale)
    w5 = w.reshape(S, Hkv, G, Tq, -1) + mask[:, None, None, :, :]
    m = np.max(w5, axis=-1, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    e = np.exp(w5 - m)
    e *= (1.0 / np.sum(e, axis=-1, keepdims=True, dtype=np.float64)).astype(np.float32)
    p = e.reshape(S, Hkv, G * Tq, -1).astype(np.float64)
    return np.matmul(p, v.astype(np.float64)).astype(np.float32).reshape(S, H, Tq, -1)
