"""Audio files to 16 kHz mono float32 PCM, as mtmd-helper decodes them (`decode_audio_from_buf`
in tools/mtmd/mtmd-helper.cpp), with the same library: miniaudio 0.11 (PyPI `miniaudio`).

mtmd-helper accepts a buffer whose magic says WAV (RIFF....WAVE), MP3 (ID3 or an MPEG sync
word) or FLAC (fLaC); asks miniaudio's decoder (f32, 1 channel, the model's rate: miniaudio
down-mixes and resamples linearly) for its length in output frames, allocates that many zeroed
samples and reads into them. A stream that ends early (a truncated file) leaves the rest zero;
we do the same, so the PCM is libmtmd's sample for sample.

Unlike mtmd-helper we refuse before allocating when the header's length is beyond `max_seconds`
(a 40-byte WAV can claim hours), and we read in blocks, so memory stays bounded by the limit.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.multimodal.limits import AUDIO_MAX_SECONDS

SAMPLE_RATE = 16000
MAX_SECONDS = AUDIO_MAX_SECONDS
_BLOCK = 16384


class AudioDecodeError(InvalidRequest):
    """Bad audio input: not WAV/MP3/FLAC, unreadable, or longer than the limit."""


def audio_format(data: bytes) -> str | None:
    """'wav', 'mp3' or 'flac' by magic, as mtmd-helper's is_audio_file; None otherwise."""
    if len(data) < 12:
        return None
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:3] == b"ID3" or (data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def frames_after_resampling(rate_out: int, rate_in: int, n_in: int) -> int:
    """miniaudio's ma_calculate_frame_count_after_resampling (what ma_decoder reports as length)."""
    if rate_in == 0 or rate_out == 0 or n_in == 0:
        return 0
    if rate_out == rate_in:
        return n_in
    n_out = n_in * rate_out // rate_in
    frac = n_out * (rate_in // rate_out) // rate_out
    prelim = n_out * (rate_in % rate_out) + frac
    return n_out + 1 if prelim <= n_in else n_out


def _source_length(data: bytes, fmt: str) -> tuple[int, int]:
    """(frames, sample rate) of the stream as its miniaudio backend reports them."""
    import miniaudio

    get_info = {"wav": miniaudio.wav_get_info, "flac": miniaudio.flac_get_info, "mp3": miniaudio.mp3_get_info}[fmt]
    try:
        info = get_info(data)
    except miniaudio.MiniaudioError:
        raise AudioDecodeError(f"cannot read the {fmt.upper()} audio (corrupt or truncated header)") from None
    return int(info.num_frames), int(info.sample_rate)


def decode_audio(data: bytes, sample_rate: int = SAMPLE_RATE, max_seconds: float = MAX_SECONDS) -> np.ndarray:
    """An audio file's bytes (WAV, MP3, FLAC) -> mono float32 PCM at `sample_rate`, exactly as
    libmtmd's helper decodes it. AudioDecodeError (an InvalidRequest: HTTP 400) for anything
    else, an unreadable stream, or audio longer than `max_seconds`."""
    import miniaudio

    fmt = audio_format(data)
    if fmt is None:
        raise AudioDecodeError("unsupported audio format: expected WAV, MP3 or FLAC")
    n_src, rate_src = _source_length(data, fmt)
    if rate_src <= 0:
        raise AudioDecodeError(f"the {fmt.upper()} audio has no sample rate")
    if n_src / rate_src > max_seconds:
        raise AudioDecodeError(f"audio is {n_src / rate_src:.1f} s long: the limit is {max_seconds:g} s")
    n = frames_after_resampling(sample_rate, rate_src, n_src)
    pcm = np.zeros(n, dtype=np.float32)  # what the stream does not fill stays 0, as in mtmd
    try:
        stream = miniaudio.stream_memory(data, miniaudio.SampleFormat.FLOAT32, 1, sample_rate, _BLOCK)
        got = 0
        while got < n:
            block = stream.send(min(_BLOCK, n - got))
            k = min(len(block), n - got)
            if k <= 0:
                break
            pcm[got:got + k] = np.frombuffer(block, dtype=np.float32, count=k)
            got += k
        stream.close()
    except StopIteration:
        pass
    except miniaudio.MiniaudioError:
        raise AudioDecodeError(f"cannot decode the {fmt.upper()} audio") from None
    return pcm
