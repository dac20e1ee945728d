"""Image decoding (core/multimodal/image.py): the formats llama-server accepts, and hostile
input refused with one line before any large allocation."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from PIL import Image

from llamacli.core.errors import InvalidRequest
from llamacli.core.multimodal.image import ImageLimits, decode_image
from tests.tiny_mmproj import test_image


def _encode(img: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "WEBP", "GIF", "JPEG"])
def test_formats_decode_to_rgb(fmt: str) -> None:
    img = test_image(33, 17)
    out = decode_image(_encode(img, fmt))
    assert out.shape == (17, 33, 3) and out.dtype == np.uint8
    if fmt in ("PNG", "BMP"):  # lossless
        assert np.array_equal(out, img)


def test_grey_and_alpha_images_become_rgb() -> None:
    grey = decode_image(_encode(np.full((4, 5), 77, dtype=np.uint8), "PNG"))
    assert grey.shape == (4, 5, 3) and np.all(grey == 77)
    rgba = np.zeros((3, 3, 4), dtype=np.uint8)
    assert decode_image(_encode(rgba, "PNG")).shape == (3, 3, 3)


def _png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_huge_header_is_refused_without_allocating() -> None:
    tracemalloc.start()
    # Pillow refuses it first (over twice its MAX_IMAGE_PIXELS): its own one-line message
    with pytest.raises(InvalidRequest, match="image refused: Image size \\(10000000000 pixels\\) exceeds limit"):
        decode_image(_png_header(100_000, 100_000))
    with pytest.raises(InvalidRequest, match="10000x10000 pixels, more than the limit of 89478485 pixels"):
        decode_image(_png_header(10_000, 10_000))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


def test_limits_are_settable() -> None:
    data = _encode(test_image(40, 30), "PNG")
    with pytest.raises(InvalidRequest, match="40x30 pixels, more than the limit of 1000 pixels"):
        decode_image(data, ImageLimits(max_pixels=1000))
    with pytest.raises(InvalidRequest, match="bytes, more than the limit of 100"):
        decode_image(data, ImageLimits(max_bytes=100))


def test_truncated_and_unknown_data() -> None:
    data = _encode(test_image(64, 64), "PNG")
    with pytest.raises(InvalidRequest, match="failed to load image"):
        decode_image(data[: len(data) // 2])
    with pytest.raises(InvalidRequest, match="unknown or unsupported image format"):
        decode_image(b"GIF89a-not-really" + b"\0" * 10)
    with pytest.raises(InvalidRequest, match="unknown or unsupported image format"):
        decode_image(b"hello, world")
