"""Qwen2.5-VL's vision tower (`clip.projector_type` "qwen2.5vl_merger"), and Qwen2-VL's
("qwen2vl_merger": layer norms instead of RMS norms, no windows, GELU-quick FFN without a
gate), as tools/mtmd/models/qwen2vl.cpp builds them and clip.cpp sets their inputs, on our
kernel layer.

Shapes: the canvas is W x H pixels (multiples of 2p, preprocess.smart_size), a grid of
px = W/p by py = H/p patches, P = px py, in 2 x 2 merge units (U = P / 4 of them, ux = px/2 per
row); E = n_embd, H heads of D = E / H.

- Patches: two kernels (the temporal pair of Qwen's 3-D convolution), each a stride-p
  convolution of the same image (ggml_conv_2d: F16 im2col), summed; no bias, no positions.
- Order: rows by merge unit (unit row, unit column, then dy, dx inside the unit); with window
  attention (n_wa_pattern > 0) the units are regrouped window by window (windows of
  window_size / p / 2 units per side, raster order, the last ones cut by the grid's edge):
  clip.cpp's inv_window_idx, undone after the tower (window_idx).
- Blocks: RMS norm, Q/K/V with biases, 2-D rope (GGML_ROPE_TYPE_VISION: of each head's D/2
  pairs (i, i + D/2), the first D/4 turn by the patch's row, the next D/4 by its column, at
  angle pos * 10000^(-4j/D) for the j-th pair of each quarter), attention over all patches on
  every n_wa_pattern-th layer and within each window on the others (window_attention.py: ggml's
  order of float operations), output with bias; RMS
  norm and the gated FFN silu(gate) * up (clip.use_silu) or act(up).
- Merger: `v.post_ln` (RMS), each unit's 4 rows side by side (4E), mm.0 -> GELU -> mm.2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.precision import Precision
from llamacli.core.model.weights.tensors import Linear, WeightLoader
from llamacli.core.multimodal.block import BlockWeights, Norm, read_block, read_norm
from llamacli.core.multimodal.projector_file import QWEN25VL, VisionHParams
from llamacli.core.multimodal.vit import gelu_quick, patch_linear
from llamacli.core.multimodal.window_attention import window_attention

ROPE_BASE = 10000.0  # clip.cpp passes freq_base 10000 to the vision rope


@dataclass(frozen=True)
class Windows:
    """The unit order the tower runs in (`order[i]`: the raster index of the i-th unit) and the
    windows as ranges of patch rows in that order."""

    order: np.ndarray  # (U,) int
    spans: tuple[tuple[int, int], ...]


def windows(ux: int, uy: int, grid: int) -> Windows:
    """clip.cpp's window index: units grouped window by window (grid x grid units, raster order
    of windows, each window's units in raster order); grid 0: one window of all units."""
    if grid <= 0:
        return Windows(np.arange(ux * uy), ((0, 4 * ux * uy),))
    order: list[int] = []
    spans: list[tuple[int, int]] = []
    for y in range(0, uy, grid):
        for x in range(0, ux, grid):
            a = len(order)
            for dy in range(min(grid, uy - y)):
                order.extend((y + dy) * ux + x + dx for dx in range(min(grid, ux - x)))
            spans.append((4 * a, 4 * len(order)))
    return Windows(np.array(order), tuple(spans))


