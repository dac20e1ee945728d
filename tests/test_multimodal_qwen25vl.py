"""Qwen2.5-VL (`qwen2.5vl_merger` projector, `qwen2vl` text model) and Qwen2-VL's projector
(`qwen2vl_merger`) against llama.cpp's libmtmd
(fixtures from scripts/mmproj_fixtures.py): the canvas mtmd picks, the window partition and
vision rope as clip.cpp builds them, the embeddings, and an image prompt's logits through
mtmd_helper_eval_chunks (M-RoPE positions)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.multimodal.encoder import VisionEncoder
from llamacli.core.multimodal.mrope import mrope_positions
from llamacli.core.multimodal.preprocess import smart_size
from llamacli.core.multimodal.prompt import MediaSpan
from llamacli.core.multimodal.qwen25vl import patch_positions, vision_rope, windows
from tests.tiny_mmproj import QWEN_IMAGES, SPECS, write_projector

FIXTURES = Path(__file__).parent / "fixtures" / "mmproj"
N_IMAGES = 3 + len(QWEN_IMAGES)
# Attention in ggml's order of float operations (window_attention.py), every linear's input
# rounded as ggml rounds it: what is left is an f16 step now and then (the merger's GELU table;
# with F16 weights every linear's input) after a last-bit difference upstream. Measured: F32
# weights 1.0e-6 .. 8.3e-6; F16 weights 0 (bit for bit) .. 4.0e-5, as the other families
# (test_multimodal_vision.REL_TOL). With the attention through BLAS instead: F16 up to 3.6e-4.
REL_TOL_F32 = 3e-5
REL_TOL_F16 = 3e-4


@pytest.fixture(scope="module")
def projectors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("qwen25vl")
    return {name: write_projector(SPECS[name], d / f"{name}.gguf") for name in ("qwen25vl", "qwen25vl-f32", "qwen2vl")}


# qwen2vl (Qwen2-VL's tower: layer norms, no windows, GELU-quick through ggml's f16 table):
# measured 0 .. 1.6e-4 (computed without the table: 5e-4 on every image)
@pytest.mark.parametrize("name,tol", [("qwen25vl-f32", REL_TOL_F32), ("qwen25vl", REL_TOL_F16), ("qwen2vl", REL_TOL_F16)])
def test_embeddings_match_libmtmd(projectors: dict[str, Path], name: str, tol: float) -> None:
    """Square, wide and tall images resized onto their canvas, a 9 x 8-unit one whose window
    attention cuts windows at the grid's edge, two canvases fed as they are, and 3 x 3 and 9 x 9
    units (patches not a multiple of 16: the other summation of the attention outputs)."""
    fx = np.load(FIXTURES / f"{name}.npz")
    path = projectors[name]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == str(fx["sha256"]), "projector writer changed: rerun the script"
    enc = VisionEncoder.load(str(path), n_embd_text=256)
    for i in range(N_IMAGES):
        ref = fx[f"embd{i}"]
        got = enc.encode(fx[f"image{i}"])
        assert got.shape == ref.shape
        rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        assert rel < tol, f"{name} image {i}: relative error {rel:.2e}"


def test_resized_images_give_libmtmds_bits(projectors: dict[str, Path]) -> None:
    """The wide and tall images, resized (bicubic) and padded onto a non-square canvas, give
    libmtmd's F16 embeddings bit for bit, on every CPU (the kernels' fixed order): so the pixel
    tensors are mtmd's (libmtmd does not expose them), since one level of one pixel moves the
    output."""
    fx = np.load(FIXTURES / "qwen25vl.npz")
    enc = VisionEncoder.load(str(projectors["qwen25vl"]))
    for i in (1, 2):
        (px,) = enc.pixel_chunks(fx[f"image{i}"])
        assert px.shape[1] != px.shape[2]
        np.testing.assert_array_equal(enc.encode_pixels(px), fx[f"embd{i}"])
        px[1, 5, 7] += np.float32(1 / 255 / 0.26130258)  # one level of one green value
        assert not np.array_equal(enc.encode_pixels(px), fx[f"embd{i}"])


def test_qwen25vl_needs_its_window_pattern(projectors: dict[str, Path], tmp_path: Path) -> None:
    """clip.cpp requires clip.vision.n_wa_pattern of a qwen2.5vl_merger file (Qwen2-VL's has none)."""
    from llamacli.core.errors import ModelLoadError
    from tests.tiny_models import rewrite_gguf

    bad = rewrite_gguf(projectors["qwen25vl"], tmp_path / "bad.gguf", drop_keys=("clip.vision.n_wa_pattern",))
    with pytest.raises(ModelLoadError, match="n_wa_pattern"):
        VisionEncoder.load(str(bad))
    assert VisionEncoder.load(str(projectors["qwen2vl"])).hp.n_wa_pattern == 0


def test_canvas_is_mtmds() -> None:
    """mtmd's nx, ny (merge units of 16 px) for sizes that round up and down, grow to the
    8-token minimum and shrink to the 4096-token maximum."""
    fx = np.load(FIXTURES / "qwen25vl.npz")
    for w, h, nx, ny in fx["grid"].tolist():
        cw, ch = smart_size(w, h, 16, 8 * 256, 4096 * 256)
        assert (cw // 16, ch // 16) == (nx, ny), (w, h)


def test_image_token_limits_are_mtmds(projectors: dict[str, Path]) -> None:
    """--image-min-tokens 64 --image-max-tokens 100 (mtmd_context_params' image_min/max_tokens):
    mtmd's canvas for every size, and the encoder's grid and token count follow."""
    from llamacli.core.multimodal.media import Media
    from scripts.mmproj_fixtures import GRID_TOKENS

    fx = np.load(FIXTURES / "qwen25vl.npz")
    lo, hi = (t * 256 for t in GRID_TOKENS)
    for w, h, nx, ny in fx["grid_custom"].tolist():
        cw, ch = smart_size(w, h, 16, lo, hi)
        assert (cw // 16, ch // 16) == (nx, ny), (w, h)
    enc = VisionEncoder.load(str(projectors["qwen25vl"]), image_tokens=GRID_TOKENS)
    img = fx["image1"]  # 100 x 37: 14 x 5 units with the limits (6 x 2 without)
    assert enc.grid(Media.of(img)) == (14, 5)
    assert enc.encode(img).shape == (70, 256)


def test_smart_size_rounds_halves_away_from_zero() -> None:
    assert smart_size(24, 40, 16, 0, 0) == (32, 48)  # 1.5 -> 2, 2.5 -> 3 (std::round, not to even)
    assert smart_size(8, 8, 16, 0, 0) == (16, 16)  # at least one unit


def clip_windows(pw: int, ph: int, grid: int) -> tuple[list[int], np.ndarray]:
    """clip.cpp's window inputs for PROJECTOR_TYPE_QWEN25VL, line for line: inv_window_idx and
    the (P, P) mask (0 inside a query's window, lowest float outside)."""
    idx, inv = [0] * (ph * pw), [0] * (ph * pw)
    n = pw * ph * 4
    mask = np.full((n, n), np.finfo(np.float32).min, dtype=np.float32)
    dst = row = 0
    for y in range(0, ph, grid):
        for x in range(0, pw, grid):
            win_h, win_w = min(grid, ph - y), min(grid, pw - x)
            dst_0 = dst
            for dy in range(win_h):
                for dx in range(win_w):
                    src = (y + dy) * pw + (x + dx)
                    idx[src], inv[dst] = dst, src
                    dst += 1
            for _ in range(win_h * win_w * 4):
                mask[row, dst_0 * 4 : dst * 4] = 0.0
                row += 1
    return inv, mask


@pytest.mark.parametrize("pw,ph", [(9, 8), (7, 7), (2, 6), (15, 3)])
def test_windows_are_clip_cpps(pw: int, ph: int) -> None:
    inv, mask = clip_windows(pw, ph, 7)
    win = windows(pw, ph, 7)
    assert win.order.tolist() == inv
    blocks = np.full_like(mask, np.finfo(np.float32).min)
    for a, b in win.spans:
        blocks[a:b, a:b] = 0.0
    np.testing.assert_array_equal(blocks, mask)


def test_vision_rope_is_ggmls_independent_sections() -> None:
    """GGML_ROPE_TYPE_VISION, head 16 (sections 4 x 4, n_dims 8): pairs 0..3 turn by the row,
    4..7 by the column, each section's theta restarting at its position."""
    f32 = np.float32
    rows, cols = patch_positions(3, windows(3, 2, 7).order)
    cos, sin = vision_rope(rows, cols, 16)
    ts = f32(np.power(f32(10000.0), f32(-2.0) / f32(8)))
    for r in range(rows.shape[0]):
        th_t, th_h = f32(rows[r]), f32(cols[r])
        for i in range(8):
            if i == 4:
                th_h = f32(cols[r])
            th = th_t if i < 4 else th_h
            assert cos[r, i] == f32(np.cos(np.float64(th))) and sin[r, i] == f32(np.sin(np.float64(th)))
            th_t, th_h = f32(th_t * ts), f32(th_h * ts)
    assert rows[:4].tolist() == [0, 0, 1, 1] and cols[:4].tolist() == [0, 1, 0, 1]  # a unit's (dy, dx)


def test_mrope_positions_are_mtmds() -> None:
    """Text, a 3 x 2-unit image at cell 4, text, an audio span (one position per token), a
    2 x 5-unit image, text: mtmd's decoder positions and n_past after each chunk."""
    e = np.zeros((1, 1), dtype=np.float32)
    spans = (MediaSpan(4, np.repeat(e, 6, 0), "a", False, (3, 2)), MediaSpan(12, np.repeat(e, 3, 0), "b", False),
             MediaSpan(17, np.repeat(e, 10, 0), "c", False, (2, 5)))
    got = mrope_positions(np.arange(30), spans)
    want, n_past, cell = [], 0, 0
    for kind, n, grid in [("t", 4, None), ("i", 6, (3, 2)), ("t", 2, None), ("t", 3, None), ("t", 2, None),
                          ("i", 10, (2, 5)), ("t", 3, None)]:
        for i in range(n):
            if kind == "i":
                want.append([n_past, n_past + i // grid[0], n_past + i % grid[0], 0])
            else:
                want.append([n_past + i] * 4)
        n_past += max(grid) if kind == "i" else n
        cell += n
    np.testing.assert_array_equal(got, np.array(want))


def test_image_prompt_logits_match_llama_cpp(projectors: dict[str, Path], tmp_path: Path) -> None:
    """The tiny qwen2vl model with the synthetic projector: mtmd's chunks (the image's n_pos is
    max(nx, ny)) and the last token's logits from mtmd_helper_eval_chunks, within the text
    model's F32 noise (test_parity_tiny: 0.01). Measured 0.0017 (the image's embeddings are
    libmtmd's bit for bit); with every token at its cell position instead of M-RoPE's, 1.9."""
    from llamacli.core.model.load import load_model
    from llamacli.core.multimodal.prompt import Media, MediaChunk, TextChunk, eval_chunks, tokenize_prompt
    from llamacli.core.text.tokenizer import load_tokenizer
    from scripts.mmproj_fixtures import QWEN_PROMPT
    from tests.tiny_models import write_tiny_model

    fx = np.load(FIXTURES / "qwen25vl.npz")
    model, g, _ = load_model(write_tiny_model("qwen2vl", "F32", tmp_path / "t.gguf"), numerics="ggml")
    tok = load_tokenizer(g.metadata)
    enc = VisionEncoder.load(str(projectors["qwen25vl"]), n_embd_text=model.args.n_embd)
    chunks = tokenize_prompt(QWEN_PROMPT, [Media.of(fx["image1"])], enc, lambda t: tok.tokenize(t, False, True))
    kinds = [[1, c.n_tokens, max(c.grid or (0,))] if isinstance(c, MediaChunk) else [0, c.n_tokens, c.n_tokens]
             for c in chunks]
    assert kinds == fx["e2e_chunks"].tolist()
    assert sum((c.tokens for c in chunks if isinstance(c, TextChunk)), []) == fx["e2e_tokens"].tolist()
    ids, ref = fx["e2e_top_ids"].astype(np.int64), fx["e2e_top_logits"]
    logits = eval_chunks(model, model.new_cache(1, 128), chunks, n_batch=512)
    assert int(logits.argmax()) == int(ids[0])
    assert np.abs(logits[ids] - ref).max() < 0.01
    model.mrope = False  # the positions matter: cell positions everywhere are far off
    plain = eval_chunks(model, model.new_cache(1, 128), chunks, n_batch=512)
    assert np.abs(plain[ids] - ref).max() > 0.5


def test_image_prompt_through_the_engine(projectors: dict[str, Path], tmp_path: Path) -> None:
    """The engine feeds each row's M-RoPE positions, prompt and generation alike: its first token
    is llama.cpp's, its greedy steps are those of a forward by hand whose rope positions run
    n_tokens - max(nx, ny) = 6 behind the cells after the image, and an image split across
    batches (causal: it may be) gives the same tokens."""
    from llamacli.core.model.load import load_model
    from llamacli.core.model.state.batch import Batch
    from llamacli.core.multimodal.prompt import Media, prompt_with_media
    from llamacli.core.runtime.engine import Engine, EngineConfig
    from llamacli.core.runtime.tasks import Task, TaskParams
    from llamacli.core.sampling import SamplingParams
    from llamacli.core.text.tokenizer import load_tokenizer
    from scripts.mmproj_fixtures import QWEN_PROMPT
    from tests.tiny_models import write_tiny_model

    fx = np.load(FIXTURES / "qwen25vl.npz")
    model, g, _ = load_model(write_tiny_model("qwen2vl", "F32", tmp_path / "t.gguf"), numerics="ggml")
    tok = load_tokenizer(g.metadata)
    enc = VisionEncoder.load(str(projectors["qwen25vl"]), n_embd_text=model.args.n_embd)
    tokens, spans = prompt_with_media(QWEN_PROMPT, [Media.of(fx["image1"])], enc, tok)
    assert spans[0].grid == (6, 2)
    params = TaskParams(n_predict=8, sampling=SamplingParams(temperature=0.0))
    runs = []
    for n_batch in (64, 16):
        with Engine(model, tok, EngineConfig(n_ctx=128, n_batch=n_batch)) as eng:
            res = eng.run(Task(tokens, params, media=spans))
        assert res.error is None
        runs.append(res.tokens)
    assert runs[0] == runs[1] and runs[0][0] == int(fx["e2e_top_ids"][0])
    cache = model.new_cache(1, 128)
    n = len(tokens)
    embd = np.zeros((n, model.args.n_embd), dtype=np.float32)
    embd[spans[0].start : spans[0].end] = spans[0].embd
    b = Batch(tokens, np.zeros(n), np.arange(n), embd=embd, rope_pos=mrope_positions(np.arange(n), spans))
    want = [int(model.forward(b, cache)[-1].argmax())]
    for i in range(7):  # rope positions at the cells instead: the 6th token differs
        cell = n + i
        step = Batch([want[-1]], [0], [cell], rope_pos=[[cell - 6] * 4])
        want.append(int(model.forward(step, cache)[-1].argmax()))
    assert runs[0] == want


def test_llama_complete_with_an_image(projectors: dict[str, Path], tmp_path: Path) -> None:
    """`llama complete -m QWEN2VL -mm QWEN25VL --image`: llama.cpp's next token, the image's 12
    positions as -1 between `<|vision_start|>` and `<|vision_end|>`."""
    import json

    from PIL import Image

    from scripts.mmproj_fixtures import QWEN_PROMPT
    from tests.test_cli import llama
    from tests.tiny_models import write_tiny_model

    fx = np.load(FIXTURES / "qwen25vl.npz")
    Image.fromarray(fx["image1"]).save(tmp_path / "img.png")
    (tmp_path / "prompt.txt").write_text(QWEN_PROMPT)
    model = write_tiny_model("qwen2vl", "F32", tmp_path / "t.gguf")
    r = llama("complete", "-m", str(model), "-mm", str(projectors["qwen25vl"]), "--image", str(tmp_path / "img.png"),
              "-f", str(tmp_path / "prompt.txt"), "-n", "1", "--temp", "0", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tokens"] == [int(fx["e2e_top_ids"][0])]
    assert out["prompt_tokens"].count(-1) == 12
    assert [t for t in out["prompt_tokens"] if t >= 0] == fx["e2e_tokens"].tolist()
    # the image's token budget from the command line (llama-server's flags)
    r = llama("complete", "-m", str(model), "-mm", str(projectors["qwen25vl"]), "--image", str(tmp_path / "img.png"),
              "-p", "<__media__>", "-n", "1", "--temp", "0", "--json", "--image-min-tokens", "64", "--image-max-tokens", "100")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["prompt_tokens"].count(-1) == 70
    r = llama("complete", "-m", str(model), "-mm", str(projectors["qwen25vl"]), "-p", "x", "--image-min-tokens", "0")
    assert r.returncode == 1 and "--image-min-tokens" in r.stderr
