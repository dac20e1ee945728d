"""Synthetic multimodal projectors (mmproj GGUFs) for the vision tests and the libmtmd fixtures
(scripts/mmproj_fixtures.py): random weights, small dimensions, each family's real keys and
tensor names (tools/mtmd/clip-impl.h), projection width = the text model's n_embd.

Deterministic: the same `ProjectorSpec` always writes the same file, so the tests rebuild the
projector the committed fixtures were made from (its sha256 is stored in each fixture).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

QT = GGMLQuantizationType


@dataclass(frozen=True)
class ProjectorSpec:
    """A synthetic projector. `family`: clip.projector_type; `n_text`: the text model's n_embd."""

    name: str
    family: str
    n_text: int = 640
    n_embd: int = 64
    n_head: int = 4
    n_ff: int = 128
    n_layer: int = 2
    image_size: int = 64
    patch_size: int = 8
    n_merge: int = 2  # gemma3, idefics3: clip.vision.projector.scale_factor
    longest_edge: int = 0  # idefics3: clip.vision.preproc_image_size (0: not written, as older files)
    weight_type: QT = QT.F16  # matrices and the patch kernel; norms, biases, positions: F32
    seed: int = 7


SPECS: dict[str, ProjectorSpec] = {
    "gemma3": ProjectorSpec("gemma3", "gemma3"),
    "gemma3-f32": ProjectorSpec("gemma3-f32", "gemma3", weight_type=QT.F32, seed=8),
    "mlp": ProjectorSpec("mlp", "mlp", image_size=32, seed=9),
    # Qwen2.5-VL: 4 layers, window attention on layers 0 and 2 (n_wa_pattern 2) in windows of
    # 7 x 7 merge units (clip.cpp's 112 px, patch 8): QWEN_IMAGES' 9 x 8 units cut windows
    "qwen25vl": ProjectorSpec("qwen25vl", "qwen2.5vl_merger", n_text=256, n_layer=2, seed=10),
    "qwen25vl-f32": ProjectorSpec("qwen25vl-f32", "qwen2.5vl_merger", n_text=256, n_layer=4, weight_type=QT.F32, seed=11),
    # Qwen2-VL: layer norms, no windows, GELU-quick FFN without a gate
    "qwen2vl": ProjectorSpec("qwen2vl", "qwen2vl_merger", n_text=256, n_layer=2, seed=12),
}
# SmolVLM (slices and an overview per image), paired with the tiny llama "F32_IDEFICS3" (n_embd 256)
SLICED_SPECS: dict[str, ProjectorSpec] = {
    "idefics3": ProjectorSpec("idefics3", "idefics3", n_text=256, image_size=48, longest_edge=112, seed=10),
    "idefics3-old": ProjectorSpec("idefics3-old", "idefics3", n_text=256, image_size=48, seed=11),
    "idefics3-f32": ProjectorSpec("idefics3-f32", "idefics3", n_text=256, image_size=48, longest_edge=112,
                                  weight_type=QT.F32, seed=12),
}
QWEN_FAMILIES = ("qwen2vl_merger", "qwen2.5vl_merger")
QWEN25VL_WA_PATTERN = 2
QWEN_IMAGES = [(150, 120), (96, 32), (144, 128), (48, 48), (144, 144)]  # (width, height) besides the common
# sizes: 9 x 8 merge units resized, two canvases as they are, and 3 x 3, 9 x 9 units (36, 324 patches:
# not a multiple of 16, so ggml sums the attention outputs by ggml_vec_dot_f32, not tinyBLAS)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _matrix(w: GGUFWriter, name: str, a: np.ndarray, qt: QT) -> None:
    w.add_tensor(name, a.astype(np.float16) if qt == QT.F16 else a.astype(np.float32))


