"""A projector (mmproj) GGUF's vision hyperparameters, read as tools/mtmd/clip.cpp's
`load_hparams` reads them (the `clip.*` keys of clip-impl.h), with each family's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from llamacli.core.errors import ModelLoadError, UnsupportedArchitecture
from llamacli.core.model.families.base import md_float, md_get, md_int
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.multimodal.preprocess import BICUBIC, BILINEAR, ImagePrep
from llamacli.core.multimodal.slicing import LANCZOS

# The vision projector types this package encodes (clip.projector_type values).
VISION_FAMILIES = ("gemma3", "idefics3", "mlp", "qwen2vl_merger", "qwen2.5vl_merger")
QWEN2VL, QWEN25VL = "qwen2vl_merger", "qwen2.5vl_merger"
# clip.cpp's set_limit_image_tokens(8, 4096) for the Qwen-VL families: the pixel budget in merged tokens
QWEN_MIN_TOKENS, QWEN_MAX_TOKENS = 8, 4096
QWEN_WINDOW = 112  # Qwen2.5-VL's window attention: pixels per window side


@dataclass(frozen=True)
class VisionHParams:
    """The vision tower's shape and the family's preprocessing. n_merge: gemma3's pooling
    kernel, idefics3's pixel-shuffle factor, Qwen2.5-VL's merger (patches per side of one output
    token); gelu, silu: the FFN's
    activation (`clip.use_gelu`, `clip.use_silu`, else GELU-quick); n_wa_pattern, window_size:
    Qwen2.5-VL's window attention (every n_wa_pattern-th layer attends to all patches, the others
    within windows of window_size pixels)."""

    family: str
    n_embd: int
    n_head: int
    n_ff: int
    n_layer: int
    eps: float
    patch_size: int
    projection_dim: int
    n_merge: int
    gelu: bool
    prep: ImagePrep
    silu: bool = False
    n_wa_pattern: int = 0
    window_size: int = 0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_patches_side(self) -> int:
        return self.prep.image_size // self.patch_size


def _triple(g: GGUFFile, key: str) -> tuple[float, float, float]:
    v = md_get(g.metadata, g.path, key)
    arr = np.asarray(v, dtype=np.float64).reshape(-1)
    if arr.size < 3 or not np.all(np.isfinite(arr)):
        raise ModelLoadError(g.path, f"metadata key {key!r} must hold 3 finite numbers")
    return float(arr[0]), float(arr[1]), float(arr[2])


def projector_type(g: GGUFFile) -> str:
    """clip.projector_type, or clip.vision.projector_type for files with several modalities."""
    md = g.metadata
    t = md.get("clip.projector_type") or md.get("clip.vision.projector_type")
    if not isinstance(t, str):
        raise ModelLoadError(g.path, "not a projector file: no clip.projector_type key")
    return t


def read_vision_hparams(g: GGUFFile, image_tokens: tuple[int, int] = (-1, -1)) -> VisionHParams:
    """The file's vision hyperparameters; UnsupportedArchitecture for projector types not built.
    image_tokens: the fewest and most tokens of a dynamic-resolution image, each -1 for the
    family's (clip.cpp's custom_image_min/max_tokens)."""
    md, path = g.metadata, g.path
    if g.metadata.get("general.architecture") != "clip":
        raise ModelLoadError(path, "not a projector file: general.architecture is not 'clip'")
    if not md.get("clip.has_vision_encoder", False):
        raise UnsupportedArchitecture(path, "the projector has no vision encoder")
    family = projector_type(g)
    if family not in VISION_FAMILIES:
        raise UnsupportedArchitecture(
            path, f"vision projector type {family!r} is not supported (supported: {', '.join(VISION_FAMILIES)})"
        )
    n_embd = md_int(md, path, "clip.vision.embedding_length")
    n_head = md_int(md, path, "clip.vision.attention.head_count")
    if n_embd % n_head:
        raise ModelLoadError(path, f"embedding_length {n_embd} is not a multiple of head_count {n_head}")
    image_size = md_int(md, path, "clip.vision.image_size", hi=8192)
    patch = md_int(md, path, "clip.vision.patch_size", hi=image_size)
    if image_size % patch:
        raise ModelLoadError(path, f"image_size {image_size} is not a multiple of patch_size {patch}")
    longest = 0
    if family == "gemma3":  # clip.cpp: n_merge 4 unless the file says (tinygemma3), bilinear, black pad
        n_merge = md_int(md, path, "clip.vision.projector.scale_factor", 4)
        if (image_size // patch) % n_merge:
            raise ModelLoadError(path, f"{image_size // patch} patches per side are not a multiple of scale_factor {n_merge}")
        algo, pad = BILINEAR, (0, 0, 0)
    elif family == "idefics3":  # SmolVLM: pixel shuffle by scale_factor (clip.cpp asserts > 1), Lanczos
        n_merge = md_int(md, path, "clip.vision.projector.scale_factor", 1)
        if n_merge < 2 or (image_size // patch) % n_merge:
            raise ModelLoadError(path, f"idefics3 needs a scale_factor > 1 dividing the {image_size // patch} patches per side, has {n_merge}")
        algo, pad = LANCZOS, (0, 0, 0)
        longest = md_int(md, path, "clip.vision.preproc_image_size", 0, lo=0, hi=65536)
    elif family in (QWEN2VL, QWEN25VL):  # dynamic size, bicubic, black pad; the merger is 2 x 2 (clip.cpp's graph)
        n_merge, algo, pad = md_int(md, path, "clip.vision.spatial_merge_size", 2), BICUBIC, (0, 0, 0)
        if n_merge != 2:
            raise ModelLoadError(path, f"clip.vision.spatial_merge_size is {n_merge}: the Qwen-VL merger takes 2")
    else:  # LLaVA: bicubic, padded with the CLIP mean colour
        n_merge, algo, pad = 1, BICUBIC, (122, 116, 104)
    mean, std = _triple(g, "clip.vision.image_mean"), _triple(g, "clip.vision.image_std")
    silu = bool(md.get("clip.use_silu", False))
    if silu and md.get("clip.use_gelu", False):
        raise ModelLoadError(path, "both clip.use_gelu and clip.use_silu are set")
    extra: dict[str, Any] = {}
    if family in (QWEN2VL, QWEN25VL):
        area = patch * patch * n_merge * n_merge  # set_limit_image_tokens(8, 4096), or the user's
        lo, hi = (t if t > 0 else d for t, d in zip(image_tokens, (QWEN_MIN_TOKENS, QWEN_MAX_TOKENS)))
        dynamic = (patch * n_merge, lo * area, hi * area)
        prep = ImagePrep(image_size, algo, pad, mean, std, dynamic=dynamic)
        # Qwen2.5-VL must say its window pattern (Qwen2-VL has none); clip.cpp reads no window
        # size for them: 112 pixels (Qwen2.5-VL's), whatever the file says
        n_wa = md_int(md, path, "clip.vision.n_wa_pattern", None if family == QWEN25VL else 0, lo=0)
        extra = {"n_wa_pattern": n_wa, "window_size": QWEN_WINDOW}
    else:
        prep = ImagePrep(image_size, algo, pad, mean, std, longest_edge=longest)
    return VisionHParams(
        family=family,
        n_embd=n_embd,
        n_head=n_head,
        n_ff=md_int(md, path, "clip.vision.feed_forward_length"),
        n_layer=md_int(md, path, "clip.vision.block_count", lo=1, hi=1024),
        eps=md_float(md, path, "clip.vision.attention.layer_norm_epsilon"),
        patch_size=patch,
        projection_dim=md_int(md, path, "clip.vision.projection_dim", 0, lo=0),
        n_merge=n_merge,
        gelu=bool(md.get("clip.use_gelu", False)),
        prep=prep,
        silu=silu,
        **extra,
    )
