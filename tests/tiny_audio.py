"""Tiny random audio projectors (mmproj GGUFs) and test signals, written deterministically with
`gguf.GGUFWriter` (fixed seeds: the same name always gives the same bytes, so the libmtmd
fixtures in tests/fixtures/audio/ stay valid).

    from tests.tiny_audio import write_audio_projector, SIGNALS, signal
    path = write_audio_projector("qwen2a-f16", tmp_path / "mmproj.gguf")

Projectors (`qwen2a`, Qwen2-Audio / Qwen2.5-Omni: Whisper encoder, average pooling by 2,
one linear projector; as llama.cpp's convert_hf_to_gguf writes one, with llama.cpp's keys and
tensor names):
- qwen2a-f16   matrices and conv kernels F16 (a `--outtype f16` mmproj), vectors F32
- qwen2a-q8    matrices Q8_0, conv kernels F16

Shapes: 128 mel bins, encoder width 64, 4 heads, n_ff 128, 2 layers, 1500 positions, output
640 (the demo model's n_embd).
"""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

PROJECTORS = ("qwen2a-f16", "qwen2a-q8")

N_MEL = 128
N_EMBD = 64
N_HEAD = 4
N_FF = 128
N_LAYER = 2
N_POS = 1500
N_OUT = 640
EPS = 1e-5

SAMPLE_RATE = 16000
# name -> seconds; the signal itself is made by `signal(name)`
SIGNALS = {"sine": 1.0, "chirp": 2.5, "noise": 0.75, "click": 0.005, "long": 31.0}


def signal(name: str) -> np.ndarray:
    """A deterministic test signal, float32 mono at 16 kHz, in [-1, 1]."""
    n = int(round(SIGNALS[name] * SAMPLE_RATE))
    t = np.arange(n) / SAMPLE_RATE
    rng = np.random.default_rng(sum(map(ord, name)))
    if name == "sine":
        x = 0.5 * np.sin(2 * np.pi * 440.0 * t)
    elif name == "chirp":  # 100 Hz -> 6 kHz, with a little noise
        x = 0.6 * np.sin(2 * np.pi * (100.0 * t + (5900.0 / (2 * 2.5)) * t * t)) + 0.01 * rng.standard_normal(n)
    elif name == "noise":
        x = 0.3 * rng.standard_normal(n).clip(-3, 3)
    elif name == "click":  # shorter than the reflection pad (mtmd zero-fills it to 201 samples)
        x = np.where(np.arange(n) % 20 == 0, 0.9, -0.1)
    else:  # "long": two 30 s windows; a tone that rises by steps, quiet noise under it
        f = 200.0 * (1 + np.floor(t / 5.0))
        x = 0.4 * np.sin(2 * np.pi * f * t) + 0.02 * rng.standard_normal(n)
    return x.astype(np.float32)


def _matrix(w: gguf.GGUFWriter, name: str, x: np.ndarray, qtype: QT) -> None:
    if qtype == QT.Q8_0:
        w.add_tensor(name, gguf.quants.quantize(x, QT.Q8_0), raw_dtype=QT.Q8_0)
    else:
        w.add_tensor(name, x.astype(np.float16))


def _vec(rng: np.random.Generator, n: int, mean: float = 0.0, scale: float = 0.05) -> np.ndarray:
    return (mean + scale * rng.standard_normal(n)).astype(np.float32)


def _randn(rng: np.random.Generator, *shape: int, fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * fan_in ** -0.5).astype(np.float32)


def write_audio_projector(name: str, path: str | os.PathLike[str], n_out: int = N_OUT) -> Path:
    """Write projector `name` (see PROJECTORS) to path; returns the path. n_out: the projection
    width (the text model's n_embd; the fixtures are made with the default)."""
    if name not in PROJECTORS:
        raise ValueError(f"unknown tiny audio projector {name!r}")
    qtype = QT.Q8_0 if name.endswith("q8") else QT.F16
    rng = np.random.default_rng(24)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.name", f"tiny {name}")
    w.add_bool("clip.has_audio_encoder", True)
    w.add_string("clip.projector_type", "qwen2a")
    w.add_uint32("clip.audio.num_mel_bins", N_MEL)
    w.add_uint32("clip.audio.embedding_length", N_EMBD)
    w.add_uint32("clip.audio.feed_forward_length", N_FF)
    w.add_uint32("clip.audio.block_count", N_LAYER)
    w.add_uint32("clip.audio.projection_dim", n_out)
    w.add_uint32("clip.audio.attention.head_count", N_HEAD)
    w.add_float32("clip.audio.attention.layer_norm_epsilon", EPS)

    # conv kernels: ggml ne (K, IC, OC) = NumPy (OC, IC, K); biases (OC, 1) to broadcast over time
    w.add_tensor("a.conv1d.1.weight", _randn(rng, N_EMBD, N_MEL, 3, fan_in=3 * N_MEL).astype(np.float16))
    w.add_tensor("a.conv1d.1.bias", _vec(rng, N_EMBD).reshape(N_EMBD, 1))
    w.add_tensor("a.conv1d.2.weight", _randn(rng, N_EMBD, N_EMBD, 3, fan_in=3 * N_EMBD).astype(np.float16))
    w.add_tensor("a.conv1d.2.bias", _vec(rng, N_EMBD).reshape(N_EMBD, 1))
    w.add_tensor("a.position_embd.weight", (0.5 * rng.standard_normal((N_POS, N_EMBD))).astype(np.float32))
    for il in range(N_LAYER):
        p = f"a.blk.{il}"
        for t in ("ln1", "ln2"):
            w.add_tensor(f"{p}.{t}.weight", _vec(rng, N_EMBD, 1.0, 0.1))
            w.add_tensor(f"{p}.{t}.bias", _vec(rng, N_EMBD))
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            _matrix(w, f"{p}.{t}.weight", _randn(rng, N_EMBD, N_EMBD, fan_in=N_EMBD), qtype)
            if t != "attn_k":  # Whisper's k projection has no bias
                w.add_tensor(f"{p}.{t}.bias", _vec(rng, N_EMBD))
        _matrix(w, f"{p}.ffn_up.weight", _randn(rng, N_FF, N_EMBD, fan_in=N_EMBD), qtype)
        w.add_tensor(f"{p}.ffn_up.bias", _vec(rng, N_FF))
        _matrix(w, f"{p}.ffn_down.weight", _randn(rng, N_EMBD, N_FF, fan_in=N_FF), qtype)
        w.add_tensor(f"{p}.ffn_down.bias", _vec(rng, N_EMBD))
    w.add_tensor("a.post_ln.weight", _vec(rng, N_EMBD, 1.0, 0.1))
    w.add_tensor("a.post_ln.bias", _vec(rng, N_EMBD))
    _matrix(w, "mm.a.fc.weight", _randn(rng, n_out, N_EMBD, fan_in=N_EMBD), qtype)
    w.add_tensor("mm.a.fc.bias", _vec(rng, n_out))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