def patch_positions(ux: int, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of each patch row, units in `order`, (dy, dx) inside each unit."""
    uy_, ux_ = np.divmod(order, ux)  # (U,)
    dy = np.array([0, 0, 1, 1])
    dx = np.array([0, 1, 0, 1])
    return (2 * uy_[:, None] + dy).reshape(-1), (2 * ux_[:, None] + dx).reshape(-1)


def vision_rope(rows: np.ndarray, cols: np.ndarray, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin (P, D/2) of GGML_ROPE_TYPE_VISION with sections (D/4,) * 4 and n_dims D/2: the
    first D/4 pairs by row, the next by column, each a running float32 product from its
    position (ggml_mrope_cache_init with independent sections)."""
    cfg = K.RopeConfig(head_dim // 2, ROPE_BASE)
    cr, sr = K.rope_cos_sin(rows, cfg)
    cc, sc = K.rope_cos_sin(cols, cfg)
    return np.concatenate([cr, cc], axis=1), np.concatenate([sr, sc], axis=1)


def _rms(x: np.ndarray, n: Norm, eps: float) -> np.ndarray:
    """build_norm(NORM_TYPE_RMS): ggml_rms_norm times the weight, plus the bias if any."""
    y = K.rms_norm(x, n.w, eps)
    return y if n.b is None else y + n.b


def _layer_norm(x: np.ndarray, n: Norm, eps: float) -> np.ndarray:
    """build_norm(NORM_TYPE_NORMAL) (Qwen2-VL): ggml_norm, times the weight, plus the bias."""
    return K.layer_norm(x, n.w, n.b, eps)


class Qwen25VLTower:
    """The tower: `forward(pixels)` gives the post-normed hidden states (P, E), units in raster
    order (each unit's 4 rows together), ready for the merger."""

    def __init__(self, ld: WeightLoader, hp: VisionHParams, pr: Precision, n_run: int) -> None:
        g, e, p = ld.gguf, hp.n_embd, hp.patch_size
        self.hp, self.pr = hp, pr
        if ld.has("v.patch_embd.bias") or ld.has("v.class_embd"):
            raise ModelLoadError(g.path, "a qwen2.5vl_merger projector has no patch bias or class embedding")
        self.patch = [patch_linear(g, nm, 3 * p * p, e, None) for nm in ("v.patch_embd.weight", "v.patch_embd.weight.1")]
        self.pre_ln = read_norm(ld, "v.pre_ln", e) if ld.has("v.pre_ln.weight") else None
        self.post_ln = read_norm(ld, "v.post_ln", e) if ld.has("v.post_ln.weight") else None
        self.layers = [read_block(ld, f"v.blk.{il}", e, hp.n_ff, legacy_ffn=True) for il in range(n_run)]
        self.gates = [ld.linear(f"v.blk.{il}.ffn_gate", e, hp.n_ff) if ld.has(f"v.blk.{il}.ffn_gate.weight") else None
                      for il in range(n_run)]
        self.rope = K.RopeConfig(hp.head_dim, ROPE_BASE, neox=True)  # pairs (i, i + D/2)
        self.norm = _rms if hp.family == QWEN25VL else _layer_norm
        self.act = pr.silu if hp.silu else pr.gelu if hp.gelu else gelu_quick

    def patches(self, pixels: np.ndarray) -> np.ndarray:
        """(3, H, W) -> (P, 3 p p), rows by merge unit (unit row, unit column, dy, dx)."""
        p = self.hp.patch_size
        c, h, w = pixels.shape
        x = pixels.reshape(c, h // (2 * p), 2, p, w // (2 * p), 2, p)  # (c, uy, dy, ky, ux, dx, kx)
        return np.ascontiguousarray(x.transpose(1, 4, 2, 5, 0, 3, 6).reshape(-1, c * p * p))

    def grid(self, pixels: np.ndarray) -> tuple[int, int]:
        """(ux, uy): merge units per row and per column of the canvas."""
        step = 2 * self.hp.patch_size
        _, h, w = pixels.shape
        if h % step or w % step:
            raise ValueError(f"a {w}x{h} canvas is not made of {step}-pixel merge units")
        return w // step, h // step

    def forward(self, pixels: np.ndarray) -> np.ndarray:
        hp, pr, eps = self.hp, self.pr, self.hp.eps
        ux, uy = self.grid(pixels)
        wa = hp.n_wa_pattern > 0
        win = windows(ux, uy, hp.window_size // hp.patch_size // 2 if wa else 0)
        pat = self.patches(pixels)
        x = pr.linear(pat, self.patch[0]) + pr.linear(pat, self.patch[1])  # (P, E), raster units
        if self.pre_ln is not None:
            x = self.norm(x, self.pre_ln, eps)
        e = hp.n_embd
        x = np.ascontiguousarray(x.reshape(-1, 4 * e)[win.order].reshape(-1, e))  # window order
        cos, sin = vision_rope(*patch_positions(ux, win.order), hp.head_dim)
        everything = ((0, x.shape[0]),)
        for il, (ly, gate) in enumerate(zip(self.layers, self.gates)):
            spans = everything if not wa or (il + 1) % hp.n_wa_pattern == 0 else win.spans
            x = self._block(x, ly, gate, spans, cos, sin)
        if self.post_ln is not None:
            x = self.norm(x, self.post_ln, eps)
        back = np.empty_like(win.order)
        back[win.order] = np.arange(win.order.shape[0])  # clip.cpp's window_idx
        return np.ascontiguousarray(x.reshape(-1, 4 * e)[back].reshape(-1, e))

    def _block(self, x: np.ndarray, w: BlockWeights, gate: Linear | None, spans: tuple[tuple[int, int], ...],
               cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        pr, hp = self.pr, self.hp
        n, nh, d = x.shape[0], hp.n_head, hp.head_dim
        q, k, v = pr.linears(self.norm(x, w.ln1, hp.eps), [w.q, w.k, w.v], None)
        q = pr.rope(q.reshape(n, nh, d), cos, sin, self.rope).reshape(n, nh * d)
        k = pr.rope(k.reshape(n, nh, d), cos, sin, self.rope).reshape(n, nh * d)
        x = x + pr.linear(window_attention(q, k, v, nh, spans), w.o)
        h = self.norm(x, w.ln2, hp.eps)
        up = pr.linear(h, w.up)
        mid = self.act(up) if gate is None else self.act(pr.linear(h, gate)) * up  # ggml_swiglu_split(gate, up)
        return x + pr.linear(mid, w.down)

