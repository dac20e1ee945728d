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

from llamacli.options.model_path import resolve_model  # noqa: E402
from tests.tiny_mmproj import QWEN_FAMILIES, QWEN_IMAGES, SPECS, test_image, write_projector  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "mmproj"
IMAGE_SIZES = [(64, 64), (100, 37), (23, 81)]  # (width, height): square, wide, tall
PROMPT = "<start_of_turn>user\nWhat is in <__media__> this picture?<end_of_turn>\n<start_of_turn>model\n"
N_THREADS = 2
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
    desc, tokens = [], []
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        ch = mtmd.mtmd_input_chunks_get(chunks, i)
        kind = mtmd.mtmd_input_chunk_get_type(ch)
        desc.append((kind, mtmd.mtmd_input_chunk_get_n_tokens(ch), mtmd.mtmd_input_chunk_get_n_pos(ch)))
        if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            p = mtmd.mtmd_input_chunk_get_tokens_text(ch, ctypes.byref(n))
            tokens += [p[j] for j in range(n.value)]
    new_n_past = llama_cpp.llama_pos(0)
    rc = mtmd.mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, 512, True, ctypes.byref(new_n_past))
    if rc != 0:
        raise RuntimeError(f"mtmd_helper_eval_chunks failed: {rc}")
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(lctx, -1), shape=(n_vocab,)).astype(np.float32, copy=True)
    llama_cpp.llama_free(lctx)
    top = np.argsort(-logits, kind="stable")[:256]
    return {"e2e_chunks": np.array(desc, dtype=np.int32), "e2e_tokens": np.array(tokens, dtype=np.int32),
            "e2e_top_ids": top.astype(np.int32), "e2e_top_logits": logits[top]}


def main() -> None:
    import llama_cpp
    from llama_cpp import mtmd_cpp as mtmd

    from tests.tiny_models import write_tiny_model

    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    demo = llama_cpp.llama_model_load_from_file(resolve_model(None).encode(), mp)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        qwen_text = write_tiny_model("qwen2vl", "F32", Path(tmp) / "qwen2vl.gguf")
        tiny_qwen = llama_cpp.llama_model_load_from_file(str(qwen_text).encode(), mp)
        for name, spec in SPECS.items():
            if sys.argv[1:] and name not in sys.argv[1:]:
                continue
            qwen = SPECS[name].family in QWEN_FAMILIES
            model = tiny_qwen if qwen else demo
            path = write_projector(spec, Path(tmp) / f"{name}.gguf")
            params = mtmd.mtmd_context_params_default()
            params.use_gpu = False
            params.n_threads = N_THREADS
            params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            params.warmup = False
            params.print_timings = False
            ctx = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
            if not ctx:
                raise RuntimeError(f"mtmd_init_from_file failed for {name}")
            out: dict[str, np.ndarray] = {"sha256": np.array(hashlib.sha256(path.read_bytes()).hexdigest())}
            for i, (w, h) in enumerate(IMAGE_SIZES + (QWEN_IMAGES if qwen else [])):
                img = test_image(w, h, seed=i)
                out[f"image{i}"] = img
                out[f"embd{i}"] = _embed(mtmd, ctx, img, spec.n_text)
            if name == "gemma3":
                out.update(e2e(llama_cpp, mtmd, model, ctx, out["image1"]))
            if name == "qwen25vl":
                out["grid"] = np.array([(w, h, *_grid(mtmd, ctx, w, h)) for w, h in SIZES], dtype=np.int32)
                params.image_min_tokens, params.image_max_tokens = GRID_TOKENS  # --image-min/max-tokens
                ctx2 = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
                out["grid_custom"] = np.array([(w, h, *_grid(mtmd, ctx2, w, h)) for w, h in SIZES], dtype=np.int32)
                mtmd.mtmd_free(ctx2)
                out.update(e2e(llama_cpp, mtmd, model, ctx, out["image1"], QWEN_PROMPT))
            mtmd.mtmd_free(ctx)
            np.savez_compressed(OUT / f"{name}.npz", **out)
            print(f"{name}: " + ", ".join(f"{k} {v.shape}" for k, v in out.items()))


if __name__ == "__main__":
    main()
