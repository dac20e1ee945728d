"""Tiny random GGUF models for tests, written deterministically with `gguf.GGUFWriter`.

Architectures: llama, qwen2, qwen3, gemma3, gemma2 (GEMMA2_MODELS), gemma (GEMMA_MODELS), gemma4 (GEMMA4_MODELS), phi3 (PHI3_MODELS), qwen2vl (QWEN2VL_MODELS: M-RoPE sections); variants F32, F16, Q8_0, Q4_K (the 2-D weight
matrices are stored in that type, 1-D norms/biases stay F32), llama in each low-bit type (LOW_BIT_MODELS:
MXFP4, TQ1_0, TQ2_0, IQ1_S..IQ3_S, random valid blocks; SPLIT_MODELS: NVFP4, Q1_0, Q2_0), plus ("llama", "F32_ROPE_FREQS"):
llama3-style `rope_freqs.weight` frequency factors; and qwen3moe (MOE_MODELS: F32, Q8_0, Q4_K
with 8 experts, top 2; F32_TIE with 32 experts, top 4 and pairs of equal router rows); gpt-oss
(GPTOSS_MODELS, also in MOE_MODELS: F32, F16, Q8_0; the real file's metadata keys and tensor
names: sinks, biases, YaRN, alternating sliding window; its seed chosen so that no router's
top-k edge and no early greedy step is a near-tie); granitehybrid (GRANITEHYBRID_MODELS, written by
`write_granitehybrid`: Mamba-2 and attention layers, Granite's multipliers; F32, Q8_0, F32_ROPE,
F32_MOE); deepseek2 (DEEPSEEK2_MODELS); minimax-m2 and seed_oss (MINIMAX_M2_MODELS,
SEED_OSS_MODELS); nemotron_h and nemotron_h_moe (NEMOTRONH_MODELS,
NEMOTRONH_MOE_MODELS, written by `write_nemotronh`: one part per layer, Mamba-2, attention or a
squared-ReLU FFN / experts; F32, Q8_0); olmoe and qwen2moe (OLMOE_MODELS, QWEN2MOE_MODELS: F32,
and Q4_K / Q8_0 with tied router rows); smollm3 (SMOLLM3_MODELS: F32, Q8_0); lfm2 and lfm2moe (LFM2_MODELS,
LFM2MOE_MODELS, written by `write_lfm2`: short-conv and attention layers; F32, Q8_0); granite and
granitemoe (GRANITE_MODELS: Granite's multipliers, experts, a shared FFN).

    from tests.tiny_models import write_tiny_model, ALL_MODELS, tiny_config
    path = write_tiny_model("gemma3", "Q4_K", tmp_path / "g.gguf")

The same (arch, variant) always gives byte-identical files (fixed seeds, no timestamps), so the
llama.cpp fixtures in tests/fixtures/tiny/ (made by scripts/oracle_fixtures.py) stay valid.
Writing one model takes a few milliseconds (the vocabularies are built once per process).

Shapes are real but tiny: the input dimension of every matrix is a multiple of 256 (K-quants),
GQA everywhere, gemma3 follows the real model (QK norms, post-attention/post-FFW norms, tied
output, +1 already folded into the norm weights (post-norm weights ~4 so the layers, not the
token's own scaled embedding, dominate the residual stream), head_dim * n_head != n_embd, 6 layers so the
default sliding-window pattern gives 5 sliding layers and 1 global layer, window 8 tokens).

Vocabularies llama.cpp accepts:
- llama, gemma3, gemma2: SPM (`tokenizer.ggml.model` = "llama"), special tokens first, the 256 byte
  tokens `<0x00>`..`<0xFF>` (type BYTE), then word pieces (`▁` = space) learnt by a small
  deterministic BPE over a fixed English text, with scores = -rank.
- qwen2, qwen3: GPT-2 byte-level BPE (`gpt2`, pre-tokenizer `qwen2`): the 256 byte-level
  characters in GPT-2 order, merged pieces, `merges`, and `<|endoftext|>`, `<|im_start|>`,
  `<|im_end|>` as control tokens at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import TokenType

from tests.lowbit_blocks import LOW_BIT_TYPES, RANDOM_BLOCK_TYPES, SPLIT_TYPES, random_blocks

ARCHES = ("llama", "qwen2", "qwen3", "gemma3")
VARIANTS = ("F32", "F16", "Q8_0", "Q4_K")
EXTRA_MODELS = (("llama", "F32_ROPE_FREQS"),)
# Mixture of experts: 8 experts, top 2; F32_TIE: 32 experts, top 4, four pairs of experts with
# the same router row (so equal router probabilities for every token: ties at the top-k edge)
# gpt-oss: 8 experts, top 4, with biases; sinks, alternating sliding window (8 tokens), YaRN;
# F32, F16, Q8_0 and MXFP4 weights (MXFP4: every matrix, as gpt-oss files store their experts)
GPTOSS_MODELS = (("gpt-oss", "F32"), ("gpt-oss", "F16"), ("gpt-oss", "Q8_0"), ("gpt-oss", "MXFP4"))
MOE_MODELS = (("qwen3moe", "F32"), ("qwen3moe", "Q8_0"), ("qwen3moe", "Q4_K"), ("qwen3moe", "F32_TIE"),
              ("qwen3moe", "MXFP4")) + GPTOSS_MODELS  # MXFP4: every matrix, the experts included (gpt-oss's expert type)
# phi3: fused attn_qkv and gate|up ffn_up, 3/4 of each head rotated (as Phi-4-mini), LongRoPE
# factors; F32 and Q4_K: the short factors (original context 256, the fixtures' 128 cells pad to
# 256), F32_LONGROPE: the long ones (original context 64) and attn_factor 1.19; F32_SPLIT: separate
# attn_q/k/v and no rope factors
PHI3_MODELS = (("phi3", "F32"), ("phi3", "Q4_K"), ("phi3", "F32_LONGROPE"), ("phi3", "F32_SPLIT"))
# mistral3: head_dim * n_head != n_embd, YaRN 16x from 16 positions with betas 16/2 and log
# multiplier 1 (Ministral's mscale_all_dim), attention temperature 0.1 (so that from position 16
# on Q is scaled); F32, F16 and Q4_K (the one-token steps through the compiled decode step)
MISTRAL3_MODELS = (("mistral3", "F32"), ("mistral3", "F16"), ("mistral3", "Q4_K"))
# glm4moe: 3 layers (the first dense) plus 1 nextn layer llama.cpp skips, 16 experts, top 4,
# sigmoid gating with exp_probs_b, weights normalised and scaled by 2.5, 1 shared expert, Q/K/V
# biases, half of each head rotated (NeoX); F32 also with Q/K norms
GLM4MOE_MODELS = (("glm4moe", "F32"), ("glm4moe", "Q8_0"), ("glm4moe", "Q4_K"))
MOE_MODELS = MOE_MODELS + GLM4MOE_MODELS
# seeds chosen (by our ggml numerics, then checked against llama.cpp's fixtures) so that no
# router's top-k edge is a near-tie (glm4moe: the 4th and 5th of sigmoid + bias apart by more
# than 1e-3 on every prompt and greedy token) and the greedy steps start clear of near-ties
_SEEDS = {("mistral3", "F32"): 1326, ("mistral3", "F16"): 1306, ("mistral3", "Q4_K"): 1312,
          ("glm4moe", "F32"): 1427, ("glm4moe", "Q8_0"): 1454, ("glm4moe", "Q4_K"): 1456}
# llama with every matrix in one of the low-bit types (random valid blocks, tests/lowbit_blocks.py)
LOW_BIT_MODELS = tuple(("llama", t.name) for t in LOW_BIT_TYPES)
# llama in ggml types 40-42 (random valid blocks, tests/lowbit_blocks.py SPLIT_TYPES)
SPLIT_MODELS = tuple(("llama", t.name) for t in SPLIT_TYPES)
# Q8_0 at a row length that is not a multiple of 256 (gpt-oss: 2880): qwen3's Q8_0 model 160
# wide, its first 16 fixture tokens; not in ALL_MODELS (its own test in test_parity_tiny.py)
ODD_WIDTH_MODELS = (("qwen3", "Q8_0_W160"),)
ODD_WIDTH_TOKENS = 16
# qwen2vl: qwen2 with M-RoPE sections (8, 12, 12, 0) pairs of the 32 per 64-wide head (as Qwen2-VL's
# (16, 24, 24, 0) of 64 per 128-wide head); F32 and Q8_0
QWEN2VL_MODELS = (("qwen2vl", "F32"), ("qwen2vl", "Q8_0"))
QWEN2VL_SECTIONS = (8, 12, 12, 0)
# granitehybrid (Granite 4.0-H Micro's shape): Mamba-2 layers 0, 1 and 3, attention layer 2, the
# Granite multipliers; F32 and Q8_0 without rope (as the released files), F32_ROPE with it (Bamba);
# F32_MOE (Granite 4.0-H Tiny's shape): 8 experts of 256 rows, top 2, a shared FFN of 512 rows.
# Their weight types and seeds are their own (not _WEIGHT_TYPE's places)
GRANITEHYBRID_MODELS = (("granitehybrid", "F32"), ("granitehybrid", "Q8_0"), ("granitehybrid", "F32_ROPE"),
                        ("granitehybrid", "F32_MOE"))
_GRANITEHYBRID = {"F32": (QT.F32, 1500), "Q8_0": (QT.Q8_0, 1502), "F32_ROPE": (QT.F32, 1519), "F32_MOE": (QT.F32, 1520)}
# qwen35 (Qwen3.5's shape): gated delta-net layers 0-2 (2 key heads, 4 value heads of 64), a gated
# attention layer 3 (IMRoPE over 16 of 64 dims, sections (3, 3, 2, 0) as Qwen3.5's (11, 11, 10, 0)),
# tied output; F32 and Q8_0. Their weight types and seeds are their own
QWEN35_MODELS = (("qwen35", "F32"), ("qwen35", "Q8_0"))
_QWEN35 = {"F32": (QT.F32, 1600), "Q8_0": (QT.Q8_0, 1603)}
# qwen35moe (Qwen3.5-35B-A3B's shape): qwen35 with 8 experts of 256 rows, top 2, and a shared
# expert of 512 rows behind its sigmoid gate in every layer; F32 and Q8_0
QWEN35MOE_MODELS = (("qwen35moe", "F32"), ("qwen35moe", "Q8_0"))
_QWEN35MOE = {"F32": (QT.F32, 1610), "Q8_0": (QT.Q8_0, 1612)}
# qwen3next (Qwen3-Next-80B-A3B's shape): qwen35moe's layers with NeoX rope (no sections), value
# heads grouped by key head, ssm_ba; F32 with the first converter's fused ssm_in, Q8_0 with
# attn_qkv and attn_gate
QWEN3NEXT_MODELS = (("qwen3next", "F32"), ("qwen3next", "Q8_0"))
_QWEN3NEXT = {"F32": (QT.F32, 1620), "Q8_0": (QT.Q8_0, 1622)}
# (the Q8_0 seeds skip 1601, 1602, 1611 and 1621: in 1601 llama-server's greedy tokens for the
# prompts of tests/test_http_granitehybrid.py meet a near-tie (top two 0.02 apart); in the others
# a prompt position where llama.cpp's logits and ours part by 0.17, 0.06 and 0.35, where every
# earlier position agrees to the bit: our
# delta rule sums its dot products in another order than ggml's SIMD ones, so, most likely, an
# activation's Q8_0 rounding on an edge goes the other way, and the tiny random models carry
# that on through their recurrent state)
_DELTA_NET = {"qwen35": _QWEN35, "qwen35moe": _QWEN35MOE, "qwen3next": _QWEN3NEXT}
ALL_MODELS: list[tuple[str, str]] = ([(a, v) for a in ARCHES for v in VARIANTS] + list(EXTRA_MODELS) + list(MOE_MODELS)
                                     + list(PHI3_MODELS) + list(MISTRAL3_MODELS) + list(LOW_BIT_MODELS)
                                     + list(QWEN2VL_MODELS) + list(GRANITEHYBRID_MODELS) + list(SPLIT_MODELS)
                                     + list(QWEN35_MODELS) + list(QWEN35MOE_MODELS) + list(QWEN3NEXT_MODELS))
TIED_EXPERTS = ((2, 9), (5, 20), (11, 30), (17, 25))
# deepseek2 (multi-head latent attention, written by `write_deepseek2`): 3 layers (the first
# dense), 4 heads of keys 64 + 64 rope dims and values 64, latent 128 (every row a multiple of 64
# long, as the real files' 576, 192 and 512: ggml's f16 dot has no scalar tail; Q8_0: keys 96 + 32,
# latent 96), 16 experts of 128 rows, top 4, 2 shared experts, YaRN 40x from 32 positions. F32, Q8_0: V2-Lite-like (plain wq, softmax
# gating, weights unnormalised, mscale_all_dim 0.707, attn_k_b / attn_v_b: the latent cache);
# Q8_0 with two pairs of experts of equal router rows (exact ties at the top-k edge, broken as
# ggml's argsort breaks them); F32_KVB: the same with the older unsplit attn_kv_b (a decompressed cache); F32_V3:
# V3-like (q through a rank-128 bottleneck, sigmoid gating with exp_probs_b, 4 expert groups of
# which 2 are used, weights normalised and scaled by 2.5, mscale_all_dim 1)
DEEPSEEK2_MODELS = (("deepseek2", "F32"), ("deepseek2", "Q8_0"), ("deepseek2", "F32_KVB"), ("deepseek2", "F32_V3"))
DEEPSEEK2_TIED = ((2, 9), (5, 13))
_DEEPSEEK2_SEEDS = {"F32": 1600, "Q8_0": 1601, "F32_KVB": 1602, "F32_V3": 1603}
ALL_MODELS += list(DEEPSEEK2_MODELS)
# nemotron_h (Nemotron-H / Nemotron Nano 2's shape, written by `write_nemotronh`): 6 single-part
# layers "M-M*-M" (M Mamba-2 with 2 groups, - a squared-ReLU FFN of 768 rows, * attention without
# positions), layer_norm_epsilon only, an output matrix of its own; F32 and Q8_0
NEMOTRONH_MODELS = (("nemotron_h", "F32"), ("nemotron_h", "Q8_0"))
_NEMOTRONH = {"F32": (QT.F32, 1700), "Q8_0": (QT.Q8_0, 1701)}
ALL_MODELS += list(NEMOTRONH_MODELS)
# nemotron_h_moe (Nemotron 3 Nano's shape): nemotron_h's layers with the FFN ones 8 ungated
# squared-ReLU experts of 256 rows, top 2 by sigmoid + exp_probs_b, normalised and scaled by 2.5,
# and a shared expert of 512 rows; F32 and Q8_0
NEMOTRONH_MOE_MODELS = (("nemotron_h_moe", "F32"), ("nemotron_h_moe", "Q8_0"))
_NEMOTRONH_MOE = {"F32": (QT.F32, 1710), "Q8_0": (QT.Q8_0, 1712)}
# (Q8_0 skips 1711: there llama.cpp's logits and ours part by 0.14 from position 26 on, every
# earlier position equal to the bit and no router near a tie (top-k edge 0.013 apart): most
# likely one activation's Q8_0 rounding on an edge, carried on by the recurrent state, as in
# qwen35's skipped seeds; 1712-1714 agree to the bit at all 40 positions)
ALL_MODELS += list(NEMOTRONH_MOE_MODELS)
# olmoe (OLMoE-1B-7B's shape): Q/K RMS norms over all of q and k (so no GQA: 4 heads of 64 for
# both), 16 experts of feed_forward_length (256) rows, top 4, weights not renormalised, no
# expert_feed_forward_length key (as its converter writes); qwen2moe (Qwen1.5-MoE-A2.7B's shape):
# Q/K/V biases, 16 experts of 256 rows, top 4, not renormalised, a shared expert of 512 rows behind
# its gate. Each in F32, and quantized with DEEPSEEK2_TIED's two pairs of experts of equal router
# rows (the router stays F32: exact ties at the top-k edge, broken as ggml's argsort breaks them)
OLMOE_MODELS = (("olmoe", "F32"), ("olmoe", "Q4_K"))
QWEN2MOE_MODELS = (("qwen2moe", "F32"), ("qwen2moe", "Q8_0"))
# (seeds: no router's top-k edge, exact ties aside, within 5e-5, greedy steps' top two > 0.1 apart;
# qwen2moe's first seeds, 1710 and 1711, had edges 7e-6 and 8e-5 apart, and --numerics f32 broke
# the first the other way)
_MOE_SEEDS = {("olmoe", "F32"): 1700, ("olmoe", "Q4_K"): 1701, ("qwen2moe", "F32"): 1721, ("qwen2moe", "Q8_0"): 1719}
ALL_MODELS += list(OLMOE_MODELS) + list(QWEN2MOE_MODELS)
# gemma2 (Gemma 2 2B's shape: head_dim * n_head != n_embd, post norms, tied output): 4 layers,
# window 16 on layers 0 and 2 (the default pattern 2; the fixtures' 40 tokens pass it), attention
# scores capped at 5 and logits at 8 (the real files' 50 and 30 would not bite on these random
# weights); F32 and Q4_K (the one-token steps through the compiled decode step)
GEMMA2_MODELS = (("gemma2", "F32"), ("gemma2", "Q4_K"))
_GEMMA2_CAPS = (5.0, 8.0)  # attn_logit_softcapping, final_logit_softcapping
_GEMMA2_SEEDS = {"F32": 1700, "Q4_K": 1708}  # Q4_K: greedy steps clear of near-ties (top two >= 0.15 apart)
ALL_MODELS += list(GEMMA2_MODELS)
# gemma (Gemma 1 2B's shape: one KV head, head_dim * n_head != n_embd, tied output, no post norms):
# 2 layers; F32 and Q4_K
GEMMA_MODELS = (("gemma", "F32"), ("gemma", "Q4_K"))
_GEMMA_SEEDS = {"F32": 1800, "Q4_K": 1818}  # Q4_K: greedy steps clear of near-ties (top two >= 0.16 apart)
ALL_MODELS += list(GEMMA_MODELS)
# smollm3 (SmolLM3-3B's shape: GQA, tied output, GPT-2 BPE): 4 layers, the last without rope
# (llama.cpp's every fourth); F32 and Q8_0
SMOLLM3_MODELS = (("smollm3", "F32"), ("smollm3", "Q8_0"))
_SMOLLM3_SEEDS = {"F32": 1900, "Q8_0": 1901}
ALL_MODELS += list(SMOLLM3_MODELS)
# lfm2 (LFM2-350M's shape, written by `write_lfm2`): 6 layers "CCACAC" (C a short conv of kernel 3,
# A attention of 4 heads (2 KV) of 64 with Q/K norms, NeoX rope), each with a SiLU-gated FFN; the
# final norm `token_embd_norm`, tied output; F32 and Q8_0
LFM2_MODELS = (("lfm2", "F32"), ("lfm2", "Q8_0"))
_LFM2 = {"F32": (QT.F32, 2000), "Q8_0": (QT.Q8_0, 2001)}
ALL_MODELS += list(LFM2_MODELS)
# lfm2moe (LFM2-8B-A1B's shape): lfm2's layers with, after 2 dense ones, 8 SiLU-gated experts of
# 256 rows, top 2 by sigmoid + exp_probs_b, normalised; F32 and Q8_0
LFM2MOE_MODELS = (("lfm2moe", "F32"), ("lfm2moe", "Q8_0"))
_LFM2MOE = {"F32": (QT.F32, 2010), "Q8_0": (QT.Q8_0, 2011)}
ALL_MODELS += list(LFM2MOE_MODELS)
# minimax-m2 (MiniMax-M2's shape: head_dim * n_head != n_embd, GQA): 8 heads (2 KV) of 64, NeoX
# rope over 32 of them, Q/K RMS norms over all of q (512) and of k (128), 16 experts of
# feed_forward_length (256) rows (expert_feed_forward_length the same, as its converter writes),
# top 4 by sigmoid + exp_probs_b, normalised; F32, and Q8_0 with DEEPSEEK2_TIED's pairs of equal
# router rows and selection biases (exact ties at the top-k edge). seed_oss (Seed-OSS-36B's shape):
# 8 heads (2 KV) of 64, Q/K/V biases, the pre-FFN norm as post_attention_norm; F32 and Q8_0
MINIMAX_M2_MODELS = (("minimax-m2", "F32"), ("minimax-m2", "Q8_0"))
SEED_OSS_MODELS = (("seed_oss", "F32"), ("seed_oss", "Q8_0"))
_M2_SEEDS = {("minimax-m2", "F32"): 1900, ("minimax-m2", "Q8_0"): 1904, ("seed_oss", "F32"): 1955,
             ("seed_oss", "Q8_0"): 1955}
# (seeds: greedy steps' top two >= 0.07 apart, every logit llama.cpp's to the bit on the Q8_0 files;
# seed_oss's 1950/1951 had greedy steps 0.009 and 0.004 apart)
ALL_MODELS += list(MINIMAX_M2_MODELS) + list(SEED_OSS_MODELS)
# gemma4 (Gemma 4 31B's layout: write_gemma4): 4 layers; sliding ones (0, 2: window 16, head size
# 64, 2 KV heads, all 64 dims rotated with base 10000) and full ones (1, 3: head size 128, one KV
# head, V = K's projection (no attn_v), base 1e6 with proportional rope factors: 16 of 64 pairs
# rotate); a layer_output_scale per layer; logits capped at 8; F32 and Q4_K
GEMMA4_MODELS = (("gemma4", "F32"), ("gemma4", "Q4_K"))
_GEMMA4_SEEDS = {"F32": 1900, "Q4_K": 1922}  # Q4_K: greedy steps clear of near-ties (top two >= 0.09 apart)
ALL_MODELS += list(GEMMA4_MODELS)
_GEMMAS = ("gemma3", "gemma2", "gemma", "gemma4")  # SPM vocabulary with turn tokens, no space prefix, scaled embeddings
_POST_NORMS = ("gemma3", "gemma2")
# granite (Granite 3.x dense) and granitemoe (Granite 3.x MoE): the Llama block with Granite's
# multipliers (granite 3.x's embedding 12, residual 0.22, attention 1/128, logits / 2) and a tied
# output; granite F32 and Q4_K, 2 layers; granitemoe 8 experts of feed_forward_length (256) rows,
# top 2, F32, Q8_0 with a shared FFN of 512 rows (GraniteMoeShared), F32_TIE: 32 experts, top 4,
# TIED_EXPERTS' pairs of equal router rows. Their seeds are their own
GRANITE_MODELS = (("granite", "F32"), ("granite", "Q4_K"), ("granitemoe", "F32"), ("granitemoe", "Q8_0"),
                  ("granitemoe", "F32_TIE"))
_GRANITE_SEEDS = {("granite", "F32"): 1700, ("granite", "Q4_K"): 1701, ("granitemoe", "F32"): 1710,
                  ("granitemoe", "Q8_0"): 1711, ("granitemoe", "F32_TIE"): 1712}
ALL_MODELS += list(GRANITE_MODELS)

_WEIGHT_TYPE = {"F32": QT.F32, "F16": QT.F16, "Q8_0": QT.Q8_0, "Q4_K": QT.Q4_K, "F32_ROPE_FREQS": QT.F32,
                "F32_TIE": QT.F32, "F32_LONGROPE": QT.F32, "F32_SPLIT": QT.F32,
                **{t.name: t for t in LOW_BIT_TYPES}, "Q8_0_W160": QT.Q8_0,
                "F32_IDEFICS3": QT.F32,
                **{t.name: t for t in SPLIT_TYPES}}  # (seeds: a variant's place, so new ones go last)
# llama F32 whose SPM vocabulary also holds SmolVLM's image tokens (IDEFICS3_TOKENS, after the
# others): the text model of the idefics3 projector's libmtmd fixtures (scripts/mmproj_fixtures.py)
IDEFICS3_MODEL = ("llama", "F32_IDEFICS3")
IDEFICS3_TOKENS = ("\n\n", "<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>",
                   "<|im_start|>", *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)))


@dataclass(frozen=True)
class TinyConfig:
    arch: str
    n_embd: int = 256
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 512
    n_ctx_train: int = 256
    rms_eps: float = 1e-5
    rope_base: float = 10000.0
    sliding_window: int = 0            # gemma3, gemma2, gpt-oss
    tied_output: bool = False
    qkv_bias: bool = False             # qwen2
    qk_norm: bool = False              # qwen3, gemma3
    rope_freqs: bool = False           # llama3-style frequency factors
    n_expert: int = 0                  # qwen3moe: experts, used per token, rows per expert
    n_expert_used: int = 0
    n_ff_exp: int = 0
    tied_experts: tuple = ()           # pairs of experts given the same router row
    n_rot: int = 0                     # rotated dims per head (0: all); phi3: 3/4
    fused: bool = False                # phi3: attn_qkv and ffn_up = gate|up
    yarn: tuple = ()                   # gpt-oss: (rope.scaling.factor, original_context_length)
    longrope: int = 0                  # phi3: rope.scaling.original_context_length (0: no factors)
    attn_factor: float = 1.0           # phi3: rope.scaling.attn_factor
    spm: bool = True                   # SPM vocab (else GPT-2 BPE)
    seed: int = 0
    extra: dict = field(default_factory=dict)


def tiny_config(arch: str, variant: str = "F32") -> TinyConfig:
    """The hyperparameters of a tiny model (what the GGUF metadata says)."""
    if (arch, variant) in ODD_WIDTH_MODELS:  # the Q8_0 model's weights, 160 wide (same seed)
        return dataclasses.replace(tiny_config(arch, "Q8_0"), n_embd=160)
    if arch in ("nemotron_h", "nemotron_h_moe"):
        moe = arch == "nemotron_h_moe"
        if variant not in (_NEMOTRONH_MOE if moe else _NEMOTRONH):
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return TinyConfig(arch, n_layer=6, n_head=4, n_head_kv=2, head_dim=64, n_ff=256 if moe else 768, spm=False,
                          n_expert=8 if moe else 0, n_expert_used=2 if moe else 0, n_ff_exp=256 if moe else 0,
                          seed=(_NEMOTRONH_MOE if moe else _NEMOTRONH)[variant][1],
                          extra={"pattern": "M-M*-M", "d_conv": 4, "d_state": 64, "ssm_heads": 8, "ssm_groups": 2,
                                 "n_ff_shexp": 512, "weights_scale": 2.5})
    if arch == "granitehybrid":
        if (arch, variant) not in GRANITEHYBRID_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        moe = variant == "F32_MOE"
        return TinyConfig(arch, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=256 if moe else 512,
                          tied_output=True, spm=False, n_expert=8 if moe else 0, n_expert_used=2 if moe else 0,
                          seed=_GRANITEHYBRID[variant][1],
                          extra={"attn_layers": (2,), "rope": variant == "F32_ROPE", "d_conv": 4, "d_state": 64,
                                 "n_ff_shexp": 512 if moe else 0,
                                 "ssm_heads": 8, "embedding_scale": 12.0, "residual_scale": 0.22,
                                 "attention_scale": 0.0078125, "logit_scale": 2.0})
    if arch in _DELTA_NET:
        if variant not in _DELTA_NET[arch]:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        moe = arch != "qwen35"
        return TinyConfig(arch, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, rope_base=10000000.0,
                          rms_eps=1e-6, tied_output=True, qk_norm=True, spm=False, n_rot=16,
                          n_expert=8 if moe else 0, n_expert_used=2 if moe else 0, n_ff_exp=256 if moe else 0,
                          seed=_DELTA_NET[arch][variant][1],
                          extra={"sections": (3, 3, 2, 0), "interval": 4, "d_conv": 4, "d_state": 64,
                                 "k_heads": 2, "v_heads": 4})
    if arch == "qwen3moe":
        if (arch, variant) not in MOE_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        tie = variant == "F32_TIE"
        return TinyConfig(arch, n_layer=2, rope_base=1000000.0, rms_eps=1e-6, qk_norm=True, spm=False,
                          n_expert=32 if tie else 8, n_expert_used=4 if tie else 2, n_ff_exp=256,
                          tied_experts=TIED_EXPERTS if tie else (), seed=900 + list(_WEIGHT_TYPE).index(variant))
    if arch == "gpt-oss":
        if (arch, variant) not in GPTOSS_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        # as gpt-oss-20b: head_dim * n_head != n_embd, rope base 150000, YaRN 32x from 4096
        return TinyConfig(arch, n_layer=4, n_head=8, n_head_kv=2, head_dim=64, n_ff=256, n_ctx_train=131072,
                          rope_base=150000.0, rms_eps=1e-5, sliding_window=8, qkv_bias=True, spm=False,
                          n_expert=8, n_expert_used=4, n_ff_exp=256, yarn=(32.0, 4096),
                          seed=1150 + list(_WEIGHT_TYPE).index(variant))
    if arch == "phi3":
        if (arch, variant) not in PHI3_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        split = variant == "F32_SPLIT"
        long = variant == "F32_LONGROPE"
        return TinyConfig(arch, n_layer=2, n_head=4, n_head_kv=2, head_dim=64, rope_base=10000.0, rms_eps=1e-5,
                          n_rot=48, fused=not split, longrope=0 if split else 64 if long else 256,
                          attn_factor=1.19 if long else 1.0, seed=1000 + list(_WEIGHT_TYPE).index(variant))
    if arch == "mistral3":
        if (arch, variant) not in MISTRAL3_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return TinyConfig(arch, n_layer=2, n_head=8, n_head_kv=2, head_dim=64, n_ctx_train=256, rope_base=1000000.0,
                          rms_eps=1e-5, yarn=(16.0, 16), seed=_SEEDS[(arch, variant)],
                          extra={"yarn_beta_fast": 16.0, "yarn_beta_slow": 2.0, "yarn_log_mul": 1.0, "temp_scale": 0.1})
    if arch == "glm4moe":
        if (arch, variant) not in GLM4MOE_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return TinyConfig(arch, n_layer=3, n_head=8, n_head_kv=2, head_dim=64, n_ff=512, rope_base=1000000.0,
                          rms_eps=1e-5, qkv_bias=True, qk_norm=variant == "F32", spm=False, n_rot=32,
                          n_expert=16, n_expert_used=4, n_ff_exp=256, seed=_SEEDS[(arch, variant)],
                          extra={"n_shared": 1, "n_dense_lead": 1, "n_nextn": 1, "weights_scale": 2.5})
    if arch == "deepseek2":
        if (arch, variant) not in DEEPSEEK2_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        v3, q8 = variant == "F32_V3", variant == "Q8_0"
        return TinyConfig(arch, n_layer=3, n_head=4, n_head_kv=1, head_dim=128, n_ff=512, n_ctx_train=1280,
                          rope_base=10000.0, rms_eps=1e-6, spm=False, n_rot=32 if q8 else 64, n_expert=16, n_expert_used=4,
                          n_ff_exp=128, tied_experts=DEEPSEEK2_TIED if q8 else (), yarn=(40.0, 32),
                          seed=_DEEPSEEK2_SEEDS[variant],
                          extra={"q_lora": 128 if v3 else 0, "kv_lora": 96 if q8 else 128, "head_dim_v": 64, "n_shared": 2,
                                 "n_dense_lead": 1, "absorbed": variant != "F32_KVB", "v3": v3,
                                 "mscale_all_dim": 1.0 if v3 else 0.707, "weights_scale": 2.5 if v3 else 1.0,
                                 "n_group": 4 if v3 else 0, "n_group_used": 2 if v3 else 0})
    if arch == "gemma2":
        if (arch, variant) not in GEMMA2_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return TinyConfig(arch, n_layer=4, n_head=4, n_head_kv=2, head_dim=128, n_ff=512, rope_base=10000.0,
                          rms_eps=1e-6, tied_output=True, sliding_window=16,
                          seed=_GEMMA2_SEEDS[variant])
    if arch == "gemma":
        if (arch, variant) not in GEMMA_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return TinyConfig(arch, n_layer=2, n_head=4, n_head_kv=1, head_dim=128, n_ff=512, rope_base=10000.0,
                          rms_eps=1e-6, tied_output=True, seed=_GEMMA_SEEDS[variant])
    if arch in ("granite", "granitemoe"):
        if (arch, variant) not in GRANITE_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        moe, tie = arch == "granitemoe", variant == "F32_TIE"
        n_ff = 256 if moe else 512
        return TinyConfig(arch, n_layer=2, n_head=4, n_head_kv=2, head_dim=64, n_ff=n_ff, tied_output=True, spm=False,
                          n_expert=(32 if tie else 8) if moe else 0, n_expert_used=(4 if tie else 2) if moe else 0,
                          tied_experts=TIED_EXPERTS if tie else (),
                          seed=_GRANITE_SEEDS[(arch, variant)],
                          extra={"embedding_scale": 12.0, "residual_scale": 0.22, "attention_scale": 0.0078125,
                                 "logit_scale": 2.0, "n_ff_shexp": 512 if variant == "Q8_0" else 0})
    if arch == "gemma4":
        if (arch, variant) not in GEMMA4_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return TinyConfig(arch, n_layer=4, n_head=4, n_head_kv=2, head_dim=128, n_ff=512, rope_base=1000000.0,
                          rms_eps=1e-6, tied_output=True, qk_norm=True, sliding_window=16, seed=_GEMMA4_SEEDS[variant],
                          extra={"swa": (True, False, True, False), "head_dim_swa": 64, "n_head_kv_full": 1,
                                 "rope_base_swa": 10000.0, "final_softcap": 8.0, "rotated_pairs_full": 16})
    if arch == "qwen2vl":
        if (arch, variant) not in QWEN2VL_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return dataclasses.replace(tiny_config("qwen2", variant), arch=arch, seed=1500 + list(_WEIGHT_TYPE).index(variant),
                                   extra={"rope_sections": QWEN2VL_SECTIONS})
    if arch in ("olmoe", "qwen2moe"):
        if (arch, variant) not in OLMOE_MODELS + QWEN2MOE_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        olmoe = arch == "olmoe"
        return TinyConfig(arch, n_layer=2, n_head=4, n_head_kv=4 if olmoe else 2, head_dim=64, n_ff=256 if olmoe else 512,
                          rope_base=10000.0 if olmoe else 1000000.0, rms_eps=1e-5 if olmoe else 1e-6, qkv_bias=not olmoe,
                          qk_norm=olmoe, spm=False, n_expert=16, n_expert_used=4, n_ff_exp=0 if olmoe else 256,
                          tied_experts=DEEPSEEK2_TIED if variant != "F32" else (), seed=_MOE_SEEDS[(arch, variant)],
                          extra={"n_ff_shexp": 0 if olmoe else 512})
    if arch in ("lfm2", "lfm2moe"):
        moe = arch == "lfm2moe"
        if variant not in (_LFM2MOE if moe else _LFM2):
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return TinyConfig(arch, n_layer=6, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, rope_base=1000000.0,
                          rms_eps=1e-5, tied_output=True, qk_norm=True, spm=False,
                          n_expert=8 if moe else 0, n_expert_used=2 if moe else 0, n_ff_exp=256 if moe else 0,
                          seed=(_LFM2MOE if moe else _LFM2)[variant][1],
                          extra={"pattern": "CCACAC", "l_cache": 3, "n_dense_lead": 2 if moe else 0})
    if arch == "smollm3":
        if variant not in _SMOLLM3_SEEDS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        return TinyConfig(arch, n_layer=4, rope_base=10000.0, rms_eps=1e-6, tied_output=True, spm=False,
                          seed=_SMOLLM3_SEEDS[variant])
    if arch in ("minimax-m2", "seed_oss"):
        if (arch, variant) not in MINIMAX_M2_MODELS + SEED_OSS_MODELS:
            raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
        m2 = arch == "minimax-m2"
        return TinyConfig(arch, n_layer=2, n_head=8, n_head_kv=2, head_dim=64, n_ff=256 if m2 else 512,
                          rope_base=5000000.0 if m2 else 10000000.0, rms_eps=1e-6, qkv_bias=not m2, qk_norm=m2,
                          spm=False, n_rot=32 if m2 else 0, n_expert=16 if m2 else 0, n_expert_used=4 if m2 else 0,
                          n_ff_exp=256 if m2 else 0, tied_experts=DEEPSEEK2_TIED if m2 and variant != "F32" else (),
                          seed=_M2_SEEDS[(arch, variant)])
    if arch not in ARCHES:
        raise ValueError(f"unknown tiny arch {arch!r}")
    if (variant not in VARIANTS + ("F32_ROPE_FREQS",) or (variant == "F32_ROPE_FREQS" and arch != "llama")) and (
            (arch, variant) not in LOW_BIT_MODELS + SPLIT_MODELS + (IDEFICS3_MODEL,)):
        raise ValueError(f"unknown tiny variant {variant!r} for {arch}")
    seed = ARCHES.index(arch) * 100 + list(_WEIGHT_TYPE).index(variant)
    if arch == "llama":
        return TinyConfig(arch, n_layer=2, rope_base=10000.0, rms_eps=1e-5, tied_output=False,
                          rope_freqs=(variant == "F32_ROPE_FREQS"), seed=seed)
    if arch == "qwen2":
        return TinyConfig(arch, n_layer=2, rope_base=1000000.0, rms_eps=1e-6, tied_output=True,
                          qkv_bias=True, spm=False, seed=seed)
    if arch == "qwen3":
        return TinyConfig(arch, n_layer=3, rope_base=1000000.0, rms_eps=1e-6, tied_output=False,
                          qk_norm=True, spm=False, seed=seed)
    # gemma3: head_dim * n_head (512) != n_embd (256), one KV head like the 270M model
    return TinyConfig(arch, n_layer=6, n_head=4, n_head_kv=1, head_dim=128, n_ff=512,
                      rope_base=1000000.0, rms_eps=1e-6, tied_output=True, qk_norm=True,
                      sliding_window=8, seed=seed)


# ----------------------------------------------------------------------------- vocabularies

_CORPUS = (
    "the quick brown fox jumps over the lazy dog. a model reads the text and writes the next "
    "token. hello world! this is a tiny test of the tokenizer and the model. one two three four "
    "five six seven eight nine ten. numbers like 12345 and 2024 are split into digits. "
    "the cat sat on the mat and the dog ate the bone. we test greedy decoding, sampling, "
    "caching and sliding windows. it is what it is. there and then, here and now. "
    "when in doubt, print it out. is it in the cache or not? the end."
)


def _bpe_learn(words: dict[tuple[str, ...], int], n_merges: int) -> list[tuple[str, str]]:
    """Plain BPE: repeatedly merge the most frequent adjacent pair (ties: lexicographic)."""
    merges: list[tuple[str, str]] = []
    words = dict(words)
    for _ in range(n_merges):
        counts: dict[tuple[str, str], int] = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        if counts[best] < 2:
            break
        merges.append(best)
        new: dict[tuple[str, ...], int] = {}
        for w, c in words.items():
            out: list[str] = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return merges


@functools.lru_cache(maxsize=None)
def _spm_vocab(arch: str) -> tuple[tuple[str, ...], tuple[float, ...], tuple[int, ...], dict]:
    """SPM vocab: (tokens, scores, token_types, special ids)."""
    if arch in _GEMMAS:
        specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
        ids = {"pad": 0, "eos": 1, "bos": 2, "unk": 3}
        types = [TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL, TokenType.UNKNOWN,
                 TokenType.CONTROL, TokenType.CONTROL]
    else:
        specials = ["<unk>", "<s>", "</s>"]
        ids = {"unk": 0, "bos": 1, "eos": 2}
        types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    tokens = list(specials)
    scores = [0.0] * len(specials)
    ttypes = [int(t) for t in types]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        ttypes.append(int(TokenType.BYTE))
    # word pieces: characters of the corpus, then BPE merges; "▁" marks a preceding space
    words: dict[tuple[str, ...], int] = {}
    for w in _CORPUS.split(" "):
        key = tuple("\u2581" + w)
        words[key] = words.get(key, 0) + 1
    chars = sorted({ch for w in words for ch in w})
    pieces = list(chars) + [a + b for a, b in _bpe_learn(words, 260)]
    seen = set(tokens)
    rank = 0
    for p in pieces:
        if p in seen:
            continue
        seen.add(p)
        tokens.append(p)
        scores.append(-float(rank))
        ttypes.append(int(TokenType.NORMAL))
        rank += 1
    if arch == "phi3":  # Phi-3's added tokens at the end (llama.cpp looks <|endoftext|> up by name)
        for t in ("<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>"):
            tokens.append(t)
            scores.append(0.0)
            ttypes.append(int(TokenType.CONTROL))
    return tuple(tokens), tuple(scores), tuple(ttypes), ids


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


@functools.lru_cache(maxsize=None)
def _bpe_vocab() -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...], dict]:
    """GPT-2 byte-level vocab: (tokens, token_types, merges, special ids)."""
    b2u = _bytes_to_unicode()
    tokens = [b2u[b] for b in sorted(b2u, key=lambda b: ord(b2u[b]))]  # GPT-2 order
    # pre-tokenize roughly like GPT-2 (leading space attached to the word)
    words: dict[tuple[str, ...], int] = {}
    for i, w in enumerate(_CORPUS.split(" ")):
        text = (" " if i else "") + w
        key = tuple(b2u[b] for b in text.encode("utf-8"))
        words[key] = words.get(key, 0) + 1
    merges = _bpe_learn(words, 300)
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            seen.add(a + b)
            tokens.append(a + b)
    ttypes = [int(TokenType.NORMAL)] * len(tokens)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    ids = {}
    for s in specials:
        ids[s] = len(tokens)
        tokens.append(s)
        ttypes.append(int(TokenType.CONTROL))
    ids = {"bos": ids["<|endoftext|>"], "eos": ids["<|im_end|>"], "pad": ids["<|endoftext|>"],
           "endoftext": ids["<|endoftext|>"]}
    return tuple(tokens), tuple(ttypes), tuple(f"{a} {b}" for a, b in merges), ids


def vocab_size(arch: str) -> int:
    return len(_spm_vocab(arch)[0]) if tiny_config(arch).spm else len(_bpe_vocab()[0])


def special_ids(arch: str) -> dict:
    return dict(_spm_vocab(arch)[3]) if tiny_config(arch).spm else dict(_bpe_vocab()[3])


# ----------------------------------------------------------------------------- weights

def _f16_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float16).view(np.uint8).reshape(*np.shape(x), 2)


def _random_q4_k(rng: np.random.Generator, n_out: int, n_in: int, std: float) -> np.ndarray:
    """Random valid Q4_K blocks, as a (n_out, n_in // 256 * 144) uint8 array.

    d ~ std/147 * U(0.5, 1.5), dmin = f16(7.5 * d), 6-bit scales sc ~ U[16, 63], mins m within
    +-3 of sc, random nibbles: each 32-value sub-block is about d*sc*(q - 7.5), zero mean.
    """
    nb = n_in // 256
    shape = (n_out, nb)
    d = (std / 147.0 * rng.uniform(0.5, 1.5, size=shape)).astype(np.float16)
    dmin = (d.astype(np.float32) * 7.5).astype(np.float16)
    sc = rng.integers(16, 64, size=shape + (8,), dtype=np.uint8)
    m = np.clip(sc.astype(np.int16) + rng.integers(-3, 4, size=shape + (8,)), 0, 63).astype(np.uint8)
    scales = np.zeros(shape + (12,), dtype=np.uint8)
    scales[..., 0:4] = (sc[..., 0:4] & 63) | ((sc[..., 4:8] >> 4) << 6)
    scales[..., 4:8] = (m[..., 0:4] & 63) | ((m[..., 4:8] >> 4) << 6)
    scales[..., 8:12] = (sc[..., 4:8] & 0xF) | ((m[..., 4:8] & 0xF) << 4)
    qs = rng.integers(0, 256, size=shape + (128,), dtype=np.uint8)
    block = np.concatenate([_f16_bits(d), _f16_bits(dmin), scales, qs], axis=-1)  # (n_out, nb, 144)
    return np.ascontiguousarray(block.reshape(n_out, nb * 144))


def _add_matrix(w: gguf.GGUFWriter, name: str, rng: np.random.Generator, n_out: int, n_in: int,
                std: float, qtype: QT) -> None:
    """A 2-D weight with GGUF ne = [n_in, n_out] (numpy shape (n_out, n_in))."""
    if qtype == QT.Q4_K:
        w.add_tensor(name, _random_q4_k(rng, n_out, n_in, std), raw_dtype=QT.Q4_K)
        return
    if qtype in RANDOM_BLOCK_TYPES:
        w.add_tensor(name, random_blocks(qtype, n_out, n_in, std, rng), raw_dtype=qtype)
        return
    _add_values(w, name, (rng.standard_normal((n_out, n_in)) * std).astype(np.float32), qtype)


def _add_experts(w: gguf.GGUFWriter, name: str, rng: np.random.Generator, n_expert: int, n_out: int, n_in: int,
                 std: float, qtype: QT) -> None:
    """A 3-D expert tensor, GGUF ne = [n_in, n_out, n_expert] (numpy (n_expert, n_out, n_in))."""
    if qtype == QT.Q4_K or qtype in RANDOM_BLOCK_TYPES:
        rows = n_expert * n_out
        raw = _random_q4_k(rng, rows, n_in, std) if qtype == QT.Q4_K else random_blocks(qtype, rows, n_in, std, rng)
        w.add_tensor(name, raw.reshape(n_expert, n_out, -1), raw_dtype=qtype)
        return
    _add_values(w, name, (rng.standard_normal((n_expert, n_out, n_in)) * std).astype(np.float32), qtype)


def _add_values(w: gguf.GGUFWriter, name: str, x: np.ndarray, qtype: QT) -> None:
    """float32 values stored as F32, F16 or Q8_0."""
    if qtype == QT.F32:
        w.add_tensor(name, x)
    elif qtype == QT.F16:
        w.add_tensor(name, x.astype(np.float16))
    elif qtype == QT.Q8_0:
        w.add_tensor(name, gguf.quants.quantize(x, QT.Q8_0), raw_dtype=QT.Q8_0)
    else:  # pragma: no cover
        raise ValueError(qtype)


def _add_norm(w: gguf.GGUFWriter, name: str, rng: np.random.Generator, n: int, scale: float = 1.0) -> None:
    w.add_tensor(name, (scale * (1.0 + 0.1 * rng.standard_normal(n))).astype(np.float32))


def _add_gptoss_attention_extras(w: gguf.GGUFWriter, p: str, rng: np.random.Generator, cfg: TinyConfig) -> None:
    """gpt-oss: the attention output's bias and the per-head sink logits."""
    w.add_tensor(p + "attn_output.bias", (0.1 * rng.standard_normal(cfg.n_embd)).astype(np.float32))
    w.add_tensor(p + "attn_sinks.weight", (2.0 * rng.standard_normal(cfg.n_head)).astype(np.float32))


def _add_gptoss_moe_biases(w: gguf.GGUFWriter, p: str, rng: np.random.Generator, cfg: TinyConfig) -> None:
    """gpt-oss: the router's bias and each expert's gate, up and down biases ((n_expert, n_out))."""
    X, F = cfg.n_expert, cfg.n_ff_exp
    w.add_tensor(p + "ffn_gate_inp.bias", (0.5 * rng.standard_normal(X)).astype(np.float32))
    for name, n in (("ffn_gate_exps", F), ("ffn_up_exps", F), ("ffn_down_exps", cfg.n_embd)):
        w.add_tensor(p + name + ".bias", (0.1 * rng.standard_normal((X, n))).astype(np.float32))


def _add_family_keys(w: gguf.GGUFWriter, cfg: TinyConfig) -> None:
    """mistral3's YaRN and temperature keys, glm4moe's router and layer-layout keys, gemma2's caps."""
    x = cfg.extra
    if cfg.arch == "mistral3":
        w.add_rope_scaling_yarn_beta_fast(x["yarn_beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(x["yarn_beta_slow"])
        w.add_rope_scaling_yarn_log_mul(x["yarn_log_mul"])
        w.add_attn_temperature_scale(x["temp_scale"])
    if cfg.arch == "gemma2":
        w.add_attn_logit_softcapping(_GEMMA2_CAPS[0])
        w.add_final_logit_softcapping(_GEMMA2_CAPS[1])
    if "rope_sections" in x:
        w.add_rope_dimension_sections(list(x["rope_sections"]))
    if cfg.arch in ("granite", "granitemoe"):
        w.add_embedding_scale(x["embedding_scale"])
        w.add_residual_scale(x["residual_scale"])
        w.add_attention_scale(x["attention_scale"])
        w.add_logit_scale(x["logit_scale"])
        if x["n_ff_shexp"]:
            w.add_expert_shared_feed_forward_length(x["n_ff_shexp"])
    if cfg.arch == "glm4moe":
        w.add_expert_shared_count(x["n_shared"])
        w.add_leading_dense_block_count(x["n_dense_lead"])
        w.add_nextn_predict_layers(x["n_nextn"])
        w.add_expert_weights_scale(x["weights_scale"])
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if cfg.arch == "qwen2moe":
        w.add_expert_shared_feed_forward_length(x["n_ff_shexp"])
    if cfg.arch == "minimax-m2":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


def _add_glm4moe_extras(w: gguf.GGUFWriter, p: str, rng: np.random.Generator, cfg: TinyConfig, qtype: QT,
                        nextn: bool) -> None:
    """glm4moe: the experts' selection bias, the shared expert, and on the nextn layer its
    multi-token-prediction tensors (which llama.cpp, and we, leave unread)."""
    E, XF = cfg.n_embd, cfg.n_ff_exp * cfg.extra["n_shared"]
    w.add_tensor(p + "exp_probs_b.bias", (0.05 * rng.standard_normal(cfg.n_expert)).astype(np.float32))
    _add_matrix(w, p + "ffn_gate_shexp.weight", rng, XF, E, E ** -0.5, qtype)
    _add_matrix(w, p + "ffn_up_shexp.weight", rng, XF, E, E ** -0.5, qtype)
    _add_matrix(w, p + "ffn_down_shexp.weight", rng, E, XF, XF ** -0.5, qtype)
    if nextn:
        _add_matrix(w, p + "nextn.eh_proj.weight", rng, E, 2 * E, (2 * E) ** -0.5, qtype)
        for nm in ("nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"):
            _add_norm(w, p + nm, rng, E)


def _add_gated_shared_expert(w: gguf.GGUFWriter, p: str, rng: np.random.Generator, E: int, XF: int, qtype: QT) -> None:
    """qwen2moe: the shared expert's gate row (F32, as the converter keeps 1-D tensors) and its FFN."""
    w.add_tensor(p + "ffn_gate_inp_shexp.weight", (rng.standard_normal(E) * 2 * E ** -0.5).astype(np.float32))
    _add_shared_ffn(w, p, rng, E, XF, qtype)


def _add_shared_ffn(w: gguf.GGUFWriter, p: str, rng: np.random.Generator, E: int, XF: int, qtype: QT) -> None:
    """A shared expert's gated FFN of XF rows (qwen2moe; granitemoe: GraniteMoeShared's)."""
    _add_matrix(w, p + "ffn_gate_shexp.weight", rng, XF, E, E ** -0.5, qtype)
    _add_matrix(w, p + "ffn_up_shexp.weight", rng, XF, E, E ** -0.5, qtype)
    _add_matrix(w, p + "ffn_down_shexp.weight", rng, E, XF, XF ** -0.5, qtype)


def _add_bpe_vocab(w: gguf.GGUFWriter) -> tuple[str, ...]:
    """The GPT-2 byte-level BPE tokenizer keys; returns the tokens."""
    tokens, ttypes, merges, ids = _bpe_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(list(tokens))
    w.add_token_types(list(ttypes))
    w.add_token_merges(list(merges))
    w.add_bos_token_id(ids["bos"])
    w.add_eos_token_id(ids["eos"])
    w.add_pad_token_id(ids["pad"])
    w.add_add_bos_token(False)
    return tokens


def _add_spm_vocab(w: gguf.GGUFWriter, arch: str, variant: str) -> tuple[str, ...]:
    """The SPM tokenizer keys of the llama-like and Gemma tiny models; returns the tokens."""
    tokens, scores, ttypes, ids = _spm_vocab(arch)
    if (arch, variant) == IDEFICS3_MODEL:  # "\n\n" a word piece (least preferred), the rest control tokens
        tokens += IDEFICS3_TOKENS
        scores += (-1000.0,) + (0.0,) * (len(IDEFICS3_TOKENS) - 1)
        ttypes += (int(TokenType.NORMAL),) + (int(TokenType.CONTROL),) * (len(IDEFICS3_TOKENS) - 1)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(list(tokens))
    w.add_token_scores(list(scores))
    w.add_token_types(list(ttypes))
    w.add_bos_token_id(ids["bos"])
    w.add_eos_token_id(ids["eos"])
    w.add_unk_token_id(ids["unk"])
    if "pad" in ids:
        w.add_pad_token_id(ids["pad"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if arch in _GEMMAS:
        w.add_add_space_prefix(False)
    return tokens


def _new_writer(cfg: TinyConfig, path: Path, n_ff: list[int] | None = None) -> gguf.GGUFWriter:
    """A writer for cfg's file with its name and the first size keys (context, width, layers,
    FFN rows (n_ff: per layer), heads), in the order llama.cpp's converter writes them."""
    w = gguf.GGUFWriter(str(path), cfg.arch)
    w.add_name(f"tiny-{cfg.arch}")
    w.add_context_length(cfg.n_ctx_train)
    w.add_embedding_length(cfg.n_embd)
    w.add_block_count(cfg.n_layer)
    w.add_feed_forward_length(cfg.n_ff if n_ff is None else n_ff)
    w.add_head_count(cfg.n_head)
    return w


def _add_vocab_embd_norm(w: gguf.GGUFWriter, rng: np.random.Generator, E: int, qtype: QT,
                         norm: str = "output_norm.weight") -> int:
    """An F32 or Q8_0 file's type keys, the BPE vocabulary, token_embd and the final norm `norm`
    (rng in that order: the hybrid and deepseek2 writers); the vocabulary's size."""
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32 if qtype == QT.F32 else gguf.LlamaFileType.MOSTLY_Q8_0))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    n_vocab = len(_add_bpe_vocab(w))
    _add_matrix(w, "token_embd.weight", rng, n_vocab, E, 0.25, qtype)
    signs = np.where(rng.random(E) < 0.5, -1.0, 1.0)
    w.add_tensor(norm, (signs * (1.0 + 0.1 * rng.standard_normal(E))).astype(np.float32))
    return n_vocab


def _write_out(w: gguf.GGUFWriter, path: Path) -> Path:
    """The writer's header, metadata and tensors to its file; the file's path."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_model(arch: str, variant: str, path: str | os.PathLike) -> Path:
    """Write the tiny (arch, variant) model to `path` and return it as a Path."""
    if arch in ("nemotron_h", "nemotron_h_moe"):
        qt, seed = (_NEMOTRONH_MOE if arch == "nemotron_h_moe" else _NEMOTRONH)[variant]
        return write_nemotronh(tiny_config(arch, variant), qt, Path(path), np.random.default_rng(seed))
    if arch in ("lfm2", "lfm2moe"):
        qt, seed = (_LFM2MOE if arch == "lfm2moe" else _LFM2)[variant]
        return write_lfm2(tiny_config(arch, variant), qt, Path(path), np.random.default_rng(seed))
    if arch == "granitehybrid":
        qt, seed = _GRANITEHYBRID[variant]
        return write_granitehybrid(tiny_config(arch, variant), qt, Path(path), np.random.default_rng(seed))
    if arch in _DELTA_NET:
        qt, seed = _DELTA_NET[arch][variant]
        return write_qwen35(tiny_config(arch, variant), qt, Path(path), np.random.default_rng(seed))
    if arch == "gemma4":
        return write_gemma4(tiny_config(arch, variant), _WEIGHT_TYPE[variant], Path(path))
    if arch == "deepseek2":
        cfg = tiny_config(arch, variant)
        return write_deepseek2(cfg, QT.Q8_0 if variant == "Q8_0" else QT.F32, Path(path),
                               np.random.default_rng(cfg.seed))
    cfg = tiny_config(arch, variant)
    qtype = _WEIGHT_TYPE[variant]
    path = Path(path)
    rng = np.random.default_rng(cfg.seed)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}-{variant}")
    w.add_context_length(cfg.n_ctx_train)
    w.add_embedding_length(cfg.n_embd)
    w.add_block_count(cfg.n_layer + cfg.extra.get("n_nextn", 0))
    w.add_feed_forward_length(cfg.n_ff)
    w.add_head_count(cfg.n_head)
    w.add_head_count_kv(cfg.n_head_kv)
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    if arch not in _GEMMAS:
        w.add_rope_dimension_count(cfg.n_rot or cfg.head_dim)
    if cfg.longrope:
        w.add_rope_scaling_orig_ctx_len(cfg.longrope)
        w.add_rope_scaling_attn_factors(cfg.attn_factor)
    if cfg.sliding_window:
        w.add_sliding_window(cfg.sliding_window)
    if cfg.yarn:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(cfg.yarn[0])
        w.add_rope_scaling_orig_ctx_len(cfg.yarn[1])
    if cfg.n_expert:
        w.add_expert_count(cfg.n_expert)
        w.add_expert_used_count(cfg.n_expert_used)
        if cfg.n_ff_exp:  # (olmoe's experts: feed_forward_length rows)
            w.add_expert_feed_forward_length(cfg.n_ff_exp)
    _add_family_keys(w, cfg)
    ftype = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
             "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M,
             "F32_ROPE_FREQS": gguf.LlamaFileType.ALL_F32, "F32_TIE": gguf.LlamaFileType.ALL_F32,
             "F32_LONGROPE": gguf.LlamaFileType.ALL_F32, "F32_SPLIT": gguf.LlamaFileType.ALL_F32,
             **{t.name: getattr(gguf.LlamaFileType, "MOSTLY_MXFP4_MOE" if t == QT.MXFP4 else f"MOSTLY_{t.name}")
                for t in LOW_BIT_TYPES},
             # (llama.h LLAMA_FTYPE_MOSTLY_NVFP4, _Q1_0, _Q2_0; gguf-py lacks the last)
             **{t.name: {QT.NVFP4: 39, QT.Q1_0: 40}.get(t, 41) for t in SPLIT_TYPES},
             "Q8_0_W160": gguf.LlamaFileType.MOSTLY_Q8_0, "F32_IDEFICS3": gguf.LlamaFileType.ALL_F32}[variant]
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # vocabulary
    tokens = _add_spm_vocab(w, arch, variant) if cfg.spm else _add_bpe_vocab(w)
    n_vocab = len(tokens)

    E, F, H, HKV, D = cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv, cfg.head_dim
    # gemma3 scales the embeddings by sqrt(n_embd) = 16 and ties the output: keep the residual
    # stream from being dominated by the token's own embedding (else top-1 = input token)
    emb_std = 0.15 if arch in _GEMMAS else 0.25
    # tensors (norms F32, matrices in the variant's type)
    _add_matrix(w, "token_embd.weight", rng, n_vocab, E, emb_std, qtype)
    # output norm with random signs: with a tied output the logit of the input token would
    # otherwise get a large self term e.(e + ...) and greedy decoding would repeat one token
    signs = np.where(rng.random(E) < 0.5, -1.0, 1.0)
    w.add_tensor("output_norm.weight", (signs * (1.0 + 0.1 * rng.standard_normal(E))).astype(np.float32))
    if not cfg.tied_output:
        # gpt-oss: logits of a smaller scale (its experts' activations are large, to reach the
        # clamps, and F16's activation rounding grows with them)
        _add_matrix(w, "output.weight", rng, n_vocab, E, 0.15 if arch == "gpt-oss" else emb_std, qtype)
    if cfg.rope_freqs:
        # llama3-style factors: 1 for high frequencies, up to 8 for the lowest ones
        ff = np.ones(D // 2, dtype=np.float32)
        ff[D // 4:] = np.linspace(1.0, 8.0, D // 2 - D // 4, dtype=np.float32)
        w.add_tensor("rope_freqs.weight", ff)
    if cfg.longrope:  # LongRoPE: short factors near 1, long ones up to ~40 for the low frequencies
        half = cfg.n_rot // 2
        w.add_tensor("rope_factors_long.weight", np.geomspace(1.0, 40.0, half).astype(np.float32))
        w.add_tensor("rope_factors_short.weight", (1.0 + 0.1 * rng.random(half)).astype(np.float32))
    for il in range(cfg.n_layer + cfg.extra.get("n_nextn", 0)):
        p = f"blk.{il}."
        _add_norm(w, p + "attn_norm.weight", rng, E)
        if cfg.fused:  # Q, K, V rows in one tensor
            _add_matrix(w, p + "attn_qkv.weight", rng, (H + 2 * HKV) * D, E, E ** -0.5, qtype)
        else:
            _add_matrix(w, p + "attn_q.weight", rng, H * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_k.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_v.weight", rng, HKV * D, E, E ** -0.5, qtype)
        if cfg.qkv_bias:
            for nm, n in (("attn_q", H * D), ("attn_k", HKV * D), ("attn_v", HKV * D)):
                w.add_tensor(p + nm + ".bias", (0.1 * rng.standard_normal(n)).astype(np.float32))
        if cfg.qk_norm:  # per head; olmoe, minimax-m2: over all of q and k
            whole = arch in ("olmoe", "minimax-m2")
            _add_norm(w, p + "attn_q_norm.weight", rng, H * D if whole else D)
            _add_norm(w, p + "attn_k_norm.weight", rng, HKV * D if whole else D)
        _add_matrix(w, p + "attn_output.weight", rng, E, H * D, (H * D) ** -0.5, qtype)
        if arch == "gpt-oss":
            _add_gptoss_attention_extras(w, p, rng, cfg)
        if arch in _POST_NORMS:
            _add_norm(w, p + "post_attention_norm.weight", rng, E, 4.0)
        # gpt-oss, glm4moe and seed_oss name their pre-FFN norm post_attention_norm
        _add_norm(w, p + ("post_attention_norm.weight" if arch in ("gpt-oss", "glm4moe", "seed_oss") else "ffn_norm.weight"),
                  rng, E)
        if cfg.n_expert and il >= cfg.extra.get("n_dense_lead", 0):
            # the router stays F32 (llama-quantize keeps ffn_gate_inp unquantized)
            router = (rng.standard_normal((cfg.n_expert, E)) * 2 * E ** -0.5).astype(np.float32)
            for a, b in cfg.tied_experts:
                router[b] = router[a]
            w.add_tensor(p + "ffn_gate_inp.weight", router)
            XF = cfg.n_ff_exp or F
            # gpt-oss: gate/up 4x larger, so that swiglu_oai's clamps at +-7 are reached
            big = 3.0 if arch == "gpt-oss" else 1.0
            _add_experts(w, p + "ffn_gate_exps.weight", rng, cfg.n_expert, XF, E, big * E ** -0.5, qtype)
            _add_experts(w, p + "ffn_up_exps.weight", rng, cfg.n_expert, XF, E, big * E ** -0.5, qtype)
            _add_experts(w, p + "ffn_down_exps.weight", rng, cfg.n_expert, E, XF, 2 / big ** 2 * XF ** -0.5, qtype)
            if arch == "gpt-oss":
                _add_gptoss_moe_biases(w, p, rng, cfg)
            if arch == "glm4moe":
                _add_glm4moe_extras(w, p, rng, cfg, qtype, il >= cfg.n_layer)
            if arch == "qwen2moe":
                _add_gated_shared_expert(w, p, rng, E, cfg.extra["n_ff_shexp"], qtype)
            if arch == "granitemoe" and cfg.extra["n_ff_shexp"]:  # GraniteMoeShared's shared FFN
                _add_shared_ffn(w, p, rng, E, cfg.extra["n_ff_shexp"], qtype)
            if arch == "minimax-m2":  # the selection bias, equal for tied experts
                bias = (0.05 * rng.standard_normal(cfg.n_expert)).astype(np.float32)
                for a, b in cfg.tied_experts:
                    bias[b] = bias[a]
                w.add_tensor(p + "exp_probs_b.bias", bias)
        elif arch == "phi3":  # gate rows then up rows in one tensor
            _add_matrix(w, p + "ffn_up.weight", rng, 2 * F, E, E ** -0.5, qtype)
            _add_matrix(w, p + "ffn_down.weight", rng, E, F, F ** -0.5, qtype)
        else:
            _add_matrix(w, p + "ffn_gate.weight", rng, F, E, E ** -0.5, qtype)
            _add_matrix(w, p + "ffn_up.weight", rng, F, E, E ** -0.5, qtype)
            _add_matrix(w, p + "ffn_down.weight", rng, E, F, F ** -0.5, qtype)
        if arch in _POST_NORMS:
            _add_norm(w, p + "post_ffw_norm.weight", rng, E, 4.0)

    return _write_out(w, path)


def _add_mamba2(w: gguf.GGUFWriter, p: str, rng: np.random.Generator, E: int, d_inner: int, G: int, N: int, W: int,
                SH: int, qtype: QT) -> None:
    """A Mamba-2 layer's tensors as the converter stores them: ssm_a = -exp(A_log) (rates 1..16),
    ssm_dt.bias = softplus^-1 of dt in [0.001, 0.1], ssm_conv1d (C, W), ssm_norm (G, d_inner / G)."""
    C = d_inner + 2 * G * N
    _add_matrix(w, p + "ssm_in.weight", rng, 2 * d_inner + 2 * G * N + SH, E, E ** -0.5, qtype)
    w.add_tensor(p + "ssm_conv1d.weight", (0.5 * rng.standard_normal((C, W))).astype(np.float32))
    w.add_tensor(p + "ssm_conv1d.bias", (0.1 * rng.standard_normal(C)).astype(np.float32))
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), SH))
    w.add_tensor(p + "ssm_dt.bias", np.log(np.expm1(dt)).astype(np.float32))
    w.add_tensor(p + "ssm_a", (-rng.uniform(1.0, 16.0, (SH, 1))).astype(np.float32))
    w.add_tensor(p + "ssm_d", (1.0 + 0.1 * rng.standard_normal((SH, 1))).astype(np.float32))
    w.add_tensor(p + "ssm_norm.weight", (1.0 + 0.1 * rng.standard_normal((G, d_inner // G))).astype(np.float32))
    _add_matrix(w, p + "ssm_out.weight", rng, E, d_inner, d_inner ** -0.5, qtype)


def write_granitehybrid(cfg: TinyConfig, qtype: QT, path: Path, rng: np.random.Generator) -> Path:
    """granitehybrid: the keys and tensor names llama.cpp's converter writes for Granite 4.0-H
    (conversion/granite.py): head_count_kv per layer (0: a Mamba-2 layer), `ssm.*`, the Granite
    multipliers, rope.scaling.finetuned; a tied output; Mamba-2's tensors (_add_mamba2) of one
    group."""
    x = cfg.extra
    E, F, H, HKV, D = cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv, cfg.head_dim
    d_inner, N, W, SH = 2 * E, x["d_state"], x["d_conv"], x["ssm_heads"]
    a = cfg.arch
    w = _new_writer(cfg, path)
    w.add_head_count_kv([HKV if il in x["attn_layers"] else 0 for il in range(cfg.n_layer)])
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_rope_dimension_count(D)
    w.add_rope_scaling_finetuned(x["rope"])
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_embedding_scale(x["embedding_scale"])
    w.add_residual_scale(x["residual_scale"])
    w.add_attention_scale(x["attention_scale"])
    w.add_logit_scale(x["logit_scale"])
    w.add_ssm_conv_kernel(W)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(N)
    w.add_ssm_time_step_rank(SH)
    w.add_ssm_group_count(1)
    if cfg.n_expert:
        w.add_expert_count(cfg.n_expert)
        w.add_expert_used_count(cfg.n_expert_used)
        w.add_expert_shared_feed_forward_length(x["n_ff_shexp"])
    _add_vocab_embd_norm(w, rng, E, qtype)
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        _add_norm(w, p + "attn_norm.weight", rng, E)
        if il in x["attn_layers"]:
            _add_matrix(w, p + "attn_q.weight", rng, H * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_k.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_v.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_output.weight", rng, E, H * D, (H * D) ** -0.5, qtype)
        else:
            _add_mamba2(w, p, rng, E, d_inner, 1, N, W, SH, qtype)
        _add_norm(w, p + "ffn_norm.weight", rng, E)
        if cfg.n_expert:
            w.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((cfg.n_expert, E)) * 2 * E ** -0.5).astype(np.float32))
            for nm, rows, cols in (("gate", F, E), ("up", F, E), ("down", E, F)):
                _add_experts(w, p + f"ffn_{nm}_exps.weight", rng, cfg.n_expert, rows, cols, cols ** -0.5, qtype)
            S = x["n_ff_shexp"]
            for nm, rows, cols in (("gate", S, E), ("up", S, E), ("down", E, S)):
                _add_matrix(w, p + f"ffn_{nm}_shexp.weight", rng, rows, cols, cols ** -0.5, qtype)
            continue
        for nm, rows, cols in (("gate", F, E), ("up", F, E), ("down", E, F)):
            _add_matrix(w, p + f"ffn_{nm}.weight", rng, rows, cols, cols ** -0.5, qtype)
    return _write_out(w, path)


def write_qwen35(cfg: TinyConfig, qtype: QT, path: Path, rng: np.random.Generator) -> Path:
    """qwen35, qwen35moe (experts, a gated shared expert) and qwen3next (no rope sections, ssm_ba,
    F32: ssm_in): the keys and tensor names llama.cpp's converter writes for Qwen3.5 (conversion
    Qwen3_5TextModel): `ssm.*` (inner_size = value heads x state_size), full_attention_interval,
    rope.dimension_sections; a delta-net layer's attn_qkv, attn_gate (z), ssm_conv1d (C, W),
    ssm_dt.bias, ssm_a = -exp(A_log) (rates 1..16), ssm_beta, ssm_alpha, ssm_norm (one head),
    ssm_out; an attention layer's attn_q holding query and gate per head; post_attention_norm
    before the FFN; a tied output."""
    x = cfg.extra
    E, F, H, HKV, D = cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv, cfg.head_dim
    S, HK, HV, W = x["d_state"], x["k_heads"], x["v_heads"], x["d_conv"]
    C = 2 * HK * S + HV * S
    a = cfg.arch
    w = _new_writer(cfg, path)
    w.add_head_count_kv(HKV)
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_rope_dimension_count(cfg.n_rot)
    nxt = a == "qwen3next"
    if not nxt:
        w.add_rope_dimension_sections(list(x["sections"]))
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_full_attention_interval(x["interval"])
    w.add_ssm_conv_kernel(W)
    w.add_ssm_inner_size(HV * S)
    w.add_ssm_state_size(S)
    w.add_ssm_time_step_rank(HV)
    w.add_ssm_group_count(HK)
    if cfg.n_expert:
        w.add_expert_count(cfg.n_expert)
        w.add_expert_used_count(cfg.n_expert_used)
        w.add_expert_feed_forward_length(cfg.n_ff_exp)
        w.add_expert_shared_feed_forward_length(F)
    _add_vocab_embd_norm(w, rng, E, qtype)
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        _add_norm(w, p + "attn_norm.weight", rng, E)
        if (il + 1) % x["interval"] == 0:
            _add_matrix(w, p + "attn_q.weight", rng, 2 * H * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_k.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_v.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_norm(w, p + "attn_q_norm.weight", rng, D)
            _add_norm(w, p + "attn_k_norm.weight", rng, D)
            _add_matrix(w, p + "attn_output.weight", rng, E, H * D, (H * D) ** -0.5, qtype)
        else:
            if nxt and qtype == QT.F32:  # per key head q, k, v, z rows
                _add_matrix(w, p + "ssm_in.weight", rng, C + HV * S, E, E ** -0.5, qtype)
            else:
                _add_matrix(w, p + "attn_qkv.weight", rng, C, E, E ** -0.5, qtype)
                _add_matrix(w, p + "attn_gate.weight", rng, HV * S, E, E ** -0.5, qtype)
            w.add_tensor(p + "ssm_conv1d.weight", (0.5 * rng.standard_normal((C, W))).astype(np.float32))
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), HV))
            w.add_tensor(p + "ssm_dt.bias", np.log(np.expm1(dt)).astype(np.float32))
            w.add_tensor(p + "ssm_a", (-rng.uniform(1.0, 16.0, HV)).astype(np.float32))
            for nm in ("ssm_ba.weight",) if nxt else ("ssm_beta.weight", "ssm_alpha.weight"):
                rows = 2 * HV if nxt else HV
                w.add_tensor(p + nm, (rng.standard_normal((rows, E)) * E ** -0.5).astype(np.float32))
            _add_norm(w, p + "ssm_norm.weight", rng, S)
            _add_matrix(w, p + "ssm_out.weight", rng, E, HV * S, (HV * S) ** -0.5, qtype)
        _add_norm(w, p + "post_attention_norm.weight", rng, E)
        if cfg.n_expert:  # the router and the shared expert's gate stay F32, as llama-quantize keeps them
            w.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((cfg.n_expert, E)) * 2 * E ** -0.5).astype(np.float32))
            XF = cfg.n_ff_exp
            for nm, rows, cols in (("gate", XF, E), ("up", XF, E), ("down", E, XF)):
                _add_experts(w, p + f"ffn_{nm}_exps.weight", rng, cfg.n_expert, rows, cols, cols ** -0.5, qtype)
            w.add_tensor(p + "ffn_gate_inp_shexp.weight", (rng.standard_normal(E) * E ** -0.5).astype(np.float32))
        for nm, rows, cols in (("gate", F, E), ("up", F, E), ("down", E, F)):
            _add_matrix(w, p + f"ffn_{nm}{'_shexp' if cfg.n_expert else ''}.weight", rng, rows, cols, cols ** -0.5, qtype)
    return _write_out(w, path)


def write_deepseek2(cfg: TinyConfig, qtype: QT, path: Path, rng: np.random.Generator) -> Path:
    """deepseek2: the keys and tensor names llama.cpp's converter writes (conversion/deepseek.py):
    one KV head of key_length kv_lora + rope and value_length kv_lora with the per-head sizes in
    key_length_mla / value_length_mla, attn_kv_b split into attn_k_b (H, kv_lora, nope) and
    attn_v_b (H, v, kv_lora) (cfg.extra["absorbed"]; else the older files' attn_kv_b, rows
    [k_nope, v] per head, head_count_kv = head_count and the per-head sizes in key_length /
    value_length), the YaRN log multiplier as 0.1 * mscale_all_dim."""
    x = cfg.extra
    E, H, R = cfg.n_embd, cfg.n_head, cfg.n_rot
    nope, V, C, QL = cfg.head_dim - R, x["head_dim_v"], x["kv_lora"], x["q_lora"]
    a = cfg.arch
    w = _new_writer(cfg, path)
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_rope_dimension_count(R)
    w.add_q_lora_rank(QL)
    w.add_kv_lora_rank(C)
    if x["absorbed"]:
        w.add_head_count_kv(1)
        w.add_key_length(C + R)
        w.add_value_length(C)
        w.add_key_length_mla(cfg.head_dim)
        w.add_value_length_mla(V)
    else:
        w.add_head_count_kv(H)
        w.add_key_length(cfg.head_dim)
        w.add_value_length(V)
    if cfg.yarn:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(cfg.yarn[0])
        w.add_rope_scaling_orig_ctx_len(cfg.yarn[1])
        w.add_rope_scaling_yarn_log_mul(0.1 * x["mscale_all_dim"])
    w.add_leading_dense_block_count(x["n_dense_lead"])
    w.add_expert_count(cfg.n_expert)
    w.add_expert_used_count(cfg.n_expert_used)
    w.add_expert_feed_forward_length(cfg.n_ff_exp)
    w.add_expert_shared_count(x["n_shared"])
    w.add_expert_weights_scale(x["weights_scale"])
    if x["v3"]:
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_group_count(x["n_group"])
        w.add_expert_group_used_count(x["n_group_used"])
    n_vocab = _add_vocab_embd_norm(w, rng, E, qtype)
    _add_matrix(w, "output.weight", rng, n_vocab, E, 0.25, qtype)
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        _add_norm(w, p + "attn_norm.weight", rng, E)
        if QL:
            _add_matrix(w, p + "attn_q_a.weight", rng, QL, E, E ** -0.5, qtype)
            _add_norm(w, p + "attn_q_a_norm.weight", rng, QL)
            _add_matrix(w, p + "attn_q_b.weight", rng, H * cfg.head_dim, QL, QL ** -0.5, qtype)
        else:
            _add_matrix(w, p + "attn_q.weight", rng, H * cfg.head_dim, E, E ** -0.5, qtype)
        _add_matrix(w, p + "attn_kv_a_mqa.weight", rng, C + R, E, E ** -0.5, qtype)
        _add_norm(w, p + "attn_kv_a_norm.weight", rng, C)
        kv_b = (rng.standard_normal((H, nope + V, C)) * C ** -0.5).astype(np.float32)  # rows [k_nope, v] per head
        if x["absorbed"]:
            _add_values(w, p + "attn_k_b.weight", np.ascontiguousarray(kv_b[:, :nope].transpose(0, 2, 1)), qtype)
            _add_values(w, p + "attn_v_b.weight", np.ascontiguousarray(kv_b[:, nope:]), qtype)
        else:
            _add_values(w, p + "attn_kv_b.weight", kv_b.reshape(H * (nope + V), C), qtype)
        _add_matrix(w, p + "attn_output.weight", rng, E, H * V, (H * V) ** -0.5, qtype)
        _add_norm(w, p + "ffn_norm.weight", rng, E)
        if il < x["n_dense_lead"]:
            for nm, rows, cols in (("gate", cfg.n_ff, E), ("up", cfg.n_ff, E), ("down", E, cfg.n_ff)):
                _add_matrix(w, p + f"ffn_{nm}.weight", rng, rows, cols, cols ** -0.5, qtype)
            continue
        router = (rng.standard_normal((cfg.n_expert, E)) * 2 * E ** -0.5).astype(np.float32)
        for i, j in cfg.tied_experts:
            router[j] = router[i]
        w.add_tensor(p + "ffn_gate_inp.weight", router)
        if x["v3"]:
            w.add_tensor(p + "exp_probs_b.bias", (0.05 * rng.standard_normal(cfg.n_expert)).astype(np.float32))
        XF, S = cfg.n_ff_exp, cfg.n_ff_exp * x["n_shared"]
        for nm, rows, cols in (("gate", XF, E), ("up", XF, E), ("down", E, XF)):
            _add_experts(w, p + f"ffn_{nm}_exps.weight", rng, cfg.n_expert, rows, cols, 2 * cols ** -0.5, qtype)
        for nm, rows, cols in (("gate", S, E), ("up", S, E), ("down", E, S)):
            _add_matrix(w, p + f"ffn_{nm}_shexp.weight", rng, rows, cols, cols ** -0.5, qtype)
    return _write_out(w, path)


def write_nemotronh(cfg: TinyConfig, qtype: QT, path: Path, rng: np.random.Generator) -> Path:
    """nemotron_h: the keys and tensor names llama.cpp's converter writes for Nemotron-H
    (conversion/nemotron.py NemotronHModel): feed_forward_length and head_count_kv per layer (an
    FFN layer: n_ff, 0; attention: 0, n_kv; Mamba-2: 0, 0), layer_norm_epsilon (no RMS key),
    key/value_length, `ssm.*` with 2 groups (ssm_norm (G, d_inner / G)); an attention layer's
    attn_q/k/v/output, an FFN layer's ffn_up/ffn_down (no gate), one attn_norm per layer; the
    Mamba-2 tensors (_add_mamba2); an output matrix. nemotron_h_moe (cfg.n_expert): the expert
    keys and, on the FFN layers, ffn_gate_inp, exp_probs_b, ffn_{up,down}_exps and _shexp."""
    x = cfg.extra
    E, F, H, HKV, D = cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv, cfg.head_dim
    N, W, SH, G, kinds = x["d_state"], x["d_conv"], x["ssm_heads"], x["ssm_groups"], x["pattern"]
    d_inner = SH * 64
    w = _new_writer(cfg, path, [F if k == "-" else 0 for k in kinds])
    w.add_head_count_kv([HKV if k == "*" else 0 for k in kinds])
    w.add_rope_scaling_finetuned(False)
    w.add_layer_norm_eps(cfg.rms_eps)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_ssm_conv_kernel(W)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(N)
    w.add_ssm_time_step_rank(SH)
    w.add_ssm_group_count(G)
    if cfg.n_expert:  # as the converter writes Nemotron 3 Nano's
        w.add_expert_used_count(cfg.n_expert_used)
        w.add_expert_feed_forward_length(cfg.n_ff_exp)
        w.add_expert_shared_feed_forward_length(x["n_ff_shexp"])
        w.add_expert_count(cfg.n_expert)
        w.add_expert_shared_count(1)
        w.add_expert_weights_norm(True)
        w.add_expert_weights_scale(x["weights_scale"])
        w.add_expert_group_count(1)
    n_vocab = _add_vocab_embd_norm(w, rng, E, qtype)
    _add_matrix(w, "output.weight", rng, n_vocab, E, 0.25, qtype)
    for il, kind in enumerate(kinds):
        p = f"blk.{il}."
        _add_norm(w, p + "attn_norm.weight", rng, E)
        if kind == "*":
            _add_matrix(w, p + "attn_q.weight", rng, H * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_k.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_v.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_output.weight", rng, E, H * D, (H * D) ** -0.5, qtype)
        elif kind == "-" and cfg.n_expert:  # the router and its bias stay F32, as llama-quantize keeps them
            w.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((cfg.n_expert, E)) * 2 * E ** -0.5).astype(np.float32))
            w.add_tensor(p + "exp_probs_b.bias", (0.05 * rng.standard_normal(cfg.n_expert)).astype(np.float32))
            XF, S = cfg.n_ff_exp, x["n_ff_shexp"]
            _add_experts(w, p + "ffn_up_exps.weight", rng, cfg.n_expert, XF, E, E ** -0.5, qtype)
            _add_experts(w, p + "ffn_down_exps.weight", rng, cfg.n_expert, E, XF, 2 * XF ** -0.5, qtype)
            _add_matrix(w, p + "ffn_up_shexp.weight", rng, S, E, E ** -0.5, qtype)
            _add_matrix(w, p + "ffn_down_shexp.weight", rng, E, S, 2 * S ** -0.5, qtype)
        elif kind == "-":
            _add_matrix(w, p + "ffn_up.weight", rng, F, E, E ** -0.5, qtype)
            _add_matrix(w, p + "ffn_down.weight", rng, E, F, 2 * F ** -0.5, qtype)
        else:
            _add_mamba2(w, p, rng, E, d_inner, G, N, W, SH, qtype)
    return _write_out(w, path)


def write_lfm2(cfg: TinyConfig, qtype: QT, path: Path, rng: np.random.Generator) -> Path:
    """lfm2: the keys and tensor names llama.cpp's converter writes for LFM2 (conversion LFM2Model):
    head_count_kv per layer (0 on a short-conv layer), `shortconv.l_cache`, the RMS epsilon, no
    key_length; the final norm `token_embd_norm`, no output matrix (tied); per layer attn_norm,
    ffn_norm and the gated FFN, then an attention layer's attn_q/k/v/output with attn_q_norm and
    attn_k_norm, or a short-conv layer's shortconv.in_proj (b, c, x rows), shortconv.conv
    ({L, E} in ggml's order) and shortconv.out_proj. lfm2moe (cfg.n_expert): the expert keys and,
    after the dense lead, ffn_gate_inp, exp_probs_b and ffn_{gate,up,down}_exps."""
    x = cfg.extra
    E, F, H, HKV, D, L, kinds = cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv, cfg.head_dim, x["l_cache"], x["pattern"]
    w = _new_writer(cfg, path)
    w.add_head_count_kv([HKV if k == "A" else 0 for k in kinds])
    w.add_rope_freq_base(cfg.rope_base)
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_uint32(f"{cfg.arch}.shortconv.l_cache", L)
    if cfg.n_expert:  # lfm2moe, as its converter writes them
        w.add_expert_count(cfg.n_expert)
        w.add_expert_used_count(cfg.n_expert_used)
        w.add_expert_feed_forward_length(cfg.n_ff_exp)
        w.add_leading_dense_block_count(x["n_dense_lead"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    _add_vocab_embd_norm(w, rng, E, qtype, "token_embd_norm.weight")
    for il, kind in enumerate(kinds):
        p = f"blk.{il}."
        _add_norm(w, p + "attn_norm.weight", rng, E)
        _add_norm(w, p + "ffn_norm.weight", rng, E)
        if cfg.n_expert and il >= x["n_dense_lead"]:  # the router and its bias stay F32
            w.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((cfg.n_expert, E)) * 2 * E ** -0.5).astype(np.float32))
            w.add_tensor(p + "exp_probs_b.bias", (0.05 * rng.standard_normal(cfg.n_expert)).astype(np.float32))
            XF = cfg.n_ff_exp
            _add_experts(w, p + "ffn_gate_exps.weight", rng, cfg.n_expert, XF, E, E ** -0.5, qtype)
            _add_experts(w, p + "ffn_up_exps.weight", rng, cfg.n_expert, XF, E, E ** -0.5, qtype)
            _add_experts(w, p + "ffn_down_exps.weight", rng, cfg.n_expert, E, XF, 2 * XF ** -0.5, qtype)
        else:
            _add_matrix(w, p + "ffn_gate.weight", rng, F, E, E ** -0.5, qtype)
            _add_matrix(w, p + "ffn_up.weight", rng, F, E, E ** -0.5, qtype)
            _add_matrix(w, p + "ffn_down.weight", rng, E, F, F ** -0.5, qtype)
        if kind == "A":
            _add_matrix(w, p + "attn_q.weight", rng, H * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_k.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_v.weight", rng, HKV * D, E, E ** -0.5, qtype)
            _add_matrix(w, p + "attn_output.weight", rng, E, H * D, (H * D) ** -0.5, qtype)
            _add_norm(w, p + "attn_q_norm.weight", rng, D)
            _add_norm(w, p + "attn_k_norm.weight", rng, D)
        else:
            _add_matrix(w, p + "shortconv.in_proj.weight", rng, 3 * E, E, E ** -0.5, qtype)
            w.add_tensor(p + "shortconv.conv.weight", (0.6 * rng.standard_normal((E, L))).astype(np.float32))
            _add_matrix(w, p + "shortconv.out_proj.weight", rng, E, E, E ** -0.5, qtype)
    return _write_out(w, path)


def write_gemma4(cfg: TinyConfig, qtype: QT, path: Path) -> Path:
    """gemma4: the keys and tensor names llama.cpp's converter writes for Gemma 4's text model
    (the 31B's layout): `attention.sliding_window_pattern` and `head_count_kv` per layer,
    key/value_length (full layers) and their `_swa`, rope.dimension_count and its `_swa`,
    rope.freq_base_swa, final_logit_softcapping, embedding_length_per_layer_input 0; rope_freqs.weight (1 for the rotated pairs,
    1e30 for the rest, as the converter's proportional rope); per layer attn_q/k(/v on sliding
    layers only)/output, Q/K norms at the layer's head size, the four Gemma norms, the FFN and
    layer_output_scale; the output tied to token_embd."""
    x = cfg.extra
    rng = np.random.default_rng(cfg.seed)
    E, F, H = cfg.n_embd, cfg.n_ff, cfg.n_head
    swa = x["swa"]
    shapes = [(cfg.n_head_kv, x["head_dim_swa"]) if s else (x["n_head_kv_full"], cfg.head_dim) for s in swa]
    w = _new_writer(cfg, path)
    a = cfg.arch
    w.add_head_count_kv([hkv for hkv, _ in shapes])
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_uint32(f"{a}.attention.key_length_swa", x["head_dim_swa"])
    w.add_uint32(f"{a}.attention.value_length_swa", x["head_dim_swa"])
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_uint32(f"{a}.rope.dimension_count_swa", x["head_dim_swa"])
    w.add_float32(f"{a}.rope.freq_base_swa", x["rope_base_swa"])
    w.add_sliding_window(cfg.sliding_window)
    w.add_array(f"{a}.attention.sliding_window_pattern", list(swa))
    w.add_final_logit_softcapping(x["final_softcap"])
    w.add_uint32(f"{a}.embedding_length_per_layer_input", 0)  # (required by llama.cpp; 0: none)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32 if qtype == QT.F32 else gguf.LlamaFileType.MOSTLY_Q4_K_M))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    n_vocab = len(_add_spm_vocab(w, a, "F32"))
    _add_matrix(w, "token_embd.weight", rng, n_vocab, E, 0.15, qtype)
    signs = np.where(rng.random(E) < 0.5, -1.0, 1.0)  # (as write_tiny_model: no self term in the tied logits)
    w.add_tensor("output_norm.weight", (signs * (1.0 + 0.1 * rng.standard_normal(E))).astype(np.float32))
    ff = np.full(cfg.head_dim // 2, 1e30, dtype=np.float32)
    ff[: x["rotated_pairs_full"]] = 1.0
    w.add_tensor("rope_freqs.weight", ff)
    for il, (hkv, D) in enumerate(shapes):
        p = f"blk.{il}."
        _add_norm(w, p + "attn_norm.weight", rng, E)
        _add_matrix(w, p + "attn_q.weight", rng, H * D, E, E ** -0.5, qtype)
        _add_matrix(w, p + "attn_k.weight", rng, hkv * D, E, E ** -0.5, qtype)
        if swa[il]:
            _add_matrix(w, p + "attn_v.weight", rng, hkv * D, E, E ** -0.5, qtype)
        # attention scale 1: Q/K norms of D ** -0.25 each keep the scores' spread near 1 (at 1 the
        # softmax is near one-hot, and the Q4_K file's logits chaotic: llama.cpp's own two passes 2.7 apart)
        _add_norm(w, p + "attn_q_norm.weight", rng, D, D ** -0.25)
        _add_norm(w, p + "attn_k_norm.weight", rng, D, D ** -0.25)
        _add_matrix(w, p + "attn_output.weight", rng, E, H * D, (H * D) ** -0.5, qtype)
        _add_norm(w, p + "post_attention_norm.weight", rng, E, 4.0)
        _add_norm(w, p + "ffn_norm.weight", rng, E)
        _add_matrix(w, p + "ffn_gate.weight", rng, F, E, E ** -0.5, qtype)
        _add_matrix(w, p + "ffn_up.weight", rng, F, E, E ** -0.5, qtype)
        _add_matrix(w, p + "ffn_down.weight", rng, E, F, F ** -0.5, qtype)
        _add_norm(w, p + "post_ffw_norm.weight", rng, E, 4.0)
        w.add_tensor(p + "layer_output_scale.weight", rng.uniform(0.5, 1.5, 1).astype(np.float32))
    return _write_out(w, path)


def fixture_tokens(arch: str, n: int = 40) -> list[int]:
    """The fixed token sequence the tiny fixtures evaluate: BOS (where the arch adds one)
    then deterministic pseudo-random ordinary token ids."""
    rng = np.random.default_rng(1234)
    cfg = tiny_config(arch)
    if cfg.spm:
        tokens, _, ttypes, ids = _spm_vocab(arch)
        normal = [i for i, t in enumerate(ttypes) if t in (int(TokenType.NORMAL), int(TokenType.BYTE))]
        head = [ids["bos"]]
    else:
        tokens, ttypes, _, ids = _bpe_vocab()
        normal = [i for i, t in enumerate(ttypes) if t == int(TokenType.NORMAL)]
        head = []
    body = rng.choice(np.array(normal), size=n - len(head), replace=True).tolist()
    return head + [int(t) for t in body]


if __name__ == "__main__":  # pragma: no cover
    import sys
    import tempfile
    import time
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    for a, v in ALL_MODELS:
        t = time.perf_counter()
        p = write_tiny_model(a, v, out / f"{a}-{v}.gguf")
        print(f"{p} {p.stat().st_size/1e6:.2f} MB {time.perf_counter()-t:.3f}s")


# ----------------------------------------------------------------------------- variants of a file


def load_error_without(src: str | os.PathLike, key: str, tmp_path: Path) -> tuple[Path, str]:
    """Load `src` rewritten without metadata `key`: the rewritten file and its load error's text
    (an AssertionError if it loads)."""
    from llamacli.core.errors import ModelLoadError
    from llamacli.core.model.load import load_model

    bad = rewrite_gguf(src, tmp_path / "bad.gguf", drop_keys=(key,))
    try:
        load_model(bad)
    except ModelLoadError as e:
        return bad, str(e)
    raise AssertionError(f"{bad} loaded without {key}")


def rewrite_gguf(src: str | os.PathLike, dst: str | os.PathLike, drop: str | None = None, arch: str | None = None,
                 retype: tuple[str, QT] | None = None, drop_keys: tuple[str, ...] = (),
                 set_strings: dict[str, str] | None = None,
                 set_values: dict[str, tuple[Any, gguf.GGUFValueType]] | None = None) -> Path:
    """Copy a GGUF, optionally dropping a tensor, renaming the architecture, re-typing a
    tensor's raw bytes (to a type we do not support), dropping metadata keys, setting string
    keys or typed keys (`set_values`: key -> (value, GGUF value type); added when absent)."""
    r = gguf.GGUFReader(str(src))
    old_arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    a = arch or old_arch
    w = gguf.GGUFWriter(str(dst), a)
    strings = dict(set_strings or {})
    values = dict(set_values or {})
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in drop_keys:
            continue
        if name in values:
            w.add_key_value(name, *values.pop(name))
            continue
        key = name.replace(old_arch + ".", a + ".", 1) if name.startswith(old_arch + ".") else name
        vt = f.types[0]
        if key in strings:
            w.add_string(key, strings.pop(key))
        elif vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(key, f.contents(), vt)
    for key, value in strings.items():
        w.add_string(key, value)
    for key, (v, vt) in values.items():
        w.add_key_value(key, v, vt)
    for t in r.tensors:
        if t.name == drop:
            continue
        if retype and t.name == retype[0]:
            qt = retype[1]
            bs, ts = gguf.GGML_QUANT_SIZES[qt]
            ne = [int(x) for x in t.shape]  # ggml order: ne[0] is the row length
            raw = np.zeros(tuple(reversed(ne[1:])) + (ne[0] // bs * ts,), dtype=np.uint8)
            w.add_tensor(t.name, raw, raw_dtype=qt)
            continue
        w.add_tensor(t.name, np.array(t.data), raw_shape=tuple(reversed([int(x) for x in t.shape])), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(dst)
