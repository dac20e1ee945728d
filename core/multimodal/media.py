"""Media as a prompt receives it: an image's RGB pixels or an audio clip's 16 kHz PCM, with the
hash of the bytes it came from (llama-server keys its prompt cache by that hash), and the bytes
of a request or a file decoded by their magic as mtmd-helper does (`mtmd_helper_bitmap_init_from_buf`:
WAV, MP3 or FLAC is audio, anything else an image)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from llamacli.core.multimodal.image import decode_image
from llamacli.core.multimodal.limits import MediaLimits

IMAGE = "image"
AUDIO = "audio"


@dataclass(frozen=True)
class Media:
    """One medium: `data` is RGB (h, w, 3) uint8 for an image, mono float32 PCM (n,) for audio;
    `media_id` the hash of its bytes."""

    data: np.ndarray
    media_id: str
    kind: str = IMAGE

    @property
    def rgb(self) -> np.ndarray:
        return self.data

    @classmethod
    def of(cls, array: np.ndarray, data: bytes | None = None, kind: str = IMAGE) -> "Media":
        return cls(array, hashlib.sha256(data if data is not None else array.tobytes()).hexdigest()[:32], kind)


def decode_media(data: bytes, limits: MediaLimits = MediaLimits()) -> Media:
    """Bytes of an image or an audio file (sniffed by magic) as Media; InvalidRequest (one line)
    when they cannot be decoded within the limits."""
    from llamacli.core.multimodal.audio.decode import audio_format, decode_audio  # miniaudio, numba: on first use

    if audio_format(data) is not None:
        return Media.of(decode_audio(data, max_seconds=limits.audio_max_seconds), data, AUDIO)
    return Media.of(decode_image(data, limits.image), data, IMAGE)
