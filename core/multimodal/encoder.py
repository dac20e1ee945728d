"""A projector file opened for images: `VisionEncoder.load(path)` then `encode(rgb)` gives the
image's embeddings for the text model (llama.cpp's clip_init + clip_image_encode); as a
MediaEncoder (media_encoder.py) it gives the prompt one chunk per image, or one per slice and
the overview for the slicing family (idefics3, with the text mtmd puts between them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.precision import Precision, make_precision
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader
from llamacli.core.multimodal.media import IMAGE, Media
from llamacli.core.multimodal.media_encoder import Framing, LayoutItem, MediaEncoder, TokenPieces
from llamacli.core.multimodal.preprocess import canvas_size, normalize, preprocess
from llamacli.core.multimodal.projector_file import VisionHParams, read_vision_hparams
from llamacli.core.multimodal.projectors import PROJECTORS, Projector
from llamacli.core.multimodal.qwen25vl import Qwen25VLTower
from llamacli.core.multimodal.slicing import slice_grid, slice_image
from llamacli.core.multimodal.vit import VisionTower

Tower = VisionTower | Qwen25VLTower

# Each family's text around an image's embeddings (mtmd.cpp's img_beg / img_end), and whether
# the text model attends to the image's tokens non-causally (mtmd_decode_use_non_causal).
MEDIA_MARKER = "<__media__>"
ImageFraming = Framing

FRAMING: dict[str, Framing] = {
    "gemma3": Framing("<start_of_image>", "<end_of_image>", True),
    "idefics3": Framing("", "", False),
    "mlp": Framing("", "", False),
    "qwen2vl_merger": Framing("<|vision_start|>", "<|vision_end|>", False),
    "qwen2.5vl_merger": Framing("<|vision_start|>", "<|vision_end|>", False),
}
# The towers other than the CLIP/SigLIP ViT, by projector type.
TOWERS: dict[str, type[Tower]] = {"qwen2vl_merger": Qwen25VLTower, "qwen2.5vl_merger": Qwen25VLTower}


def idefics3_layout(grid_x: int, grid_y: int) -> list[LayoutItem]:
    """mtmd_tokenize's text around SmolVLM's chunks (slices row by row, then the overview):
    `<fake_token_around_image><row_Y_col_X>` before each slice (tokenized), "\n" after each
    row but the last, and "\n\n" <fake_token_around_image> <global-img> ... <fake_token_around_image>
    around the overview (tokens looked up by their pieces)."""
    items: list[LayoutItem] = []
    for y in range(grid_y):
        for x in range(grid_x):
            items += [f"<fake_token_around_image><row_{y + 1}_col_{x + 1}>", y * grid_x + x]
        if y != grid_y - 1:
            items.append(TokenPieces(("\n",)))
    fake = "<fake_token_around_image>"
    return items + [TokenPieces(("\n\n", fake, "<global-img>")), grid_x * grid_y, TokenPieces((fake,))]


class VisionEncoder(MediaEncoder):
    """The ViT and projector of one mmproj file (ggml numerics: mtmd's results to ~1e-5)."""

    kind = IMAGE

    def __init__(self, path: str, hp: VisionHParams, tower: Tower, projector: Projector, pr: Precision) -> None:
        super().__init__()
        self.path, self.hp, self.tower, self.projector, self.pr = path, hp, tower, projector, pr
        self.framing = FRAMING[hp.family]

    @classmethod
    def load(cls, path: str, n_embd_text: int | None = None, threads: int | None = None,
             image_tokens: tuple[int, int] = (-1, -1)) -> "VisionEncoder":
        """Open `path`; with n_embd_text, a projector of another width is a ModelLoadError (as
        mtmd_init_from_file's check); image_tokens: --image-min/max-tokens (-1: the family's)."""
        g = GGUFFile(path)
        hp = read_vision_hparams(g, image_tokens)
        pr = make_precision("ggml", threads)
        ld = WeightLoader(g, quantized=True)
        try:
            projector = PROJECTORS[hp.family](ld, hp)
            tower = TOWERS.get(hp.family, VisionTower)(ld, hp, pr, projector.n_run(hp))
            ld.finish()
        finally:
            ld.pool.shutdown(wait=True)
        if n_embd_text is not None and projector.n_text != n_embd_text:
            raise ModelLoadError(
                path, f"mismatch between text model (n_embd = {n_embd_text}) and mmproj (n_embd = {projector.n_text})"
            )
        return cls(path, hp, tower, projector, pr)

    @property
    def n_embd(self) -> int:  # type: ignore[override]
        """Width of the embeddings (the text model's n_embd)."""
        return self.projector.n_text

    @property
    def n_image_tokens(self) -> int:
        """Embeddings per chunk: per image (fixed-size families), per slice (idefics3)."""
        return self.projector.n_tokens(self.hp)

    @property
    def sliced(self) -> bool:
        return self.hp.family == "idefics3"

    def pixel_chunks(self, rgb: np.ndarray) -> list[np.ndarray]:
        """The encoder's inputs (3, H, W) float32 for an RGB image (h, w, 3) uint8, one per
        prompt chunk in mtmd's order (idefics3: the slices row by row, then the overview)."""
        prep = self.hp.prep
        if not self.sliced:
            return [preprocess(rgb, prep)]
        sl = slice_image(rgb, prep.image_size, prep.longest_edge)
        return [normalize(t, prep) for t in [*sl.tiles, sl.overview]]

    def encode(self, rgb: np.ndarray) -> np.ndarray:
        """(n, n_embd) float32 embeddings of an RGB image (h, w, 3) uint8: every chunk's, in order."""
        chunks = self.encode_rgb(rgb)
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks, axis=0)

    def encode_pixels(self, pixels: np.ndarray) -> np.ndarray:
        return self.projector(self.tower.forward(pixels), self.hp, self.pr)

    def encode_rgb(self, rgb: np.ndarray) -> list[np.ndarray]:
        """An image's embeddings: one chunk, or one per slice and the overview (idefics3)."""
        return [self.encode_pixels(p) for p in self.pixel_chunks(rgb)]

    def grid(self, media: Media) -> tuple[int, int] | None:
        """Qwen2.5-VL: the canvas's merge units per row and column (mtmd_image_tokens' nx, ny)."""
        if self.hp.prep.dynamic is None:
            return None
        h, w = media.rgb.shape[:2]
        cw, ch = canvas_size(w, h, self.hp.prep)
        step = self.hp.patch_size * self.hp.n_merge
        return cw // step, ch // step

    def encode_chunks(self, media: Media) -> list[np.ndarray]:
        return self.encode_rgb(media.rgb)

    def layout(self, media: Media, n_chunks: int) -> list[LayoutItem]:
        if not self.sliced:
            return super().layout(media, n_chunks)
        h, w = media.rgb.shape[:2]
        return idefics3_layout(*slice_grid(w, h, self.hp.prep.image_size, self.hp.prep.longest_edge))
