"""Encoding time of a real-shaped projector, ours beside llama.cpp's mtmd on the same file.

    PYTHONPATH=/work/ref/avx512 python scripts/bench_mmproj.py [--layers N] [--image-size S] [--threads T]

Writes a SigLIP-400M-shaped gemma3 projector (width 1152, 16 heads, n_ff 4304, patch 14, F16
weights, random; --layers of the real 27 to keep a run short) paired with the demo model, then
times one image's encoding: ours (VisionEncoder.encode, after one warm-up run that compiles the
kernels) and mtmd's (mtmd_encode_chunk after one warm-up), each the best of --reps runs, and
prints both with their ratio, as CPU time (what holds on a shared machine; with one thread the
fair figure) and wall time, and the machine's load. Without llama-cpp-python only our time is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llamacli.core.multimodal.encoder import VisionEncoder  # noqa: E402
from tests.tiny_mmproj import ProjectorSpec, test_image, write_projector  # noqa: E402


def best_of(reps: int, fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(CPU time, wall time) in seconds, each the best of reps runs: the process's CPU time
    (every thread's) holds on a machine shared with other work, where the wall clock does not."""
    cpu, wall = [], []
    for _ in range(reps):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu), min(wall)


def mtmd_time(path: Path, img, threads: int, reps: int) -> tuple[float, float] | None:  # type: ignore[no-untyped-def]
    try:
        import llama_cpp
        from llama_cpp import mtmd_cpp as mtmd
    except ImportError:
        return None
    from llamacli.options.model_path import resolve_model
    from scripts.mmproj_fixtures import _chunks

    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(resolve_model(None).encode(), llama_cpp.llama_model_default_params())
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.warmup, params.print_timings = False, threads, False, False
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
    chunks = _chunks(mtmd, ctx, "<__media__>", img)
    image = next(
        mtmd.mtmd_input_chunks_get(chunks, i) for i in range(mtmd.mtmd_input_chunks_size(chunks))
        if mtmd.mtmd_input_chunk_get_type(mtmd.mtmd_input_chunks_get(chunks, i)) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE
    )
    mtmd.mtmd_encode_chunk(ctx, image)  # warm-up
    return best_of(reps, lambda: mtmd.mtmd_encode_chunk(ctx, image))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=896)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    spec = ProjectorSpec("bench", "gemma3", n_embd=1152, n_head=16, n_ff=4304, n_layer=a.layers,
                         image_size=a.image_size, patch_size=14, n_merge=4)
    img = test_image(640, 480)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_projector(spec, Path(tmp) / "bench.gguf")
        enc = VisionEncoder.load(str(path), n_embd_text=640, threads=a.threads)
        enc.encode(img)  # compiles the kernels this projector needs
        ours = best_of(a.reps, lambda: enc.encode(img))
        theirs = mtmd_time(path, img, a.threads, a.reps)
    n_patches = (a.image_size // 14) ** 2
    print(f"gemma3 projector, width 1152, {a.layers} layers, {a.image_size} px ({n_patches} patches), F16, {a.threads} threads")
    print(f"llamacli:       CPU {ours[0]:.2f} s   wall {ours[1]:.2f} s")
    if theirs is not None:
        print(f"llama.cpp mtmd: CPU {theirs[0]:.2f} s   wall {theirs[1]:.2f} s")
        print(f"speed ratio (mtmd time / ours): CPU {theirs[0] / ours[0]:.2f}x   wall {theirs[1] / ours[1]:.2f}x")
    print(f"load average over the last minute: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
