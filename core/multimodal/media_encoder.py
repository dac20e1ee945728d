"""What the prompt asks of a projector, for images and audio alike (mtmd's context seen from
`mtmd_tokenize`): the text framing each medium, and the medium's embeddings as one or more
chunks (an image: one, or its slices and overview (idefics3); audio: one per 30 s window),
cached by the medium's hash, with the text or tokens between them (`layout`).

`encoder_for(media)` picks the encoder of a medium's kind: a projector file with one tower
refuses the other kind with llama-server's message; `MultiEncoder` holds both towers of a file
that has them (Qwen2.5-Omni's mmproj)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.multimodal.media import AUDIO, IMAGE, Media


@dataclass(frozen=True)
class Framing:
    """The text before and after a medium's chunks (mtmd.cpp's img_beg/img_end, aud_beg/aud_end)
    and whether the text model attends to its tokens non-causally (mtmd_decode_use_non_causal)."""

    begin: str
    end: str
    non_causal: bool


@dataclass(frozen=True)
class TokenPieces:
    """Tokens named by their text: each the first vocabulary id whose piece (special tokens
    rendered) is that text, as mtmd.cpp's lookup_token (idefics3's "\n\n", "<global-img>")."""

    pieces: tuple[str, ...]


# One step of a medium's place in the prompt: text (tokenized, special tokens parsed), tokens
# looked up by their pieces, or the index of one of the medium's chunks.
LayoutItem = str | TokenPieces | int


def unsupported(kind: str) -> InvalidRequest:
    """llama-server's refusal of a medium its projector cannot take (server-common.cpp)."""
    return InvalidRequest(f"{kind} input is not supported - hint: if this is unexpected, you may need to provide the mmproj")


Chunks = tuple[np.ndarray, ...]  # each (n_tokens, n_embd) float32, read-only


class MediaEncoder(ABC):
    """One tower of a projector file. Subclasses set `kind`, `framing`, `n_embd` and encode."""

    kind: str
    framing: Framing
    n_embd: int

    def __init__(self) -> None:
        self.cache = EmbeddingCache()
        self.n_encoded = 0  # media run through the tower (a cache hit does not count)

    @property
    def modalities(self) -> frozenset[str]:
        return frozenset({self.kind})

    def encoder_for(self, media: Media) -> "MediaEncoder":
        if media.kind != self.kind:
            raise unsupported(media.kind)
        return self

    def grid(self, media: Media) -> tuple[int, int] | None:
        """(nx, ny): the M-RoPE layout of the medium's tokens (Qwen-VL images); None: one
        position per token."""
        return None

    @abstractmethod
    def encode_chunks(self, media: Media) -> list[np.ndarray]:
        """The medium's embeddings, one (n_tokens, n_embd) array per prompt chunk."""

    def layout(self, media: Media, n_chunks: int) -> list[LayoutItem]:
        """The medium in the prompt: its chunks between the framing's begin and end text (a
        family with text between its chunks says otherwise: idefics3's slices)."""
        return [self.framing.begin, *range(n_chunks), self.framing.end]

    def encode_cached(self, media: Media) -> Chunks:
        """encode_chunks(media), or the chunks of the medium with this id encoded lately."""

        def make() -> Chunks:
            self.n_encoded += 1
            return tuple(self.encode_chunks(media))

        return self.cache.get_or_make(media.media_id, make)


class MultiEncoder:
    """The vision and audio towers of one projector file: each medium goes to its own."""

    def __init__(self, vision: MediaEncoder, audio: MediaEncoder) -> None:
        self.vision, self.audio = vision, audio
        self.n_embd = vision.n_embd

    @property
    def modalities(self) -> frozenset[str]:
        return frozenset({IMAGE, AUDIO})

    def encoder_for(self, media: Media) -> MediaEncoder:
        return self.audio if media.kind == AUDIO else self.vision


Encoders = MediaEncoder | MultiEncoder  # what a driver holds for -mm: prompt_with_media takes either


class EmbeddingCache:
    """The embeddings of the last `size` media by id (their bytes' hash): a second turn about the
    same image or clip does not run the encoder again. Thread-safe (the server's handlers)."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._items: OrderedDict[str, Chunks] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, key: str, make: Callable[[], Chunks]) -> Chunks:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        value = make()
        for a in value:
            a.setflags(write=False)
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value
