"""The idefics3 projector family (SmolVLM) against llama.cpp's libmtmd (fixtures from
scripts/mmproj_fixtures.py, tests.tiny_mmproj.SLICED_SPECS with the tiny llama "F32_IDEFICS3"):
the slices' and overview's pixel tensors, their embeddings, the prompt's chunks and tokens as
mtmd_tokenize lays them out, and the logits after mtmd_helper_eval_chunks."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.load import load_model
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.multimodal.encoder import VisionEncoder, idefics3_layout
from llamacli.core.multimodal.media import Media
from llamacli.core.multimodal.media_encoder import TokenPieces
from llamacli.core.multimodal.preprocess import normalize
from llamacli.core.multimodal.prompt import MediaChunk, TextChunk, eval_chunks, piece_lookup, prompt_with_media, tokenize_prompt
from llamacli.core.multimodal.resample import resize, weights
from llamacli.core.multimodal.slicing import longest_edge_size, slice_grid
from llamacli.core.text.tokenizer import Tokenizer, load_tokenizer
from scripts.mmproj_fixtures import SLICED_IMAGE_SIZES, SMOLVLM_PROMPT, sliced_image
from tests.tiny_mmproj import SLICED_SPECS, ProjectorSpec, test_image, write_projector
from tests.tiny_models import IDEFICS3_MODEL, write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "mmproj"
# Per slice, norm relative. F32 weights: only the order of float sums and the f16 GELU table
# differ from mtmd (measured max 2.7e-5 over 100 slices of 4 seeds). F16 weights: every linear
# rounds its input to f16, so a sum-order difference that crosses an f16 rounding step moves
# that value by 2^-11, and the pixel shuffle passes the ViT's output on unaveraged (gemma3's
# pooling averages 4 patches): measured median 8e-5, max 3.4e-4 over the same 100 slices.
REL_TOL = {"idefics3": 5e-4, "idefics3-old": 5e-4, "idefics3-f32": 5e-5}
# The F32 text model's bound against llama.cpp (tests/test_parity_tiny.py): measured max |Δlogit|
# over the top 256 0.0042 (F16 projectors), 0.0009 (F32)
E2E_TOL = 0.01


@pytest.fixture(scope="module")
def projectors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mmproj")
    return {name: write_projector(spec, d / f"{name}.gguf") for name, spec in SLICED_SPECS.items()}


@pytest.fixture(scope="module")
def text_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(*IDEFICS3_MODEL, tmp_path_factory.mktemp("llama") / "llama.gguf")


@pytest.fixture(scope="module")
def tokenizer(text_model: Path) -> Tokenizer:
    return load_tokenizer(GGUFFile(str(text_model)).metadata)


def _fixture(name: str, path: Path) -> dict[str, np.ndarray]:
    fx = dict(np.load(FIXTURES / f"{name}.npz"))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == str(fx["sha256"]), "projector writer changed: rerun the script"
    for i in range(len(SLICED_IMAGE_SIZES)):
        assert hashlib.sha256(sliced_image(i).tobytes()).hexdigest() == str(fx[f"image_sha256_{i}"])
    return fx


@pytest.mark.parametrize("name", sorted(SLICED_SPECS))
def test_slice_pixels_equal_libmtmd(projectors: dict[str, Path], name: str) -> None:
    """Every chunk's pixel tensor (slices row by row, then the overview) is mtmd's, bit for bit,
    for a square, a wide, a tall and a downscaled image."""
    fx = _fixture(name, projectors[name])
    enc = VisionEncoder.load(str(projectors[name]), n_embd_text=256)
    for i in range(len(SLICED_IMAGE_SIZES)):
        got = enc.pixel_chunks(sliced_image(i))
        assert [hashlib.sha256(p.tobytes()).hexdigest() for p in got] == fx[f"pixels_sha256_{i}"].tolist(), f"image {i}"
        if f"pixels{i}" in fx:  # the same, as arrays (a failure says where)
            ref = np.stack([normalize(u8.transpose(1, 2, 0), enc.hp.prep) for u8 in fx[f"pixels{i}"]])
            assert np.array_equal(np.stack(got), ref)


@pytest.mark.parametrize("name", sorted(SLICED_SPECS))
def test_slice_embeddings_match_libmtmd(projectors: dict[str, Path], name: str) -> None:
    fx = _fixture(name, projectors[name])
    enc = VisionEncoder.load(str(projectors[name]), n_embd_text=256)
    n = enc.n_image_tokens
    assert n == 9  # (48 / 8 / 2)^2
    for i in (1, 2):
        got, ref = enc.encode(sliced_image(i)), fx[f"embd{i}"]
        assert got.shape == ref.shape
        for a in range(0, ref.shape[0], n):
            rel = float(np.linalg.norm(got[a : a + n] - ref[a : a + n]) / np.linalg.norm(ref[a : a + n]))
            assert rel < REL_TOL[name], f"{name} image {i} chunk {a // n}: relative error {rel:.2e}"


def _chunks(enc: VisionEncoder, tok: Tokenizer, img: np.ndarray) -> list[TextChunk | MediaChunk]:
    return tokenize_prompt(SMOLVLM_PROMPT, [Media.of(img)], enc, lambda t: tok.tokenize(t, False, True),
                           bos=tok.vocab.bos, lookup=piece_lookup(tok))


@pytest.mark.parametrize("name", ["idefics3", "idefics3-old"])
def test_prompt_layout_equals_mtmd_tokenize(projectors: dict[str, Path], tokenizer: Tokenizer, name: str) -> None:
    """The chunks (text, slice, ..., overview) and every text token between them, as
    mtmd_tokenize gives them: `<fake_token_around_image><row_Y_col_X>` before each slice, "\\n"
    between rows, "\\n\\n" <fake_token_around_image> <global-img> before the overview."""
    fx = _fixture(name, projectors[name])
    enc = VisionEncoder.load(str(projectors[name]), n_embd_text=256)
    for i in range(len(SLICED_IMAGE_SIZES)):
        chunks = _chunks(enc, tokenizer, sliced_image(i))
        kinds = [[1 if isinstance(c, MediaChunk) else 0, c.n_tokens, c.n_tokens] for c in chunks]
        assert kinds == fx[f"chunks{i}"].tolist(), f"image {i}"
        assert sum((c.tokens for c in chunks if isinstance(c, TextChunk)), []) == fx[f"tokens{i}"].tolist()
        assert all(not c.non_causal for c in chunks if isinstance(c, MediaChunk))  # causal, as mtmd for idefics3


@pytest.mark.parametrize("name", sorted(SLICED_SPECS))
def test_image_prompt_logits_match_llama_cpp(projectors: dict[str, Path], text_model: Path, tokenizer: Tokenizer,
                                             name: str) -> None:
    """SMOLVLM_PROMPT with the 100 x 37 image (3 slices and the overview) through eval_chunks
    against mtmd_helper_eval_chunks on the same tiny llama: the last position's logits."""
    fx = _fixture(name, projectors[name])
    model, _, _ = load_model(str(text_model), numerics="ggml")
    enc = VisionEncoder.load(str(projectors[name]), n_embd_text=model.args.n_embd)
    chunks = _chunks(enc, tokenizer, sliced_image(1))
    assert [[1 if isinstance(c, MediaChunk) else 0, c.n_tokens, c.n_tokens] for c in chunks] == fx["e2e_chunks"].tolist()
    logits = eval_chunks(model, model.new_cache(1, 128), chunks, n_batch=512)
    ids, ref = fx["e2e_top_ids"].astype(np.int64), fx["e2e_top_logits"]
    assert int(logits.argmax()) == int(ids[0])
    assert np.abs(logits[ids] - ref).max() < E2E_TOL


