"""Dev-only: llama.cpp (libmtmd) reference fixtures for the synthetic projectors of
tests/tiny_mmproj.py, paired with the demo model (Gemma 3 270M, n_embd 640). Made with
llama-cpp-python 0.3.36 (CPU, 2 threads, clip flash attention off, no warm-up):

    PYTHONPATH=/work/ref/avx512 python scripts/mmproj_fixtures.py [SPEC ...]   (default: every spec)

Writes tests/fixtures/mmproj/<spec>.npz for every tests.tiny_mmproj.SPECS entry:
    sha256              str                  sha256 of the projector file
    image<i>            uint8 [h, w, 3]      the RGB input (tiny_mmproj.test_image, IMAGE_SIZES[i])
    embd<i>             float32 [n, n_text]  mtmd_encode_chunk's output for that image
qwen25vl, qwen25vl-f32 and qwen2vl also encode tiny_mmproj.QWEN_IMAGES (image3 on), are paired with the tiny qwen2vl F32 model of tests/tiny_models.py (n_embd 256) instead,
and also records mtmd's canvas for SIZES (`grid`: int32 [k, 4] of width, height, nx, ny merge
units of the image chunk mtmd_tokenize makes; `grid_custom`: the same with mtmd_context_params'
image_min_tokens, image_max_tokens = GRID_TOKENS).
For gemma3 (PROMPT) and qwen25vl (QWEN_PROMPT, image1) the end-to-end prompt through mtmd_helper_eval_chunks:
    e2e_chunks          int32 [k, 3]         (type, n_tokens, n_pos) of each chunk (0 text, 1 image)
    e2e_tokens          int32 [n]            the text chunks' tokens, concatenated
    e2e_top_ids         int32 [256]          the 256 largest logits of the last token, best first
    e2e_top_logits      float32 [256]        (the whole vocabulary would be 1 MB)

and for every tests.tiny_mmproj.SLICED_SPECS entry (idefics3, SmolVLM: slices and an overview
per image), paired with the tiny llama "F32_IDEFICS3" (n_embd 256, SmolVLM's image tokens), for
the images SLICED_IMAGE_SIZES[i]:
    image_sha256_<i>    str                  sha256 of the RGB input sliced_image(i) (h, w, 3) uint8
    pixels_sha256_<i>   str [k]              sha256 of each chunk's pixel tensor (float32 (3, S, S)),
                                             mtmd's graph input `inp_raw` read through cb_eval
and for i in SLICED_EMBD_IMAGES also
    pixels<i>           uint8 [k, 3, S, S]   those tensors as the bytes they were normalised from
                                             (checked to give mtmd's floats bit for bit)
    embd<i>             float32 [k * n, 256] each chunk's mtmd_encode_chunk output, in order
    chunks<i>, tokens<i>                     SMOLVLM_PROMPT's chunks and text tokens with that image
and the e2e_* entries for SMOLVLM_PROMPT with image 1. Only some specs:
    PYTHONPATH=/work/ref/avx512 python scripts/mmproj_fixtures.py idefics3 idefics3-old
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

from llamacli.core.multimodal.preprocess import ImagePrep, normalize  # noqa: E402
from llamacli.options.model_path import resolve_model  # noqa: E402
from tests.tiny_mmproj import QWEN_FAMILIES, QWEN_IMAGES, SLICED_SPECS, SPECS, ProjectorSpec, test_image, write_projector  # noqa: E402
from tests.tiny_models import IDEFICS3_MODEL, write_tiny_model  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "mmproj"
IMAGE_SIZES = [(64, 64), (100, 37), (23, 81)]  # (width, height): square, wide, tall
PROMPT = "<start_of_turn>user\nWhat is in <__media__> this picture?<end_of_turn>\n<start_of_turn>model\n"
N_THREADS = 2
SLICED_IMAGE_SIZES = [(64, 64), (100, 37), (23, 81), (200, 150)]  # 3 x 3, 3 x 1, 1 x 3, 3 x 3 slices
SLICED_EMBD_IMAGES = (1, 2)  # the images whose pixels and embeddings are kept (noise: 7 + 9 KB a chunk)
SMOLVLM_PROMPT = "<|im_start|>User:<__media__>What is in this picture?<end_of_utterance>\nAssistant:"


def sliced_image(i: int) -> np.ndarray:
    """The idefics3 fixtures' i-th image (not stored: the fixture keeps its sha256)."""
    w, h = SLICED_IMAGE_SIZES[i]
    return test_image(w, h, seed=20 + i)


