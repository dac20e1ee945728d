"""Audio input (core/multimodal/audio) against llama.cpp's libmtmd: decoding, the log-mel
front end and the qwen2a encoder, on the fixtures of scripts/oracle_audio.py (libmtmd from
llama-cpp-python 0.3.36, flash attention off) and the tiny projectors of tests/tiny_audio.py."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.multimodal.audio import (
    AUDIO_MARKERS,
    AudioDecodeError,
    audio_n_tokens,
    check_text_model,
    decode_audio,
    encode_audio,
    load_audio_projector,
    log_mel_windows,
)
from llamacli.core.multimodal.audio.decode import frames_after_resampling
from scripts.oracle_audio import proj_matrix, row_picks
from tests.audio_files import flac_pcm16, tone, wav_pcm16
from tests.tiny_audio import SIGNALS, signal, write_audio_projector

FIX = Path(__file__).parent / "fixtures" / "audio"


def _fixture(name: str) -> dict[str, np.ndarray]:
    with np.load(FIX / f"{name}.npz") as f:
        return {k: f[k] for k in f.files}


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


# --- log-mel ---------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", list(SIGNALS))
def test_log_mel_matches_libmtmd(sig: str) -> None:
    fx = _fixture("qwen2a-f16")
    mels = log_mel_windows(signal(sig), 128)
    assert len(mels) == fx[f"{sig}_melsum"].shape[0]  # windows: 31 s gives two
    for c, m in enumerate(mels):
        assert m.shape == (128, 3000) and m.dtype == np.float32
        # the same bits as libmtmd's: per-bin sums (every signal, the 31 s one included) and whole
        # windows (with correctly rounded instead of glibc's sinf/cosf, 0.03% of them were 1 ulp off)
        assert np.array_equal(m.astype(np.float64).sum(axis=1), fx[f"{sig}_melsum"][c])
        if f"{sig}_mel{c}" in fx:
            assert np.array_equal(m, fx[f"{sig}_mel{c}"])


def test_log_mel_edges() -> None:
    assert log_mel_windows(np.zeros(0, dtype=np.float32)) == []
    # (n + 480000) // 160 + 1 frames: two windows from 6000 on, i.e. from 29.99 s of audio
    assert len(log_mel_windows(np.zeros(16000 * 30, dtype=np.float32))) == 2
    assert [len(log_mel_windows(np.zeros(n, dtype=np.float32))) for n in (1, 16000 * 30 - 161, 16000 * 30 - 160)] == [1, 1, 2]


# --- encoder -----------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["qwen2a-f16", "qwen2a-q8"])
def projector(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    name = request.param
    path = write_audio_projector(name, tmp_path_factory.mktemp("audio") / f"{name}.gguf")
    return name, load_audio_projector(str(path))


# measured (the fixtures come from an AVX-512 EPYC): f16 at most 1.9e-4 (2 of the 6 windows
# within 3e-7), q8 at most 6.6e-3: a last-bit difference in an attention output (1 in 50 of
# them are 1 ulp off ggml's) flips an f16 or Q8_0 rounding of the next matmul's input
TOL = {"qwen2a-f16": 3e-4, "qwen2a-q8": 1e-2}


@pytest.mark.parametrize("sig", list(SIGNALS))
def test_encoder_matches_libmtmd(projector, sig: str) -> None:  # type: ignore[no-untyped-def]
    name, proj = projector
    fx = _fixture(name)
    pcm = signal(sig)
    embs = encode_audio(proj, pcm)
    assert [e.shape[0] for e in embs] == list(fx[f"{sig}_n_tokens"]) == audio_n_tokens(proj, pcm.size)
    for c, e in enumerate(embs):
        assert e.shape == (750, 640) and e.dtype == np.float32
        assert _rel(e[row_picks(e.shape[0])], fx[f"{sig}_rows"][c]) < TOL[name]
        got, ref = e @ proj_matrix(640), fx[f"{sig}_proj"][c]
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < TOL[name]


def test_f32_numerics_and_text_model_check(tmp_path: Path) -> None:
    path = str(write_audio_projector("qwen2a-f16", tmp_path / "p.gguf"))
    proj = load_audio_projector(path, quantized=False)
    (e,) = encode_audio(proj, signal("sine"))
    fx = _fixture("qwen2a-f16")
    # plain float32 maths (no f16 rounding of activations, BLAS attention): close, not the same
    assert 1e-6 < _rel(e[row_picks(750)], fx["sine_rows"][0]) < 2e-3  # measured 2.5e-4
    check_text_model(proj, 640)
    with pytest.raises(ModelLoadError, match=r"mismatch between text model \(n_embd = 1024\) and mmproj \(n_embd = 640\)"):
        check_text_model(proj, 1024)
    assert AUDIO_MARKERS[proj.hp.proj_type] == ("<|audio_bos|>", "<|audio_eos|>")


def _clip_header(path: Path, has: str, proj_type: str) -> str:
    """A tensorless clip GGUF: clip.has_<has>_encoder and clip.projector_type."""
    import gguf

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_bool(f"clip.has_{has}_encoder", True)
    w.add_string("clip.projector_type", proj_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_projector_errors(tmp_path: Path) -> None:
    vision = _clip_header(tmp_path / "v.gguf", "vision", "gemma3")
    with pytest.raises(ModelLoadError, match="not an audio projector"):
        load_audio_projector(vision)
    ultravox = _clip_header(tmp_path / "u.gguf", "audio", "ultravox")
    with pytest.raises(ModelLoadError, match="unsupported audio projector type 'ultravox'"):
        load_audio_projector(ultravox)


# --- decoding ----------------------------------------------------------------------------------

DECODE_TOL = {"mp3": 2e-5}  # MP3 frames decode ~1e-5 apart (a different build of the same dr_mp3)


def test_decode_matches_mtmd_helper() -> None:
    fx = _fixture("decode")
    names = [k[:-6] for k in fx if k.endswith("_bytes")]
    assert len(names) == 6
    for n in names:
        got, ref = decode_audio(fx[f"{n}_bytes"].tobytes()), fx[f"{n}_pcm"]
        assert got.dtype == np.float32 and got.shape == ref.shape, n  # lengths exactly as mtmd's
        assert np.abs(got - ref).max() <= DECODE_TOL.get(n.split("_")[0][:3], 2e-7), n
        if n in ("wav16_mono_16k", "flac16_stereo_16k"):  # no resampling: the same bits
            assert np.array_equal(got, ref), n


def test_decode_truncated_mp3_is_zero_filled_as_mtmd() -> None:
    # mtmd-helper allocates the header's length and reads what the stream gives
    fx = _fixture("decode")
    pcm = decode_audio(fx["mp3_mono_44k_bytes"].tobytes())
    assert pcm.shape[0] == 279034
    assert np.abs(pcm[:20000]).max() > 0.01 and not pcm[47000:].any()


def test_frames_after_resampling() -> None:
    assert frames_after_resampling(16000, 16000, 123) == 123
    assert frames_after_resampling(16000, 48000, 19200) == 6401  # what mtmd gave for the 48 kHz WAV
    assert frames_after_resampling(16000, 22050, 13230) == 9600


def _wav_header(rate: int, ch: int, data_bytes: int) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, ch, rate, rate * ch * 2, ch * 2, 16)
    return (b"RIFF" + struct.pack("<I", min(36 + data_bytes, 0xFFFFFFFF)) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", data_bytes))


@pytest.mark.parametrize("data, message", [
    (b"", "unsupported audio format"),
    (b"OggS" + bytes(60), "unsupported audio format"),
    (b"\x89PNG\r\n\x1a\n" + bytes(60), "unsupported audio format"),
    (b"RIFF\x00\x00\x00\x00WAVEfmt ", "cannot read the WAV audio"),
    (b"fLaC" + bytes(30), "cannot read the FLAC audio"),
])
def test_decode_refuses_bad_input(data: bytes, message: str) -> None:
    with pytest.raises(AudioDecodeError, match=message) as e:
        decode_audio(data)
    assert isinstance(e.value, InvalidRequest)


def test_decode_limits_duration_before_allocating() -> None:
    # a 44-byte WAV whose header claims ~37 hours: miniaudio bounds the data chunk by the bytes
    # there are, so it decodes to nothing (and encode_audio refuses empty audio)
    assert decode_audio(_wav_header(16000, 2, 0xFFFFFFF0)).shape == (0,)
    with pytest.raises(AudioDecodeError, match="empty audio"):
        encode_audio(None, decode_audio(_wav_header(16000, 2, 0xFFFFFFF0)))  # type: ignore[arg-type]
    # the MP3 fixture: 24 kB whose Xing header says 17.4 s: refused from the header alone
    mp3 = _fixture("decode")["mp3_mono_44k_bytes"].tobytes()
    with pytest.raises(AudioDecodeError, match=r"audio is 17\.4 s long: the limit is 10 s"):
        decode_audio(mp3, max_seconds=10)
    ok = wav_pcm16(tone(2.0, 16000), 16000)
    assert decode_audio(ok).shape == (32000,)
    with pytest.raises(AudioDecodeError, match="the limit is 1.5 s"):
        decode_audio(ok, max_seconds=1.5)
    with pytest.raises(AudioDecodeError, match="the limit is 1 s"):
        decode_audio(flac_pcm16(tone(2.0, 16000), 16000), max_seconds=1)


def _flac_claiming(seconds: int) -> bytes:
    """A valid 0.3 s FLAC whose STREAMINFO says `seconds` long (the last 36 bits of its 18 bytes)."""
    f = flac_pcm16(tone(0.3, 16000), 16000)
    info = int.from_bytes(f[8:26], "big") >> 36 << 36 | 16000 * seconds
    return f[:8] + info.to_bytes(18, "big") + f[26:]


def test_decode_hostile_streams() -> None:
    rng = np.random.default_rng(0)
    for data, fmt in [(b"ID3\x04" + bytes(6) + rng.bytes(3000), "MP3"), (b"\xff\xfb" + rng.bytes(3000), "MP3"),
                      (b"RIFF\x10\x00\x00\x00WAVE" + rng.bytes(3000), "WAV")]:
        with pytest.raises(AudioDecodeError, match=f"cannot read the {fmt} audio"):
            decode_audio(data)
    # 10 hours claimed by a 9 kB FLAC: mtmd-helper would allocate 2.3 GB; refused from the header
    with pytest.raises(AudioDecodeError, match="audio is 36000.0 s long: the limit is 600 s"):
        decode_audio(_flac_claiming(36000))
    # a FLAC cut after its header: the header's 0.3 s of zeros, as mtmd-helper gives
    pcm = decode_audio(flac_pcm16(tone(0.3, 16000), 16000)[:42])
    assert pcm.shape == (4800,) and not pcm.any()


def test_decode_truncated_wav_keeps_header_length() -> None:
    full = wav_pcm16(tone(1.0, 16000), 16000)
    cut = full[: len(full) // 2]
    pcm = decode_audio(cut)
    ref = decode_audio(full)
    n = (len(cut) - 44) // 2
    assert np.array_equal(pcm[:n], ref[:n])
    assert not pcm[n:].any()


@pytest.mark.parametrize("n", [40, 64, 130, 256])
def test_attention_dot_is_ggml_vec_dot_f32_bit_for_bit(n: int) -> None:
    """The audio attention's dot product (whole groups of 64 in vector registers) is ggml's
    AVX-512 ggml_vec_dot_f32 done step by step in exact arithmetic: four accumulators of 16
    fused multiply-add lanes, (0 + 2) + (1 + 3), _mm512_reduce_add_ps, then the rest one by one."""
    from llamacli.core.multimodal.window_attention import dot_f32
    from tests.test_qmm_expf import _fma

    f32 = np.float32
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(f32), rng.standard_normal(n).astype(f32)
    whole = n - n % 64
    acc = np.zeros((4, 16), dtype=f32)
    for i in range(0, whole, 64):
        for j in range(4):
            for lane in range(16):
                acc[j, lane] = _fma(x[i + 16 * j + lane], y[i + 16 * j + lane], acc[j, lane])
    v = (acc[0] + acc[2]) + (acc[1] + acc[3])
    t8 = v[8:] + v[:8]
    t4 = t8[4:] + t8[:4]
    want = f32((t4[0] + t4[2]) + (t4[1] + t4[3])) if whole else f32(0.0)
    for i in range(whole, n):
        want = f32(want + f32(x[i] * y[i]))
    assert np.array_equal(np.array([dot_f32(x, y)], dtype=f32).view(np.uint32), np.array([want]).view(np.uint32))
