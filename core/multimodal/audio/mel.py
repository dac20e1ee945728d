"""The Whisper log-mel spectrogram exactly as llama.cpp's mtmd-audio.cpp computes it
(`mtmd_audio_preprocessor_whisper`), for 16 kHz mono float32 PCM.

Steps (each with mtmd's float widths, so that the values match libmtmd's to float32 rounding):
- pad: a signal shorter than n_fft/2 + 1 samples is zero-filled to that length; then 200
  samples of reflection at the start (x[200], ..., x[1]), the signal, 30 s + 200 samples of
  zeros at the end;
- frames of 400 samples every 160 (n_len = (n_padded - 400) // 160 + 1), times a periodic Hann
  window (0.5 (1 - cosf(2 pi i / 400)), in double, stored as float);
- mtmd's own FFT in float32: radix-2 splits down to the odd length 25, then a direct DFT, the
  twiddles from a 400-entry sinf/cosf table (`_fft400` reproduces the order of every sum);
- power |X|^2 of bins 0..200, times the Slaney mel filterbank (librosa's default: Slaney
  scale, area-normalised, 0 to 8 kHz; built in double, stored as float), summed in double in
  groups of four float products; floor 2^-24, log10;
- Whisper's normalisation over the whole padded signal: clamp at max - 8, then (x + 4) / 4;
- windows of 3000 frames (30 s); the last, incomplete one is dropped (it is padding only).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from numba import njit

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
N_BINS = N_FFT // 2 + 1  # 201
WINDOW_FRAMES = 3000  # 30 s
CHUNK_SECONDS = 30
MEL_FLOOR = np.float32(2.0**-24)  # mtmd's filter_params.mel_floor (5.960464477539063e-08f)


def _libm_f32(name: str) -> Callable[[float], float] | None:
    """The C library's float function `name` (sinf, cosf), or None where it cannot be loaded."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        fn = getattr(lib, name)
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


@lru_cache(maxsize=1)
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sin, cos, hann): mtmd_audio_cache's tables for n = 400, sinf/cosf of the float32 angle.
    From the C library's sinf/cosf, as mtmd calls them (glibc's are within an ulp of the exact
    value and differ from it at a few of these 400 angles); correctly rounded without one."""
    theta = (2 * math.pi * np.arange(N_FFT) / N_FFT).astype(np.float32)
    sinf, cosf = _libm_f32("sinf"), _libm_f32("cosf")
    if sinf is not None and cosf is not None:
        sin = np.array([sinf(float(t)) for t in theta], dtype=np.float32)
        cos = np.array([cosf(float(t)) for t in theta], dtype=np.float32)
    else:
        sin = np.sin(theta.astype(np.float64)).astype(np.float32)
        cos = np.cos(theta.astype(np.float64)).astype(np.float32)
    hann = (0.5 * (1.0 - cos.astype(np.float64))).astype(np.float32)  # 0.5 * (1.0 - cosf(.)) in double
    return sin, cos, hann


@lru_cache(maxsize=4)
def mel_filters(n_mel: int) -> np.ndarray:
    """Slaney-scale, area-normalised triangular filters (n_mel, 201) float32, as
    mtmd_audio_cache::fill_mel_filterbank_matrix (fmin 0, fmax sr/2, scale 1, not HTK)."""
    min_log_hz, lin_slope = 1000.0, 3 / 200.0
    min_log_mel, log_step = min_log_hz * lin_slope, math.log(6.4) / 27.0

    def hz_to_mel(f: float) -> float:
        return f * lin_slope if f < min_log_hz else min_log_mel + math.log(f / min_log_hz) / log_step

    def mel_to_hz(m: float) -> float:
        return m / lin_slope if m < min_log_mel else min_log_hz * math.exp((m - min_log_mel) * log_step)

    m_lo, m_hi = hz_to_mel(0.0), hz_to_mel(0.5 * SAMPLE_RATE)
    hz = [mel_to_hz(m_lo + (m_hi - m_lo) * (i / (n_mel + 1))) for i in range(n_mel + 2)]
    f = np.arange(N_BINS) * (SAMPLE_RATE / N_FFT)
    out = np.zeros((n_mel, N_BINS), dtype=np.float32)
    for m in range(n_mel):
        left, center, right = hz[m], hz[m + 1], hz[m + 2]
        up = (f - left) / max(1e-30, center - left)
        down = (right - f) / max(1e-30, right - center)
        w = np.where((f >= left) & (f <= center), up, np.where((f > center) & (f <= right), down, 0.0))
        out[m] = (w * (2.0 / max(1e-30, right - left))).astype(np.float32)
    return out


def pad_signal(pcm: np.ndarray) -> np.ndarray:
    """mtmd's padding: zero-fill to 201 samples, reflect 200 at the start, 30 s + 200 zeros after."""
    x = np.asarray(pcm, dtype=np.float32).reshape(-1)
    half = N_FFT // 2
    if x.shape[0] < half + 1:
        x = np.concatenate([x, np.zeros(half + 1 - x.shape[0], dtype=np.float32)])
    out = np.zeros(x.shape[0] + SAMPLE_RATE * CHUNK_SECONDS + 2 * half, dtype=np.float32)
    out[:half] = x[half:0:-1]  # x[200], x[199], ..., x[1]
    out[half:half + x.shape[0]] = x
    return out