class _GgmlTensor(ctypes.Structure):
    """struct ggml_tensor (ggml/include/ggml.h, this version)."""


_GgmlTensor._fields_ = [
    ("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
    ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(_GgmlTensor) * 10), ("view_src", ctypes.c_void_p), ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64), ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8),
]


class PixelCapture:
    """A cb_eval for mtmd_context_params: the pixels (the graph input `inp_raw`, F32 (nx, ny, 3))
    of every image the encoder runs, as (3, ny, nx) arrays, read at the node that consumes them."""

    def __init__(self, llama_cpp) -> None:  # type: ignore[no-untyped-def]
        self.pixels: list[np.ndarray] = []
        self.fn = llama_cpp.ggml_backend_sched_eval_callback(self._cb)

    @staticmethod
    def _inp_raw(t: _GgmlTensor) -> _GgmlTensor | None:
        for s in t.src:
            if s and s.contents.name == b"inp_raw":
                return s.contents
        return None

    def _cb(self, ptr: int, ask: bool, _user: int) -> bool:
        src = self._inp_raw(ctypes.cast(ptr, ctypes.POINTER(_GgmlTensor)).contents)
        if ask:
            return src is not None
        if src is not None:
            nx, ny, nc = src.ne[0], src.ne[1], src.ne[2]
            buf = ctypes.cast(src.data, ctypes.POINTER(ctypes.c_float))
            self.pixels.append(np.ctypeslib.as_array(buf, shape=(nc * ny * nx,)).reshape(nc, ny, nx).copy())
        return True
GRID_TOKENS = (64, 100)  # qwen25vl's canvas again with --image-min-tokens 64 --image-max-tokens 100
QWEN_PROMPT = "<|im_start|>user\nWhat is in <__media__> this picture?<|im_end|>\n<|im_start|>assistant\n"
# image sizes whose smart resize (patch 8, merge 2: align 16, 2048 to 1048576 pixels) rounds up,
# down, grows to the minimum and shrinks to the maximum
SIZES = [(1, 1), (7, 300), (16, 16), (23, 81), (24, 24), (40, 40), (100, 37), (255, 17), (321, 200),
         (1000, 1000), (1030, 1030), (2000, 300), (4000, 3000), (5, 9000)]


def _bitmap(mtmd, img: np.ndarray):  # type: ignore[no-untyped-def]
    h, w, _ = img.shape
    buf = (ctypes.c_uint8 * img.size).from_buffer_copy(np.ascontiguousarray(img).tobytes())
    return mtmd.mtmd_bitmap_init(w, h, buf)


def _chunks(mtmd, ctx, text: str, img: np.ndarray | None = None, bm=None):  # type: ignore[no-untyped-def]
    """mtmd_tokenize of text with one medium: an RGB image, or a bitmap made already (audio)."""
    chunks = mtmd.mtmd_input_chunks_init()
    raw = text.encode()
    inp = mtmd.mtmd_input_text(text=raw, text_len=len(raw), add_special=True, parse_special=True)
    bm = bm if bm is not None else _bitmap(mtmd, img)
    arr = (mtmd.mtmd_bitmap_p_ctypes * 1)(bm)
    rc = mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), arr, 1)
    if rc != 0:
        raise RuntimeError(f"mtmd_tokenize failed: {rc}")
    return chunks