def write_projector(spec: ProjectorSpec, path: Path) -> Path:
    """Write the projector `spec` to `path` (returned)."""
    rng = np.random.default_rng(spec.seed)
    d, ff, p = spec.n_embd, spec.n_ff, spec.patch_size
    n_patches = (spec.image_size // p) ** 2
    w = GGUFWriter(str(path), "clip")
    w.add_string("general.name", f"tiny-{spec.name}")
    w.add_string("clip.projector_type", spec.family)
    w.add_bool("clip.has_vision_encoder", True)
    qwen = spec.family in QWEN_FAMILIES
    if spec.family != "qwen2vl_merger":  # Qwen2-VL: neither, GELU-quick
        w.add_bool("clip.use_silu" if qwen else "clip.use_gelu", True)
    w.add_uint32("clip.vision.embedding_length", d)
    w.add_uint32("clip.vision.feed_forward_length", ff)
    w.add_uint32("clip.vision.block_count", spec.n_layer)
    w.add_uint32("clip.vision.projection_dim", spec.n_text)
    w.add_uint32("clip.vision.attention.head_count", spec.n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.image_size", spec.image_size)
    w.add_uint32("clip.vision.patch_size", p)
    siglip = spec.family in ("gemma3", "idefics3")
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5] if siglip else [0.48145466, 0.4578275, 0.40821073])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5] if siglip else [0.26862954, 0.26130258, 0.27577711])
    if spec.family in ("gemma3", "idefics3"):
        w.add_uint32("clip.vision.projector.scale_factor", spec.n_merge)
    if spec.longest_edge:
        w.add_uint32("clip.vision.preproc_image_size", spec.longest_edge)
    if qwen:
        if spec.family == "qwen2.5vl_merger":
            w.add_uint32("clip.vision.n_wa_pattern", QWEN25VL_WA_PATTERN)
        w.add_uint32("clip.vision.spatial_merge_size", 2)
    qt = spec.weight_type
    if qwen:
        _add_qwen25vl(w, spec, rng)
    else:
        _add_vit(w, spec, rng, n_patches)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _add_attention_and_norms(w: GGUFWriter, pre: str, rng: np.random.Generator, d: int, qt: QT, norm_bias: bool) -> None:
    """A block's Q/K/V/out with biases, then ln1 and ln2 (with biases: layer norms; without: RMS)."""
    for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
        _matrix(w, f"{pre}.{t}.weight", _normal(rng, (d, d), 0.12), qt)
        w.add_tensor(f"{pre}.{t}.bias", _normal(rng, (d,), 0.02))
    for t in ("ln1", "ln2"):
        w.add_tensor(f"{pre}.{t}.weight", 1.0 + _normal(rng, (d,), 0.05))
        if norm_bias:
            w.add_tensor(f"{pre}.{t}.bias", _normal(rng, (d,), 0.02))


def _add_qwen25vl(w: GGUFWriter, spec: ProjectorSpec, rng: np.random.Generator) -> None:
    """Qwen2.5-VL's tensors: two patch kernels, RMS norms (weights only), Q/K/V/out and the gated
    FFN with biases, post_ln (the merger's ln_q), mm.0 (4E -> 4E) and mm.2 (4E -> n_text).
    Qwen2-VL's: layer norms (with biases) and no gate."""
    d, ff, p, qt = spec.n_embd, spec.n_ff, spec.patch_size, spec.weight_type
    v2 = spec.family == "qwen2vl_merger"
    _matrix(w, "v.patch_embd.weight", _normal(rng, (d, 3, p, p), 0.06), qt)
    _matrix(w, "v.patch_embd.weight.1", _normal(rng, (d, 3, p, p), 0.06), qt)
    for il in range(spec.n_layer):
        pre = f"v.blk.{il}"
        _add_attention_and_norms(w, pre, rng, d, qt, norm_bias=v2)
        for t in ("ffn_up",) if v2 else ("ffn_gate", "ffn_up"):
            _matrix(w, f"{pre}.{t}.weight", _normal(rng, (ff, d), 0.12), qt)
            w.add_tensor(f"{pre}.{t}.bias", _normal(rng, (ff,), 0.02))
        _matrix(w, f"{pre}.ffn_down.weight", _normal(rng, (d, ff), 0.09), qt)
        w.add_tensor(f"{pre}.ffn_down.bias", _normal(rng, (d,), 0.02))
    w.add_tensor("v.post_ln.weight", 1.0 + _normal(rng, (d,), 0.05))
    if v2:
        w.add_tensor("v.post_ln.bias", _normal(rng, (d,), 0.02))
    _matrix(w, "mm.0.weight", _normal(rng, (4 * d, 4 * d), 0.06), qt)
    w.add_tensor("mm.0.bias", _normal(rng, (4 * d,), 0.02))
    _matrix(w, "mm.2.weight", _normal(rng, (spec.n_text, 4 * d), 0.06), qt)
    w.add_tensor("mm.2.bias", _normal(rng, (spec.n_text,), 0.02))