def test_flat_prompt_has_every_slice(projectors: dict[str, Path], tokenizer: Tokenizer) -> None:
    """prompt_with_media (the server's and the CLI's path): one media span per chunk, in order,
    with the text tokens between them."""
    enc = VisionEncoder.load(str(projectors["idefics3"]), n_embd_text=256)
    img = sliced_image(1)
    toks, spans = prompt_with_media(SMOLVLM_PROMPT, [Media.of(img)], enc, tokenizer)
    assert len(spans) == 4 and all(sp.end - sp.start == 9 for sp in spans)
    assert [sp.start for sp in spans] == sorted(sp.start for sp in spans)
    assert len({sp.media_id for sp in spans}) == 4  # each chunk its own cache key
    global_img = piece_lookup(tokenizer)("<global-img>")
    assert toks[spans[-1].start - 1] == global_img  # the overview comes last


def test_layout_and_grid() -> None:
    assert longest_edge_size(100, 37, 112) == (112, 42)  # 112 / (100/37) = 41.44 -> 41 -> even 42
    assert longest_edge_size(23, 81, 112) == (32, 112)  # 112 * 23/81 = 31.8 -> 31 -> even 32
    assert slice_grid(100, 37, 48, 112) == (3, 1) and slice_grid(23, 81, 48, 112) == (1, 3)
    assert slice_grid(200, 150, 48, 0) == (4, 3)  # older files: sides rounded to whole tiles
    assert slice_grid(20, 20, 48, 0) == (1, 1)  # at least one tile
    with pytest.raises(InvalidRequest, match="image 1000x1 cannot be sliced: resize target 112x0 is out of range"):
        slice_grid(1000, 1, 48, 112)  # mtmd_tokenize fails on it too (resize_pillow throws)
    assert slice_grid(1000, 9, 48, 112) == (3, 1)  # 112 / 111.1 -> 1 -> even 2
    fake, nl = "<fake_token_around_image>", TokenPieces(("\n",))
    assert idefics3_layout(2, 2) == [
        f"{fake}<row_1_col_1>", 0, f"{fake}<row_1_col_2>", 1, nl, f"{fake}<row_2_col_1>", 2, f"{fake}<row_2_col_2>", 3,
        TokenPieces(("\n\n", fake, "<global-img>")), 4, TokenPieces((fake,)),
    ]


