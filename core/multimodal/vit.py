"""The CLIP/SigLIP vision transformer (tools/mtmd/clip.cpp `build_inp` + `build_vit`, and the
LLaVA graph's variant), on our kernel layer: every matmul covers all patches at once, through
the same quantized kernels as the text model (core/model/kernels/qmm) in ggml's numerics.

Shapes: P = patches, E = n_embd (vision width), H = heads, D = head dim, F = n_ff.
Numerics as ggml-cpu with clip's flash attention off: the patch convolution is ggml's im2col
in the kernel's type (F16 kernel: the pixels rounded to f16) then a matmul; every linear sees
its input rounded to the weight's vec_dot type; layer norms as ggml_norm; attention in float32
(KQ, soft max, KQV); GELU through ggml's f16 table.
"""

from __future__ import annotations

import numpy as np

from gguf import GGMLQuantizationType as QT

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.kernels.dequant import dequantize
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm.matrix import QuantMatrix
from llamacli.core.model.precision import Precision
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import Linear, WeightLoader
from llamacli.core.multimodal.block import BlockOps, Norm, block_forward, read_block, read_norm
from llamacli.core.multimodal.projector_file import VisionHParams

# Query rows per attention block: bounds the score matrix (H x block x P float32) for large
# images (SigLIP at 896 px: 4096 patches).
ATTN_BLOCK = 512


def patch_linear(g: GGUFFile, name: str, n_in: int, n_out: int, bias: np.ndarray | None) -> Linear:
    """The patch convolution's kernel (E, 3, p, p) as a Linear over its n_out rows of n_in values.

    ggml_conv_2d makes its im2col in F16 (F32 for a BF16 kernel) and multiplies it as the
    matmul's weight, with the kernel as the activation, converted to that type: so both the
    pixels and the kernel are rounded to f16 whatever the kernel's stored type."""
    t = g.tensor(name)
    if t.n_elements != n_in * n_out:
        raise ModelLoadError(g.path, f"tensor {name!r} has shape {t.shape}, expected {n_out} x {n_in} values")
    w = dequantize(g.raw(name), t.qtype, t.shape).reshape(n_out, n_in)
    qt = QT.F32 if t.qtype == QT.BF16 else QT.F16
    data = np.ascontiguousarray(w.astype(np.float32 if qt == QT.F32 else np.float16)).view(np.uint8)
    return Linear(qt, n_in, n_out, q=QuantMatrix(data, qt, n_in), b=bias, name=name)


