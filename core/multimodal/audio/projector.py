"""An audio projector file (mmproj GGUF, `clip.has_audio_encoder`): its hyperparameters and
weights, read with llama.cpp's keys and tensor names (tools/mtmd/clip.cpp, clip-impl.h).

Supported projector types: `qwen2a` (Qwen2-Audio, Qwen2.5-Omni's audio tower; also the legacy
`qwen2.5o`): a Whisper encoder (two conv1d + GELU, learned positions, pre-LN blocks), average
pooling by 2 and one linear layer to the text model's width.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import md_float, md_get, md_int
from gguf import GGMLQuantizationType as QT

from llamacli.core.model.kernels.dequant import dequantize
from llamacli.core.model.kernels.qmm import QuantMatrix
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import Linear, WeightLoader
from llamacli.core.multimodal.block import BlockWeights, Norm, read_block, read_norm

AUDIO_TYPES = ("qwen2a",)
_ALIASES = {"qwen2.5o": "qwen2a"}  # clip.cpp: PROJECTOR_TYPE_QWEN25O -> QWEN2A for audio
# Text around each audio chunk in the prompt (mtmd.cpp init_audio: aud_beg, aud_end), tokenized
# with special tokens parsed.
AUDIO_MARKERS = {"qwen2a": ("<|audio_bos|>", "<|audio_eos|>")}


@dataclass
class AudioHParams:
    proj_type: str
    n_mel: int
    n_embd: int
    n_head: int
    n_ff: int
    n_layer: int
    eps: float
    n_out: int  # the projection width: must equal the text model's n_embd
    n_pos: int


@dataclass
class Conv1d:
    """A conv1d kernel (GGUF shape (OC, IC, K)) as the (OC, IC * K) matrix that ggml's im2col
    matmul multiplies (its bytes, any float type), with its bias (OC,) in `w.b`."""

    w: Linear
    kernel: int


@dataclass
class AudioProjector:
    """A loaded audio projector: `encode_audio(projector, pcm)` runs it."""

    path: str
    hp: AudioHParams
    conv1: Conv1d
    conv2: Conv1d
    pos: np.ndarray  # (n_pos, n_embd) float32
    blocks: list[BlockWeights]
    post_ln: Norm | None
    fc: Linear
    quantized: bool  # weights as GGUF bytes (the ggml numerics) or float32 copies (f32)


def _proj_type(g: GGUFFile) -> str:
    md = g.metadata
    if not md.get("clip.has_audio_encoder", False):
        raise ModelLoadError(g.path, "not an audio projector (clip.has_audio_encoder is not set)")
    t = md.get("clip.projector_type") or md.get("clip.audio.projector_type")  # clip.cpp's order
    if not isinstance(t, str):
        raise ModelLoadError(g.path, "missing metadata key 'clip.projector_type'")
    t = _ALIASES.get(t, t)
    if t not in AUDIO_TYPES:
        raise ModelLoadError(g.path, f"unsupported audio projector type {t!r} (supported: {', '.join(AUDIO_TYPES)})")
    return t


def read_hparams(g: GGUFFile) -> AudioHParams:
    md, p = g.metadata, g.path
    t = _proj_type(g)
    n_embd = md_int(md, p, "clip.audio.embedding_length")
    n_head = md_int(md, p, "clip.audio.attention.head_count")
    if n_embd % n_head:
        raise ModelLoadError(p, f"embedding_length {n_embd} is not a multiple of head_count {n_head}")
    if "a.position_embd.weight" not in g.tensors:
        raise ModelLoadError(p, "missing tensor 'a.position_embd.weight'")
    pos_shape = g.tensor("a.position_embd.weight").shape
    return AudioHParams(
        proj_type=t,
        n_mel=md_int(md, p, "clip.audio.num_mel_bins", hi=1024),
        n_embd=n_embd,
        n_head=n_head,
        n_ff=md_int(md, p, "clip.audio.feed_forward_length"),
        n_layer=md_int(md, p, "clip.audio.block_count", hi=1024),
        eps=md_float(md, p, "clip.audio.attention.layer_norm_epsilon"),
        n_out=int(md_get(md, p, "clip.audio.projection_dim")),
        n_pos=int(pos_shape[0]),
    )


def _f32(g: GGUFFile, name: str) -> np.ndarray:
    if name not in g.tensors:
        raise ModelLoadError(g.path, f"missing tensor {name!r}")
    t = g.tensor(name)
    return dequantize(g.raw(name), t.qtype, t.shape).astype(np.float32)


def _conv(g: GGUFFile, i: int, ic: int, oc: int, quantized: bool) -> Conv1d:
    name = f"a.conv1d.{i}.weight"
    if name not in g.tensors:
        raise ModelLoadError(g.path, f"missing tensor {name!r}")
    t = g.tensor(name)
    if len(t.shape) != 3 or t.shape[:2] != (oc, ic):
        raise ModelLoadError(g.path, f"tensor {name!r} has shape {t.shape}, expected ({oc}, {ic}, kernel)")
    if t.qtype not in (QT.F32, QT.F16, QT.BF16):
        raise ModelLoadError(g.path, f"tensor {name!r} is {t.qtype.name}: conv kernels must be F32, F16 or BF16")
    k = int(t.shape[2])
    data = np.asarray(g.raw(name)).reshape(-1).view(np.uint8).reshape(oc, -1)  # a view of the file
    w = Linear(t.qtype, ic * k, oc, q=QuantMatrix(data, t.qtype, ic * k), name=name)
    if not quantized:
        w.q, w.w = None, np.ascontiguousarray(_f32(g, name).reshape(oc, ic * k).T)  # (in, out)
    w.b = _f32(g, f"a.conv1d.{i}.bias").reshape(oc)
    return Conv1d(w, k)


def load_audio_projector(path: str, quantized: bool = True) -> AudioProjector:
    """Read an audio mmproj GGUF; ModelLoadError (naming the file) if it is not one we run.
    `quantized`: keep the weights' GGUF bytes for the ggml numerics (libmtmd's results), else
    float32 copies for the f32 numerics (plain maths, BLAS attention: faster, further off)."""
    g = GGUFFile(path)
    hp = read_hparams(g)
    if hp.n_pos < 1500:
        raise ModelLoadError(path, f"a.position_embd.weight has {hp.n_pos} positions: a 30 s window needs 1500")
    ld = WeightLoader(g, quantized=quantized)
    e = hp.n_embd
    blocks = [read_block(ld, f"a.blk.{il}", e, hp.n_ff) for il in range(hp.n_layer)]
    post = read_norm(ld, "a.post_ln", e) if ld.has("a.post_ln.weight") else None
    fc = ld.linear("mm.a.fc", e, hp.n_out)
    ld.finish()
    pos = _f32(g, "a.position_embd.weight")
    convs = _conv(g, 1, hp.n_mel, e, quantized), _conv(g, 2, e, e, quantized)
    return AudioProjector(path, hp, *convs, pos, blocks, post, fc, quantized)


def check_text_model(proj: AudioProjector, n_embd_text: int) -> None:
    """mtmd_init_from_file's check: the projection width must be the text model's n_embd."""
    if proj.hp.n_out != n_embd_text:
        raise ModelLoadError(
            proj.path,
            f"mismatch between text model (n_embd = {n_embd_text}) and mmproj (n_embd = {proj.hp.n_out}); "
            "hint: you may be using wrong mmproj",
        )