def test_lanczos_resize() -> None:
    bounds, kk = weights(200, 112, "lanczos")
    assert np.all(np.abs(kk.sum(axis=1) - (1 << 22)) <= 8)
    assert kk.min() < 0  # Lanczos has negative lobes
    flat = np.full((37, 53, 3), 90, dtype=np.uint8)
    assert np.all(resize(flat, 112, 42, "lanczos") == 90)


def test_scale_factor_is_required(tmp_path: Path) -> None:
    spec = ProjectorSpec("x", "idefics3", n_text=256, image_size=48, n_merge=1)
    with pytest.raises(ModelLoadError, match="idefics3 needs a scale_factor > 1 dividing the 6 patches per side, has 1"):
        VisionEncoder.load(str(write_projector(spec, tmp_path / "x.gguf")))
    spec = ProjectorSpec("y", "idefics3", n_text=256, image_size=48, n_merge=4)
    with pytest.raises(ModelLoadError, match="has 4"):
        VisionEncoder.load(str(write_projector(spec, tmp_path / "y.gguf")))


def test_vocabulary_without_the_image_tokens_is_one_clear_error(projectors: dict[str, Path], tmp_path: Path) -> None:
    """A text model whose vocabulary lacks SmolVLM's tokens (mtmd would put LLAMA_TOKEN_NULL in
    the prompt and fail to decode it)."""
    tok = load_tokenizer(GGUFFile(str(write_tiny_model("llama", "F32", tmp_path / "l.gguf"))).metadata)
    enc = VisionEncoder.load(str(projectors["idefics3"]), n_embd_text=256)
    with pytest.raises(InvalidRequest, match="the text model's vocabulary has no token '\\\\n\\\\n'"):
        prompt_with_media("<__media__>", [Media.of(test_image(30, 20))], enc, tok)


def test_complete_with_an_image_gives_llama_cpps_next_token(projectors: dict[str, Path], text_model: Path,
                                                            tmp_path: Path) -> None:
    """`llama complete -m TINY -mm IDEFICS3 --image F` as a user runs it (the engine's flat prompt,
    4 media spans): libmtmd's next token, its text tokens, 36 image positions."""
    from PIL import Image

    from tests.test_cli import llama

    fx = np.load(FIXTURES / "idefics3.npz")
    Image.fromarray(sliced_image(1)).save(tmp_path / "img.png")
    (tmp_path / "prompt.txt").write_text(SMOLVLM_PROMPT)
    r = llama("complete", "-m", str(text_model), "-mm", str(projectors["idefics3"]), "--image", str(tmp_path / "img.png"),
              "-f", str(tmp_path / "prompt.txt"), "-n", "1", "--temp", "0", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tokens"] == [int(fx["e2e_top_ids"][0])]
    assert out["prompt_tokens"].count(-1) == 36  # 3 slices and the overview, 9 positions each
    assert [t for t in out["prompt_tokens"] if t >= 0] == fx["e2e_tokens"].tolist()


def test_server_completion_with_slices_and_its_cache(projectors: dict[str, Path], text_model: Path) -> None:
    """`llama serve -m TINY -mm IDEFICS3`: /completion with multimodal_data gives libmtmd's next
    token; the same request again reuses the cached prompt through all four chunks."""
    import base64
    import io

    from PIL import Image

    from tests.http_server import LlamaServer

    fx = np.load(FIXTURES / "idefics3.npz")
    buf = io.BytesIO()
    Image.fromarray(sliced_image(1)).save(buf, format="PNG")
    body = {"prompt": {"prompt_string": SMOLVLM_PROMPT, "multimodal_data": [base64.b64encode(buf.getvalue()).decode()]},
            "n_predict": 1, "temperature": 0, "cache_prompt": True, "return_tokens": True}
    with LlamaServer("-m", str(text_model), "-mm", str(projectors["idefics3"]), "-c", "256", "--no-warmup") as s:
        status, out = s.post("/completion", body)
        assert status == 200, out
        assert out["tokens"] == [int(fx["e2e_top_ids"][0])]
        assert out["tokens_evaluated"] == len(fx["e2e_tokens"]) + 36
        status, again = s.post("/completion", body)
        assert status == 200 and again["tokens"] == out["tokens"]
        assert again["timings"]["cache_n"] >= len(fx["e2e_tokens"]) + 36 - 1  # all but the last prompt position