class VisionTower:
    """Patch embedding, learned positions, optional pre/post layer norms and the ViT blocks.
    `n_run`: how many blocks run (LLaVA stops one before the last)."""

    def __init__(self, ld: WeightLoader, hp: VisionHParams, pr: Precision, n_run: int) -> None:
        g, e, p = ld.gguf, hp.n_embd, hp.patch_size
        self.hp, self.pr, self.n_run = hp, pr, n_run
        bias = ld.vector("v.patch_embd.bias", e) if ld.has("v.patch_embd.bias") else None
        self.patch = patch_linear(g, "v.patch_embd.weight", 3 * p * p, e, bias)
        n_pos = hp.n_patches_side**2 + (1 if ld.has("v.class_embd") else 0)
        self.class_embd = ld.vector("v.class_embd", e) if ld.has("v.class_embd") else None
        self.pos = ld.vector("v.position_embd.weight").reshape(-1, e)
        if self.pos.shape[0] != n_pos:
            raise ModelLoadError(g.path, f"v.position_embd.weight has {self.pos.shape[0]} rows, expected {n_pos}")
        self.pre_ln = read_norm(ld, "v.pre_ln", e) if ld.has("v.pre_ln.weight") else None
        self.post_ln = read_norm(ld, "v.post_ln", e) if ld.has("v.post_ln.weight") else None
        # clip.cpp swaps up and down of files from older converters for gemma3 and mlp alike
        self.layers = [read_block(ld, f"v.blk.{il}", e, hp.n_ff, legacy_ffn=True) for il in range(n_run)]
        self.ops = BlockOps(_layer_norm, self.attention, pr.gelu if hp.gelu else gelu_quick)

    def patches(self, pixels: np.ndarray) -> np.ndarray:
        """(3, S, S) pixels -> (P, 3 p p): each patch's values in (channel, row, column) order,
        patches row by row (ggml's im2col for a stride-p convolution)."""
        p = self.hp.patch_size
        c, h, w = pixels.shape
        x = pixels.reshape(c, h // p, p, w // p, p).transpose(1, 3, 0, 2, 4)  # (Py, Px, 3, p, p)
        return np.ascontiguousarray(x.reshape(-1, c * p * p))

    def attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Full (non-causal) self-attention over all patches; q, k, v (P, E)."""
        pr, hp = self.pr, self.hp
        n, nh, d = q.shape[0], hp.n_head, hp.head_dim
        q = q.reshape(n, nh, d).transpose(1, 0, 2)  # (H, P, D)
        k = k.reshape(n, nh, d).transpose(1, 2, 0)  # (H, D, P)
        v = v.reshape(n, nh, d).transpose(1, 0, 2)  # (H, P, D)
        out = np.empty((n, nh, d), dtype=np.float32)
        scale = np.float32(1.0 / np.sqrt(np.float32(d)))

        def block(a: int) -> None:  # a block of queries over every head: independent of the others
            s = np.matmul(q[:, a : a + ATTN_BLOCK], k) * scale  # (H, blk, P)
            out[a : a + ATTN_BLOCK] = np.matmul(K.softmax(s), v).transpose(1, 0, 2)

        pr.run_each(block, list(range(0, n, ATTN_BLOCK)))  # side by side on the kernels' threads
        return out.reshape(n, nh * d)

    def forward(self, pixels: np.ndarray) -> np.ndarray:
        """(3, S, S) float32 pixels -> (P [+1 class row], E) hidden states after the last block
        run (and the post layer norm when the file has one)."""
        pr, eps = self.pr, self.hp.eps
        x = pr.linear(self.patches(pixels), self.patch)  # (P, E)
        if self.class_embd is not None:
            x = np.concatenate([x, self.class_embd[None, :]], axis=0)
        x = x + self.pos
        if self.pre_ln is not None:
            x = _layer_norm(x, self.pre_ln, eps)
        for ly in self.layers:
            x = block_forward(x, ly, eps, self.ops, pr)
        if self.post_ln is not None:
            x = _layer_norm(x, self.post_ln, eps)
        return x


def _layer_norm(x: np.ndarray, n: Norm, eps: float) -> np.ndarray:
    return K.layer_norm(x, n.w, n.b, eps)


def gelu_quick(x: np.ndarray) -> np.ndarray:
    """ggml_gelu_quick as ggml-cpu computes it (GGML_GELU_QUICK_FP16): the value at x rounded to
    f16, from a table of f16(x * (1 / (1 + expf(-1.702 x)))) over every f16 x."""
    bits = np.ascontiguousarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)
    return _gelu_quick_table()[bits]


_GELU_QUICK: list[np.ndarray] = []


def _gelu_quick_table() -> np.ndarray:
    """f32(f16(gelu_quick(h))) for every f16 bit pattern h (65536 entries, float32 maths as
    ggml_gelu_quick_f32; expf correctly rounded, through float64: the table equals the one glibc's
    expf gives, where NumPy's float32 exp changed 2 entries), built once."""
    if not _GELU_QUICK:
        h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp((np.float32(-1.702) * h).astype(np.float64)).astype(np.float32)
            g = h * (np.float32(1.0) / (np.float32(1.0) + e))
        _GELU_QUICK.append(g.astype(np.float16).astype(np.float32))
    return _GELU_QUICK[0]
