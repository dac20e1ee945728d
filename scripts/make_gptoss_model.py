"""Dev-only: write a gpt-oss-20b-shaped `gpt-oss` GGUF (random weights, Q8_0 matrices) to measure
the gpt-oss path (sinks, biases, softmax_weight routing, swiglu_oai) beside llama.cpp (not run in CI).

    python scripts/make_gptoss_model.py [OUT.gguf] [--layers N]
        (default: ~/.cache/llamacli-bench/gpt-oss-20b-l4-q8_0.gguf, 4 of the 24 layers)
    llama bench -m OUT.gguf -p 64 -n 16 --parallel 1

Every layer has gpt-oss-20b's shape (2880 wide, 64/8 heads of 64, 32 experts of 2880 rows, 4
routed per token, 201088 tokens, window 128 on even layers, YaRN 32x from 4096); only the
layer count is cut. The released files store the experts as MXFP4; here they are Q8_0 (4x the
bytes), the router, norms, sinks and biases F32 as in the released files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
from gguf import GGUFWriter
from random_gguf import QT, TensorSpec, add_dummy_vocab, write_random_gguf

N_VOCAB, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM = 201088, 2880, 64, 8, 64
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 32, 4, 2880


def tensors(n_layer: int) -> list[TensorSpec]:
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    ts = [TensorSpec("token_embd.weight", (N_VOCAB, N_EMBD), QT.Q8_0),
          TensorSpec("output_norm.weight", (N_EMBD,), QT.F32),
          TensorSpec("output.weight", (N_VOCAB, N_EMBD), QT.Q8_0)]
    for il in range(n_layer):
        p = f"blk.{il}."
        ts += [TensorSpec(p + n, (N_EMBD,), QT.F32) for n in ("attn_norm.weight", "post_attention_norm.weight")]
        for name, rows, cols in (("attn_q", q, N_EMBD), ("attn_k", kv, N_EMBD), ("attn_v", kv, N_EMBD),
                                 ("attn_output", N_EMBD, q)):
            ts += [TensorSpec(p + name + ".weight", (rows, cols), QT.Q8_0), TensorSpec(p + name + ".bias", (rows,), QT.F32)]
        ts.append(TensorSpec(p + "attn_sinks.weight", (N_HEAD,), QT.F32))
        ts += [TensorSpec(p + "ffn_gate_inp.weight", (N_EXPERT, N_EMBD), QT.F32),
               TensorSpec(p + "ffn_gate_inp.bias", (N_EXPERT,), QT.F32)]
        for name, rows, cols in (("ffn_gate_exps", N_FF_EXP, N_EMBD), ("ffn_up_exps", N_FF_EXP, N_EMBD),
                                 ("ffn_down_exps", N_EMBD, N_FF_EXP)):
            ts += [TensorSpec(p + name + ".weight", (N_EXPERT, rows, cols), QT.Q8_0),
                   TensorSpec(p + name + ".bias", (N_EXPERT, rows), QT.F32)]
    return ts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    out = Path(a.out) if a.out else Path.home() / ".cache" / "llamacli-bench" / f"gpt-oss-20b-l{a.layers}-q8_0.gguf"

    def metadata(w: GGUFWriter) -> None:
        w.add_name(f"gpt-oss-20b-shaped-random-{a.layers}-layers")
        w.add_context_length(131072)
        w.add_embedding_length(N_EMBD)
        w.add_block_count(a.layers)
        w.add_feed_forward_length(N_FF_EXP)
        w.add_head_count(N_HEAD)
        w.add_head_count_kv(N_HEAD_KV)
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
        w.add_rope_freq_base(150000.0)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_sliding_window(128)
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
        w.add_expert_feed_forward_length(N_FF_EXP)
        w.add_file_type(7)  # MOSTLY_Q8_0
        add_dummy_vocab(w, N_VOCAB)

    write_random_gguf(out, "gpt-oss", metadata, tensors(a.layers))


if __name__ == "__main__":
    main()
