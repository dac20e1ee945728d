"""A projector file opened for images: `VisionEncoder.load(path)` then `encode(rgb)` gives the
image's embeddings for the text model (llama.cpp's clip_init + clip_image_encode)."""

from __future__ import annotations

from collections.abc import Callable

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.precision import Precision, make_precision
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader
from llamacli.core.multimodal.preprocess import preprocess
from llamacli.core.multimodal.projector_file import VisionHParams, read_vision_hparams
from llamacli.core.multimodal.projectors import PROJECTORS, Projector
from llamacli.core.multimodal.vit import VisionTower

# Each family's text around an image's embeddings (mtmd.cpp's img_beg / img_end), and whether
# the text model attends to the image's tokens non-causally (mtmd_decode_use_non_causal).
MEDIA_MARKER = "<__media__>"


@dataclass(frozen=True)
class ImageFraming:
    begin: str
    end: str
    non_causal: bool


FRAMING: dict[str, ImageFraming] = {
    "gemma3": ImageFraming("<start_of_image>", "<end_of_image>", True),
    "mlp": ImageFraming("", "", False),
}


class VisionEncoder:
    """The ViT and projector of one mmproj file (ggml numerics: mtmd's results to ~1e-5)."""

    def __init__(self, path: str, hp: VisionHParams, tower: VisionTower, projector: Projector, pr: Precision) -> None:
        self.path, self.hp, self.tower, self.projector, self.pr = path, hp, tower, projector, pr
        self.framing = FRAMING[hp.family]
        self.cache = EmbeddingCache()
        self.n_encoded = 0  # images run through the ViT (a cache hit does not count)

    @classmethod
    def load(cls, path: str, n_embd_text: int | None = None, threads: int | None = None) -> "VisionEncoder":
        """Open `path`; with n_embd_text, a projector of another width is a ModelLoadError (as
        mtmd_init_from_file's check)."""
        g = GGUFFile(path)
        hp = read_vision_hparams(g)
        pr = make_precision("ggml", threads)
        ld = WeightLoader(g, quantized=True)
        try:
            projector = PROJECTORS[hp.family](ld, hp)
            tower = VisionTower(ld, hp, pr, projector.n_run(hp))
            ld.finish()
        finally:
            ld.pool.shutdown(wait=True)
        if n_embd_text is not None and projector.n_text != n_embd_text:
            raise ModelLoadError(
                path, f"mismatch between text model (n_embd = {n_embd_text}) and mmproj (n_embd = {projector.n_text})"
            )
        return cls(path, hp, tower, projector, pr)

    @property
    def n_embd(self) -> int:
        """Width of the embeddings (the text model's n_embd)."""
        return self.projector.n_text

    @property
    def n_image_tokens(self) -> int:
        """Embeddings per image (fixed-size families)."""
        return self.projector.n_tokens(self.hp)

    def pixels(self, rgb: np.ndarray) -> np.ndarray:
        """The encoder's input (3, S, S) float32 for an RGB image (h, w, 3) uint8."""
        return preprocess(rgb, self.hp.prep)

    def encode(self, rgb: np.ndarray) -> np.ndarray:
        """(n_image_tokens, n_embd) float32 embeddings of an RGB image (h, w, 3) uint8."""
        return self.encode_pixels(self.pixels(rgb))

    def encode_pixels(self, pixels: np.ndarray) -> np.ndarray:
        self.n_encoded += 1
        return self.projector(self.tower.forward(pixels), self.hp, self.pr)

    def encode_cached(self, media_id: str, rgb: np.ndarray) -> np.ndarray:
        """encode(rgb), or the embeddings of the image with this id encoded lately."""
        return self.cache.get_or_make(media_id, lambda: self.encode(rgb))


class EmbeddingCache:
    """The embeddings of the last `size` images by media id (their bytes' hash): a second turn
    about the same image does not run the encoder again. Thread-safe (the server's handlers)."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, key: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        value = make()
        value.setflags(write=False)
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value
