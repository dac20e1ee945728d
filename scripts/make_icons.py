"""Draw the web UI's icons (http/static/icons: icon.svg, icon-192.png, icon-512.png; committed).

    python scripts/make_icons.py

One drawing, written twice: as SVG (the favicon, and the manifest's scalable icon) and
rasterised with NumPy (4x4 samples per pixel) into the PNG sizes a web-app manifest needs
(browsers want 192 and 512 pixel PNGs to offer "Install"). A speech bubble with three dots on
a rounded square in the page's accent colour.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "http" / "static" / "icons"
SIZES = (192, 512)
SAMPLES = 4  # per pixel and axis

ACCENT = (0x3B, 0x6F, 0xD4)
WHITE = (0xFF, 0xFF, 0xFF)
# the drawing on the unit square (y down): shapes in painting order
BACKGROUND = (0.0, 0.0, 1.0, 1.0, 0.22)  # x0, y0, x1, y1, corner radius
BUBBLE = (0.18, 0.22, 0.82, 0.66, 0.12)
TAIL = ((0.30, 0.62), (0.27, 0.82), (0.48, 0.62))
DOTS = ((0.36, 0.44), (0.50, 0.44), (0.64, 0.44))
DOT_R = 0.05


def _hex(c: tuple[int, int, int]) -> str:
    return "#" + "".join(f"{v:02x}" for v in c)


def svg() -> str:
    def rect(r: tuple[float, ...], fill: tuple[int, int, int]) -> str:
        x0, y0, x1, y1, rad = (v * 100 for v in r)
        return f'<rect x="{x0:g}" y="{y0:g}" width="{x1 - x0:g}" height="{y1 - y0:g}" rx="{rad:g}" fill="{_hex(fill)}"/>'

    tail = " ".join(f"{x * 100:g},{y * 100:g}" for x, y in TAIL)
    dots = "".join(f'<circle cx="{x * 100:g}" cy="{y * 100:g}" r="{DOT_R * 100:g}" fill="{_hex(ACCENT)}"/>' for x, y in DOTS)
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">'
        f"{rect(BACKGROUND, ACCENT)}{rect(BUBBLE, WHITE)}"
        f'<polygon points="{tail}" fill="{_hex(WHITE)}"/>{dots}</svg>\n'
    )


def _in_rounded_rect(x: np.ndarray, y: np.ndarray, r: tuple[float, ...]) -> np.ndarray:
    x0, y0, x1, y1, rad = r
    # distance to the inner rectangle (shrunk by the radius) within the radius
    dx = np.maximum(np.maximum(x0 + rad - x, x - (x1 - rad)), 0.0)
    dy = np.maximum(np.maximum(y0 + rad - y, y - (y1 - rad)), 0.0)
    return (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1) & (dx * dx + dy * dy <= rad * rad)


def _in_triangle(x: np.ndarray, y: np.ndarray, tri: tuple[tuple[float, float], ...]) -> np.ndarray:
    (ax, ay), (bx, by), (cx, cy) = tri

    def side(px: float, py: float, qx: float, qy: float) -> np.ndarray:
        return (qx - px) * (y - py) - (qy - py) * (x - px)

    s1, s2, s3 = side(ax, ay, bx, by), side(bx, by, cx, cy), side(cx, cy, ax, ay)
    return ((s1 >= 0) & (s2 >= 0) & (s3 >= 0)) | ((s1 <= 0) & (s2 <= 0) & (s3 <= 0))


def raster(size: int) -> np.ndarray:
    """RGBA pixels (size, size, 4) uint8: each sample painted, then averaged per pixel."""
    n = size * SAMPLES
    c = (np.arange(n) + 0.5) / n
    x, y = np.meshgrid(c, c)  # (n, n) sample centres
    rgba = np.zeros((n, n, 4))
    layers = [
        (_in_rounded_rect(x, y, BACKGROUND), ACCENT),
        (_in_rounded_rect(x, y, BUBBLE) | _in_triangle(x, y, TAIL), WHITE),
        (np.any([(x - dx) ** 2 + (y - dy) ** 2 <= DOT_R ** 2 for dx, dy in DOTS], axis=0), ACCENT),
    ]
    for mask, colour in layers:
        rgba[mask] = (*colour, 255)
    # average the SAMPLES x SAMPLES block of every pixel (premultiplied, then back)
    blocks = rgba.reshape(size, SAMPLES, size, SAMPLES, 4)
    alpha = blocks[..., 3:].mean(axis=(1, 3))
    rgb = (blocks[..., :3] * blocks[..., 3:]).mean(axis=(1, 3)) / np.maximum(alpha, 1e-9)
    return np.concatenate([rgb, alpha], axis=-1).round().clip(0, 255).astype(np.uint8)


def png(pixels: np.ndarray) -> bytes:
    h, w, _ = pixels.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + pixels[i].tobytes() for i in range(h))  # filter 0 per row
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "icon.svg").write_text(svg())
    for size in SIZES:
        (OUT / f"icon-{size}.png").write_bytes(png(raster(size)))


if __name__ == "__main__":
    main()
