"""Audio input as llama.cpp's mtmd: decoding (decode.py), the Whisper log-mel front end
(mel.py), the Whisper-style encoder (whisper.py, block.py) and projector files (projector.py).

Public entry points:
    pcm = decode_audio(data)                       # WAV/MP3/FLAC bytes -> 16 kHz mono float32
    proj = load_audio_projector("mmproj.gguf")
    check_text_model(proj, n_embd)                 # the text model's width, as mtmd_init_from_file
    chunks = encode_audio(proj, pcm)               # one (n_tokens, n_embd) array per 30 s window
    AUDIO_MARKERS[proj.hp.proj_type]               # the text before and after the chunks
"""

from __future__ import annotations

import numpy as np

from llamacli.core.model.precision import GGMLPrecision, Precision
from llamacli.core.multimodal.audio.decode import MAX_SECONDS, SAMPLE_RATE, AudioDecodeError, decode_audio
from llamacli.core.multimodal.audio.mel import log_mel_windows
from llamacli.core.multimodal.audio.projector import (
    AUDIO_MARKERS,
    AUDIO_TYPES,
    AudioProjector,
    check_text_model,
    load_audio_projector,
)
from llamacli.core.multimodal.audio.whisper import encode_window

__all__ = [
    "AUDIO_MARKERS", "AUDIO_TYPES", "MAX_SECONDS", "SAMPLE_RATE", "AudioDecodeError", "AudioProjector", "audio_n_tokens",
    "check_text_model", "decode_audio", "encode_audio", "load_audio_projector", "log_mel_windows",
]


def audio_n_tokens(proj: AudioProjector, n_samples: int) -> list[int]:
    """Tokens per audio chunk for n_samples of PCM, without encoding (mtmd's clip_n_output_tokens:
    3000 frames / 2 (conv stride) / 2 (qwen2a pooling) = 750 per 30 s window)."""
    if n_samples <= 0:
        return []
    n_len = (max(n_samples, 201) + SAMPLE_RATE * 30) // 160 + 1  # frames of the padded signal
    return [750] * (n_len // 3000)


def encode_audio(proj: AudioProjector, pcm: np.ndarray, precision: Precision | None = None) -> list[np.ndarray]:
    """16 kHz mono float32 PCM -> the embeddings of each 30 s window, (n_tokens, n_embd) float32
    each: what libmtmd's `mtmd_encode_chunk` gives for each audio chunk of `mtmd_tokenize`
    (one chunk per window; llama-server places them one after the other in the prompt).
    The numerics follow the projector's loading: ggml (libmtmd's results) or f32."""
    pcm = np.asarray(pcm, dtype=np.float32).reshape(-1)
    if pcm.size == 0:
        raise AudioDecodeError("empty audio")
    p = precision or (GGMLPrecision() if proj.quantized else Precision())
    return [encode_window(proj, mel, p) for mel in log_mel_windows(pcm, proj.hp.n_mel)]
