"""Dev-only: write a Qwen3-30B-A3B-shaped `qwen3moe` GGUF (random weights, the Q4_K_M type mix)
to measure memory and speed of the mixture-of-experts path on a real-size model (not run in CI).

    python scripts/make_moe_model.py [OUT.gguf] [--layers N]
        (default: ~/.cache/llamacli-bench/qwen3moe-30b-a3b-l12-q4km.gguf, 12 of the 48 layers)
    llama bench -m OUT.gguf -p 64 -n 16 --parallel 1

Every layer has Qwen3-30B-A3B's shape (2048 wide, 32/4 heads of 128, 128 experts of 768 rows,
8 routed per token, 151936 tokens); only the layer count is cut (--layers 48 is the full 17 GB
model), so a decode step reads 1/4 of the real model's bytes per token and the tg figures are
~4x the full model's; the ratio to llama.cpp is what the file measures. The router (ffn_gate_inp)
stays float32 as llama-quantize leaves it; expert and attention weights are random Q4_K/Q6_K
blocks with sane scales (random routing spreads the tokens over all experts).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gguf import GGUFWriter
from random_gguf import QT, TensorSpec, add_dummy_vocab, q4_k_m_type, write_random_gguf

N_VOCAB, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM = 151936, 2048, 32, 4, 128
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 128, 8, 768


def tensors(n_layer: int) -> list[TensorSpec]:
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    ts = [TensorSpec("token_embd.weight", (N_VOCAB, N_EMBD), QT.Q4_K),
          TensorSpec("output_norm.weight", (N_EMBD,), QT.F32),
          TensorSpec("output.weight", (N_VOCAB, N_EMBD), QT.Q6_K)]
    for il in range(n_layer):
        p = f"blk.{il}."
        ts += [TensorSpec(p + n, (N_EMBD,), QT.F32) for n in ("attn_norm.weight", "ffn_norm.weight")]
        ts += [TensorSpec(p + n, (HEAD_DIM,), QT.F32) for n in ("attn_q_norm.weight", "attn_k_norm.weight")]
        for name, rows, cols in (("attn_q", q, N_EMBD), ("attn_k", kv, N_EMBD), ("attn_v", kv, N_EMBD),
                                 ("attn_output", N_EMBD, q)):
            ts.append(TensorSpec(p + name + ".weight", (rows, cols), q4_k_m_type(name, il, n_layer)))
        ts.append(TensorSpec(p + "ffn_gate_inp.weight", (N_EXPERT, N_EMBD), QT.F32))
        for name, rows, cols in (("ffn_gate_exps", N_FF_EXP, N_EMBD), ("ffn_up_exps", N_FF_EXP, N_EMBD),
                                 ("ffn_down_exps", N_EMBD, N_FF_EXP)):
            ts.append(TensorSpec(p + name + ".weight", (N_EXPERT, rows, cols), q4_k_m_type(name, il, n_layer)))
    return ts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--layers", type=int, default=12)
    a = ap.parse_args()
    default = f"qwen3moe-30b-a3b-l{a.layers}-q4km.gguf"
    out = Path(a.out) if a.out else Path.home() / ".cache" / "llamacli-bench" / default

    def metadata(w: GGUFWriter) -> None:
        w.add_name(f"qwen3-30b-a3b-shaped-random-{a.layers}-layers")
        w.add_context_length(40960)
        w.add_embedding_length(N_EMBD)
        w.add_block_count(a.layers)
        w.add_feed_forward_length(6144)
        w.add_head_count(N_HEAD)
        w.add_head_count_kv(N_HEAD_KV)
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
        w.add_rope_freq_base(1000000.0)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
        w.add_expert_feed_forward_length(N_FF_EXP)
        w.add_file_type(15)  # MOSTLY_Q4_K_M
        add_dummy_vocab(w, N_VOCAB)

    write_random_gguf(out, "qwen3moe", metadata, tensors(a.layers))


if __name__ == "__main__":
    main()
