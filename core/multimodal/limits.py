"""What decoded media may be, as the drivers' flags set it (light: no numba, no decoder
imported, so `llama serve` reads it before its port opens)."""

from __future__ import annotations

from dataclasses import dataclass

from llamacli.core.multimodal.image import ImageLimits

AUDIO_MAX_SECONDS = 600.0  # default limit on decoded audio (10 min: 9.6 M samples, 38 MB of float32)


@dataclass(frozen=True)
class MediaLimits:
    """The image limits (pixels, bytes) and the longest audio accepted, in seconds (checked on
    the header's length before any sample is decoded)."""

    image: ImageLimits = ImageLimits()
    audio_max_seconds: float = AUDIO_MAX_SECONDS

    @property
    def max_bytes(self) -> int:
        """Largest encoded medium accepted (images and audio alike)."""
        return self.image.max_bytes