def _add_vit(w: GGUFWriter, spec: ProjectorSpec, rng: np.random.Generator, n_patches: int) -> None:
    """The CLIP/SigLIP ViT and the gemma3 / mlp projector's tensors."""
    d, ff, p, qt = spec.n_embd, spec.n_ff, spec.patch_size, spec.weight_type
    _matrix(w, "v.patch_embd.weight", _normal(rng, (d, 3, p, p), 0.08), qt)
    w.add_tensor("v.patch_embd.bias", _normal(rng, (d,), 0.02))
    w.add_tensor("v.position_embd.weight", _normal(rng, (n_patches, d), 0.02))
    for il in range(spec.n_layer):
        pre = f"v.blk.{il}"
        _add_attention_and_norms(w, pre, rng, d, qt, norm_bias=True)
        _matrix(w, f"{pre}.ffn_up.weight", _normal(rng, (ff, d), 0.12), qt)
        w.add_tensor(f"{pre}.ffn_up.bias", _normal(rng, (ff,), 0.02))
        _matrix(w, f"{pre}.ffn_down.weight", _normal(rng, (d, ff), 0.09), qt)
        w.add_tensor(f"{pre}.ffn_down.bias", _normal(rng, (d,), 0.02))
    if spec.family in ("gemma3", "idefics3"):  # SigLIP's post layer norm
        w.add_tensor("v.post_ln.weight", 1.0 + _normal(rng, (d,), 0.05))
        w.add_tensor("v.post_ln.bias", _normal(rng, (d,), 0.02))
    if spec.family == "idefics3":  # pixel shuffle, then one matrix without bias
        _matrix(w, "mm.model.fc.weight", _normal(rng, (spec.n_text, d * spec.n_merge**2), 0.06), qt)
    if spec.family == "gemma3":
        w.add_tensor("mm.soft_emb_norm.weight", 1.0 + _normal(rng, (d,), 0.05))
        # ggml ne = [n_text, n_embd]: clip.cpp multiplies by its transpose
        _matrix(w, "mm.input_projection.weight", _normal(rng, (d, spec.n_text), 0.1), qt)
    elif spec.family == "mlp":  # LLaVA 1.5: mm.0 -> GELU -> mm.2
        w.add_tensor("v.pre_ln.weight", 1.0 + _normal(rng, (d,), 0.05))
        w.add_tensor("v.pre_ln.bias", _normal(rng, (d,), 0.02))
        _matrix(w, "mm.0.weight", _normal(rng, (spec.n_text, d), 0.12), qt)
        w.add_tensor("mm.0.bias", _normal(rng, (spec.n_text,), 0.02))
        _matrix(w, "mm.2.weight", _normal(rng, (spec.n_text, spec.n_text), 0.04), qt)
        w.add_tensor("mm.2.bias", _normal(rng, (spec.n_text,), 0.02))


def test_image(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A deterministic RGB image (height, width, 3) uint8: smooth gradients plus noise, so that
    resizing has something to average and every channel differs."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 255 * x / max(1, width - 1)
    g = 255 * y / max(1, height - 1)
    b = 127 + 100 * np.sin((x + 2 * y) / 5.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 12, size=(height, width, 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


test_image.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