def _embed(mtmd, ctx, img: np.ndarray, n_text: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    chunks = _chunks(mtmd, ctx, "<__media__>", img)
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        ch = mtmd.mtmd_input_chunks_get(chunks, i)
        if mtmd.mtmd_input_chunk_get_type(ch) != mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
            continue
        n = mtmd.mtmd_input_chunk_get_n_tokens(ch)
        if mtmd.mtmd_encode_chunk(ctx, ch) != 0:
            raise RuntimeError("mtmd_encode_chunk failed")
        ptr = mtmd.mtmd_get_output_embd(ctx)
        return np.ctypeslib.as_array(ptr, shape=(n * n_text,)).reshape(n, n_text).astype(np.float32, copy=True)
    raise RuntimeError("no image chunk")


def _layout(mtmd, chunks) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """(type, n_tokens, n_pos) of each chunk (0 text, 1 image) and the text chunks' tokens."""
    desc, tokens = [], []
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        ch = mtmd.mtmd_input_chunks_get(chunks, i)
        kind = mtmd.mtmd_input_chunk_get_type(ch)
        desc.append((kind, mtmd.mtmd_input_chunk_get_n_tokens(ch), mtmd.mtmd_input_chunk_get_n_pos(ch)))
        if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            p = mtmd.mtmd_input_chunk_get_tokens_text(ch, ctypes.byref(n))
            tokens += [p[j] for j in range(n.value)]
    return np.array(desc, dtype=np.int32), np.array(tokens, dtype=np.int32)


def _grid(mtmd, ctx, w: int, h: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(nx, ny) of the image chunk mtmd_tokenize makes for a w x h image."""
    chunks = _chunks(mtmd, ctx, "<__media__>", np.zeros((h, w, 3), dtype=np.uint8))
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        ch = mtmd.mtmd_input_chunks_get(chunks, i)
        if mtmd.mtmd_input_chunk_get_type(ch) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
            it = mtmd.mtmd_input_chunk_get_tokens_image(ch)
            return mtmd.mtmd_image_tokens_get_nx(it), mtmd.mtmd_image_tokens_get_ny(it)
    raise RuntimeError("no image chunk")


def e2e(llama_cpp, mtmd, model, ctx, img: np.ndarray | None, prompt: str = PROMPT, bm=None,  # type: ignore[no-untyped-def]
        n_ctx: int = 512) -> dict[str, np.ndarray]:
    """The prompt with its medium (an image, or the bitmap `bm`) through mtmd_helper_eval_chunks
    (n_batch 512): its chunks, text tokens and the last position's top 256 logits."""
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, 512, 512
    cp.n_threads = cp.n_threads_batch = N_THREADS
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    lctx = llama_cpp.llama_init_from_model(model, cp)
    chunks = _chunks(mtmd, ctx, prompt, img, bm)
    desc, tokens = _layout(mtmd, chunks)
    new_n_past = llama_cpp.llama_pos(0)
    rc = mtmd.mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, 512, True, ctypes.byref(new_n_past))
    if rc != 0:
        raise RuntimeError(f"mtmd_helper_eval_chunks failed: {rc}")
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(lctx, -1), shape=(n_vocab,)).astype(np.float32, copy=True)
    llama_cpp.llama_free(lctx)
    top = np.argsort(-logits, kind="stable")[:256]
    return {"e2e_chunks": desc, "e2e_tokens": tokens,
            "e2e_top_ids": top.astype(np.int32), "e2e_top_logits": logits[top]}


def _open(llama_cpp, mtmd, path: Path, model, capture: PixelCapture | None = None,  # type: ignore[no-untyped-def]
          image_tokens: tuple[int, int] | None = None):
    """mtmd_init_from_file on the CPU, flash attention off, no warm-up (image_tokens:
    --image-min/max-tokens)."""
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = N_THREADS
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.warmup = False
    params.print_timings = False
    if capture is not None:
        params.cb_eval = capture.fn
    if image_tokens is not None:
        params.image_min_tokens, params.image_max_tokens = image_tokens
    ctx = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
    if not ctx:
        raise RuntimeError(f"mtmd_init_from_file failed for {path.name}")
    return ctx


def _as_bytes(pixels: np.ndarray, prep: ImagePrep) -> np.ndarray:
    """mtmd's normalised pixels (3, S, S) back to the bytes they came from; checked: the bytes
    normalised again give the same floats bit for bit."""
    std, mean = np.asarray(prep.std, np.float32)[:, None, None], np.asarray(prep.mean, np.float32)[:, None, None]
    u8 = np.clip(np.rint((pixels * std + mean) * 255.0), 0, 255).astype(np.uint8)
    if not np.array_equal(normalize(u8.transpose(1, 2, 0), prep).view(np.uint32), pixels.view(np.uint32)):
        raise RuntimeError("mtmd's pixels are not a normalised byte image")
    return u8


