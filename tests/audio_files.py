"""Small audio files in the containers mtmd-helper decodes (WAV, FLAC; MP3 comes from the
fixture, cut from llama.cpp's own tools/mtmd/test-2.mp3), written here without an encoder
library: PCM WAV with the standard library's `wave`, IEEE-float WAV and FLAC by hand (FLAC
with VERBATIM subframes: raw samples, framed and checksummed as the format requires).
"""

from __future__ import annotations

import io
import struct
import wave

import numpy as np


def tone(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """A deterministic (n, channels) float signal in [-1, 1]: two tones and a little noise,
    a different mix per channel."""
    n = int(round(seconds * rate))
    t = np.arange(n) / rate
    rng = np.random.default_rng(seed)
    cols = [0.4 * np.sin(2 * np.pi * (330.0 + 110 * c) * t) + 0.2 * np.sin(2 * np.pi * 2500.0 * t)
            + 0.01 * rng.standard_normal(n) for c in range(channels)]
    return np.stack(cols, axis=1).clip(-1, 1)


def wav_pcm16(x: np.ndarray, rate: int) -> bytes:
    """A 16-bit PCM WAV of x (n, channels)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(x.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.round(x * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def wav_float32(x: np.ndarray, rate: int) -> bytes:
    """An IEEE-float (format 3) WAV of x (n, channels)."""
    ch = x.shape[1]
    data = x.astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, ch, rate, rate * ch * 4, ch * 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _crc(data: bytes, poly: int, bits: int) -> int:
    """MSB-first CRC with initial value 0 (FLAC's CRC-8 poly 0x07 and CRC-16 poly 0x8005)."""
    crc, top, mask = 0, 1 << (bits - 1), (1 << bits) - 1
    for byte in data:
        crc ^= byte << (bits - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly) & mask if crc & top else (crc << 1) & mask
    return crc


def _utf8_number(n: int) -> bytes:
    """FLAC's frame number coding (UTF-8 style), for n < 2048."""
    if n < 0x80:
        return bytes([n])
    return bytes([0xC0 | (n >> 6), 0x80 | (n & 0x3F)])


def flac_pcm16(x: np.ndarray, rate: int, block: int = 4096) -> bytes:
    """A 16-bit FLAC of x (n, channels <= 2, independent channels), VERBATIM subframes."""
    n, ch = x.shape
    pcm = np.round(x * 32767).astype(np.int64)
    # STREAMINFO: min/max block (16 bits each), min/max frame size (24 each, 0: unknown), rate (20),
    # channels - 1 (3), bits per sample - 1 (5), total samples (36): 144 bits, then an MD5 of zeros
    info = (block << 92 | block << 76 | rate << 8 | (ch - 1) << 5 | 15) << 36 | n
    out = bytearray(b"fLaC" + bytes([0x80, 0, 0, 34]) + info.to_bytes(18, "big") + bytes(16))
    for fi, start in enumerate(range(0, n, block)):
        part = pcm[start:start + block]
        head = bytes([0xFF, 0xF8, 0x70, ((ch - 1) << 4) | 0x08]) + _utf8_number(fi)
        head += struct.pack(">H", len(part) - 1)  # block size code 0111: 16-bit (size - 1) follows
        frame = head + bytes([_crc(head, 0x07, 8)])
        for c in range(ch):
            frame += b"\x02" + part[:, c].astype(">i2").tobytes()  # 0 000001 0: VERBATIM, no wasted bits
        out += frame + struct.pack(">H", _crc(frame, 0x8005, 16))
    return bytes(out)


def make_files() -> dict[str, bytes]:
    """The decoding fixtures' inputs (MP3 is added by scripts/oracle_audio.py)."""
    return {
        "wav16_stereo_22k": wav_pcm16(tone(0.6, 22050, 2, seed=1), 22050),
        "wavf32_mono_48k": wav_float32(tone(0.4, 48000, 1, seed=2), 48000),
        "wav16_mono_16k": wav_pcm16(tone(0.5, 16000, 1, seed=3), 16000),
        "flac16_mono_44k": flac_pcm16(tone(0.5, 44100, 1, seed=4), 44100),
        "flac16_stereo_16k": flac_pcm16(tone(0.3, 16000, 2, seed=5), 16000),
    }