@njit(cache=True, nogil=True)
def _fft400(x, sin, cos, re, im, tre, tim):  # type: ignore[no-untyped-def]
    """mtmd's recursive real FFT of 400 float32 samples, computed bottom-up with the same
    operations in the same order. Level M (25, 50, ..., 400) holds 400 / M sub-transforms:
    sub-transform o of size M covers x[o + s n] (s = 400 / M); its halves are sub-transforms o
    and o + s of size M / 2 (the even and odd samples)."""
    # leaves: 16 direct DFTs of 25 points, twiddle index (k n 16) mod 400
    for o in range(16):
        for k in range(25):
            acc_re = np.float32(0.0)
            acc_im = np.float32(0.0)
            for n in range(25):
                idx = (k * n * 16) % N_FFT
                v = x[o + 16 * n]
                acc_re += v * cos[idx]
                acc_im += (-v) * sin[idx]
            re[o * 25 + k] = acc_re
            im[o * 25 + k] = acc_im
    m = 25
    while m < N_FFT:
        s = N_FFT // (2 * m)  # sub-transforms at the new level (size 2m)
        for o in range(s):
            e0 = o * m  # even half: level-m slot o
            o0 = (o + s) * m  # odd half: level-m slot o + s
            d0 = o * 2 * m
            step = N_FFT // (2 * m)
            for k in range(m):
                c = cos[k * step]
                sn = -sin[k * step]
                er = re[e0 + k]
                ei = im[e0 + k]
                orr = re[o0 + k]
                oi = im[o0 + k]
                tre[d0 + k] = (er + c * orr) - sn * oi
                tim[d0 + k] = (ei + c * oi) + sn * orr
                tre[d0 + k + m] = (er - c * orr) + sn * oi
                tim[d0 + k + m] = (ei - c * oi) - sn * orr
        for i in range(N_FFT):
            re[i] = tre[i]
            im[i] = tim[i]
        m *= 2


@njit(cache=True, nogil=True)
def _log_mel(padded, hann, sin, cos, filters, n_len, floor, out):  # type: ignore[no-untyped-def]
    """out (n_mel, n_len) float32: log10 of the mel power of each frame (before normalisation)."""
    n_mel = filters.shape[0]
    frame = np.empty(N_FFT, dtype=np.float32)
    re = np.empty(N_FFT, dtype=np.float32)
    im = np.empty(N_FFT, dtype=np.float32)
    tre = np.empty(N_FFT, dtype=np.float32)
    tim = np.empty(N_FFT, dtype=np.float32)
    power = np.empty(N_BINS, dtype=np.float32)
    for i in range(n_len):
        off = i * HOP
        for j in range(N_FFT):
            frame[j] = hann[j] * padded[off + j]
        _fft400(frame, sin, cos, re, im, tre, tim)
        for j in range(N_BINS):
            power[j] = re[j] * re[j] + im[j] * im[j]
        for j in range(n_mel):
            acc = 0.0  # double, as mtmd; each group of four float products is summed in float
            k = 0
            while k < N_BINS - 3:
                acc += (((power[k] * filters[j, k] + power[k + 1] * filters[j, k + 1])
                         + power[k + 2] * filters[j, k + 2]) + power[k + 3] * filters[j, k + 3])
                k += 4
            while k < N_BINS:
                acc += power[k] * filters[j, k]
                k += 1
            if acc < floor:
                acc = floor
            out[j, i] = math.log10(acc)


def log_mel_windows(pcm: np.ndarray, n_mel: int = 128) -> list[np.ndarray]:
    """The 30 s log-mel windows (each (n_mel, 3000) float32) that mtmd feeds a Whisper-style
    encoder for this 16 kHz mono PCM; empty PCM gives an empty list (mtmd refuses it)."""
    if np.asarray(pcm).size == 0:
        return []
    padded = pad_signal(pcm)
    n_len = (padded.shape[0] - N_FFT) // HOP + 1
    sin, cos, hann = _tables()
    mel = np.empty((n_mel, n_len), dtype=np.float32)
    _log_mel(padded, hann, sin, cos, mel_filters(n_mel), n_len, float(MEL_FLOOR), mel)
    # Whisper's clamp and scale, in double over the float values, stored as float
    top = float(mel.max()) - 8.0
    mel = np.where(mel.astype(np.float64) < top, np.float32(top), mel)
    mel = ((mel.astype(np.float64) + 4.0) / 4.0).astype(np.float32)
    return [mel[:, a:a + WINDOW_FRAMES].copy() for a in range(0, n_len - WINDOW_FRAMES + 1, WINDOW_FRAMES)]