def sliced_fixtures(llama_cpp, mtmd, name: str, spec: ProjectorSpec, model, tmp: Path) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """The idefics3 entries (see the module's docstring) for one projector."""
    path = write_projector(spec, tmp / f"{name}.gguf")
    capture = PixelCapture(llama_cpp)
    ctx = _open(llama_cpp, mtmd, path, model, capture)
    prep = ImagePrep(spec.image_size, "lanczos", (0, 0, 0), (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    out: dict[str, np.ndarray] = {"sha256": np.array(hashlib.sha256(path.read_bytes()).hexdigest())}
    for i in range(len(SLICED_IMAGE_SIZES)):
        img = sliced_image(i)
        chunks = _chunks(mtmd, ctx, "<__media__>", img)
        capture.pixels.clear()
        embds = []
        for c in range(mtmd.mtmd_input_chunks_size(chunks)):
            ch = mtmd.mtmd_input_chunks_get(chunks, c)
            if mtmd.mtmd_input_chunk_get_type(ch) != mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                continue  # the text between slices
            n = mtmd.mtmd_input_chunk_get_n_tokens(ch)
            if mtmd.mtmd_encode_chunk(ctx, ch) != 0:
                raise RuntimeError("mtmd_encode_chunk failed")
            ptr = mtmd.mtmd_get_output_embd(ctx)
            embds.append(np.ctypeslib.as_array(ptr, shape=(n * spec.n_text,)).reshape(n, spec.n_text).copy())
        if len(capture.pixels) != len(embds):
            raise RuntimeError(f"{len(capture.pixels)} pixel tensors captured for {len(embds)} chunks")
        out[f"image_sha256_{i}"] = np.array(hashlib.sha256(img.tobytes()).hexdigest())
        out[f"pixels_sha256_{i}"] = np.array([hashlib.sha256(p.tobytes()).hexdigest() for p in capture.pixels])
        if i in SLICED_EMBD_IMAGES:
            out[f"pixels{i}"] = np.stack([_as_bytes(p, prep) for p in capture.pixels])
            out[f"embd{i}"] = np.concatenate(embds).astype(np.float32)
        out[f"chunks{i}"], out[f"tokens{i}"] = _layout(mtmd, _chunks(mtmd, ctx, SMOLVLM_PROMPT, img))
    out.update(e2e(llama_cpp, mtmd, model, ctx, sliced_image(1), SMOLVLM_PROMPT))
    mtmd.mtmd_free(ctx)
    return out


def main() -> None:
    import llama_cpp
    from llama_cpp import mtmd_cpp as mtmd

    only = set(sys.argv[1:])
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    demo = llama_cpp.llama_model_load_from_file(resolve_model(None).encode(), mp)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        qwen_text = write_tiny_model("qwen2vl", "F32", Path(tmp) / "qwen2vl.gguf")
        tiny_qwen = llama_cpp.llama_model_load_from_file(str(qwen_text).encode(), mp)
        for name, spec in SPECS.items():
            if only and name not in only:
                continue
            qwen = SPECS[name].family in QWEN_FAMILIES
            model = tiny_qwen if qwen else demo
            path = write_projector(spec, Path(tmp) / f"{name}.gguf")
            ctx = _open(llama_cpp, mtmd, path, model)
            out: dict[str, np.ndarray] = {"sha256": np.array(hashlib.sha256(path.read_bytes()).hexdigest())}
            for i, (w, h) in enumerate(IMAGE_SIZES + (QWEN_IMAGES if qwen else [])):
                img = test_image(w, h, seed=i)
                out[f"image{i}"] = img
                out[f"embd{i}"] = _embed(mtmd, ctx, img, spec.n_text)
            if name == "gemma3":
                out.update(e2e(llama_cpp, mtmd, model, ctx, out["image1"]))
            if name == "qwen25vl":
                out["grid"] = np.array([(w, h, *_grid(mtmd, ctx, w, h)) for w, h in SIZES], dtype=np.int32)
                ctx2 = _open(llama_cpp, mtmd, path, model, image_tokens=GRID_TOKENS)
                out["grid_custom"] = np.array([(w, h, *_grid(mtmd, ctx2, w, h)) for w, h in SIZES], dtype=np.int32)
                mtmd.mtmd_free(ctx2)
                out.update(e2e(llama_cpp, mtmd, model, ctx, out["image1"], QWEN_PROMPT))
            mtmd.mtmd_free(ctx)
            np.savez_compressed(OUT / f"{name}.npz", **out)
            print(f"{name}: " + ", ".join(f"{k} {v.shape}" for k, v in out.items()))
        text = llama_cpp.llama_model_load_from_file(str(write_tiny_model(*IDEFICS3_MODEL, Path(tmp) / "llama.gguf")).encode(), mp)
        for name, spec in SLICED_SPECS.items():
            if only and name not in only:
                continue
            out = sliced_fixtures(llama_cpp, mtmd, name, spec, text, Path(tmp))
            np.savez_compressed(OUT / f"{name}.npz", **out)
            print(f"{name}: " + ", ".join(f"{k} {v.shape}" for k, v in out.items()))


if __name__ == "__main__":
    main()
