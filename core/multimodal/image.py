"""Image bytes to an RGB uint8 array, with limits that hold for hostile input.

Decoding is Pillow's (PNG, JPEG, WebP, GIF, BMP and the rest of Pillow's readers; the first
frame of an animation). llama.cpp decodes with stb_image: lossless formats give the same
pixels, JPEG may differ by a few levels (a different IDCT), see docs/multimodal.md.

Limits, checked on the header before any pixel is decoded: at most `max_pixels` pixels
(default Pillow's MAX_IMAGE_PIXELS, about 89 million: a 100k x 100k header is refused without
allocating anything) and `max_bytes` of input. Truncated or unreadable data is an error too.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import InvalidRequest

# Pillow's default decompression-bomb threshold (PIL.Image.MAX_IMAGE_PIXELS), as our default
DEFAULT_MAX_PIXELS = 1024 * 1024 * 1024 // 4 // 3
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")


@dataclass(frozen=True)
class ImageLimits:
    """What a decoded image may be: pixels (width * height) and encoded bytes."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_bytes: int = DEFAULT_MAX_BYTES


def decode_image(data: bytes, limits: ImageLimits = ImageLimits()) -> np.ndarray:
    """The image in `data` as RGB uint8 (height, width, 3). InvalidRequest (one line) for
    data that is too large, not an image of a known format, truncated or too many pixels."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > limits.max_bytes:
        raise InvalidRequest(f"image is {len(data)} bytes, more than the limit of {limits.max_bytes}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our limit speaks below
            img = Image.open(io.BytesIO(data), formats=FORMATS)  # reads the header only
            w, h = img.size
            if w <= 0 or h <= 0 or w * h > limits.max_pixels:
                raise InvalidRequest(f"image is {w}x{h} pixels, more than the limit of {limits.max_pixels} pixels")
            img.seek(0)
            rgb = img.convert("RGB")  # decodes: raises on truncated data
    except InvalidRequest:
        raise
    except UnidentifiedImageError:
        raise InvalidRequest("failed to load image: unknown or unsupported image format") from None
    except Image.DecompressionBombError as e:  # over twice Pillow's MAX_IMAGE_PIXELS: refused on open
        raise InvalidRequest(f"image refused: {e}") from None
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        raise InvalidRequest(f"failed to load image: {e}") from None
    return np.asarray(rgb, dtype=np.uint8).copy()
