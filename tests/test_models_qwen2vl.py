"""core/model/families/qwen2vl.py and ops.mrope_cos_sin: M-RoPE as ggml_rope_multi computes it,
what the family reads from the file (the text logits against llama.cpp's are in
test_parity_tiny.py; image tokens' positions end to end in test_multimodal_qwen25vl.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.families.qwen2vl import Qwen2VLModel
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from tests.tiny_models import QWEN2VL_SECTIONS, fixture_tokens, rewrite_gguf, write_tiny_model


def ggml_mrope_cache(pos4: np.ndarray, n_dims: int, base: float, sections: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """ggml-cpu's ggml_mrope_cache_init (MROPE, not vision), line for line in float32: four
    running thetas, the sector of pair i picks one."""
    f32 = np.float32
    theta_scale = f32(np.power(f32(base), f32(-2.0) / f32(n_dims)))
    sect = sum(sections)
    sec_w = sections[0] + sections[1]
    cos = np.zeros((pos4.shape[0], n_dims // 2), np.float32)
    sin = np.zeros_like(cos)
    for r, p in enumerate(pos4):
        th = [f32(v) for v in p]
        for i in range(n_dims // 2):
            sector = i % sect
            t = th[0]
            if sections[0] <= sector < sec_w:
                t = th[1]
            elif sec_w <= sector < sec_w + sections[2]:
                t = th[2]
            elif sector >= sec_w + sections[2]:
                t = th[3]
            cos[r, i], sin[r, i] = np.cos(np.float64(t)), np.sin(np.float64(t))
            th = [f32(v * theta_scale) for v in th]
    return cos, sin


@pytest.mark.parametrize("sections", [(8, 12, 12, 0), (16, 24, 24, 0), (3, 5, 4, 2), (5, 0, 0, 0)])
def test_mrope_angles_equal_ggml_cache(sections: tuple[int, int, int, int]) -> None:
    """Distinct t, h, w, e per token (an image's rows and columns); sections that do not fill
    the head repeat (i % sum)."""
    rng = np.random.default_rng(0)
    pos4 = rng.integers(0, 300, size=(7, 4))
    cfg = K.RopeConfig(64, 1000000.0, neox=True)
    cos, sin = K.mrope_cos_sin(pos4, cfg, sections)
    want_c, want_s = ggml_mrope_cache(pos4, 64, 1000000.0, sections)
    np.testing.assert_array_equal(cos, want_c)
    np.testing.assert_array_equal(sin, want_s)


def test_text_positions_are_plain_neox_rope() -> None:
    pos = np.arange(50, 90)
    cfg = K.RopeConfig(64, 1000000.0, neox=True)
    got = K.mrope_cos_sin(np.repeat(pos[:, None], 4, axis=1), cfg, QWEN2VL_SECTIONS)
    want = K.rope_cos_sin(pos, cfg)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_reads_the_sections_and_refuses_a_shift(tmp_path: Path) -> None:
    model, _, _ = load_model(write_tiny_model("qwen2vl", "F32", tmp_path / "m.gguf"))
    assert isinstance(model, Qwen2VLModel)
    assert model.args.extra["rope_sections"] == QWEN2VL_SECTIONS
    assert model.args.rope.neox and model.args.rope.n_dims == 64
    assert not model.can_shift
    with pytest.raises(InvalidRequest, match="M-RoPE"):
        model.shift_cache(model.new_cache(1, 16), 0, 1, 2)


def test_rope_positions_turn_q_and_k(tmp_path: Path) -> None:
    """Given rope_pos equal to the positions, the logits are those without it; moving the h and
    w components of the first tokens (as an image's rows and columns) changes the rest."""
    model, _, _ = load_model(write_tiny_model("qwen2vl", "F32", tmp_path / "m.gguf"), numerics="ggml")
    toks = fixture_tokens("qwen2vl", 12)
    plain = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 16))
    b = Batch.single(toks, all_logits=True)
    same = Batch(b.tokens, b.seq_ids, b.positions, b.output, rope_pos=np.repeat(b.positions[:, None], 4, axis=1))
    np.testing.assert_array_equal(model.forward(same, model.new_cache(1, 16)), plain)
    pos4 = np.repeat(b.positions[:, None], 4, axis=1)
    pos4[2:6, 1] = [2, 2, 3, 3]  # rows
    pos4[2:6, 2] = [2, 3, 2, 3]  # columns
    moved = model.forward(Batch(b.tokens, b.seq_ids, b.positions, b.output, rope_pos=pos4), model.new_cache(1, 16))
    np.testing.assert_array_equal(moved[:2], plain[:2])
    assert np.abs(moved[3:] - plain[3:]).max() > 1e-3


@pytest.mark.parametrize("value", [[0, 0, 0, 0], [1, 2, 3, 4, 5], [-1, 4, 4, 0]])
def test_bad_sections_are_refused_with_the_key(tmp_path: Path, value: list[int]) -> None:
    src = write_tiny_model("qwen2vl", "F32", tmp_path / "m.gguf")
    bad = rewrite_gguf(src, tmp_path / "bad.gguf",
                       set_values={"qwen2vl.rope.dimension_sections": (value, gguf.GGUFValueType.ARRAY)})
    with pytest.raises(ModelLoadError, match="dimension_sections"):
        load_model(bad)


def test_missing_sections_are_refused(tmp_path: Path) -> None:
    src = write_tiny_model("qwen2vl", "F32", tmp_path / "m.gguf")
    bad = rewrite_gguf(src, tmp_path / "bad.gguf", drop_keys=("qwen2vl.rope.dimension_sections",))
    with pytest.raises(ModelLoadError, match="dimension_sections"):
        load_model(bad)


def test_the_compiled_one_token_step_takes_the_rope_positions(tmp_path: Path) -> None:
    """Q8_0: a generation step after an image (rope position behind the cell) through the
    compiled decode step equals the step through the operations one by one."""
    model, _, _ = load_model(write_tiny_model("qwen2vl", "Q8_0", tmp_path / "m.gguf"), numerics="ggml")
    assert model._planned_step() is not None
    toks = fixture_tokens("qwen2vl", 12)
    out = []
    for fused in (True, False):
        model.fused_decode = fused
        cache = model.new_cache(1, 32)
        model.forward(Batch.single(toks), cache)
        out.append(model.forward(Batch([toks[0]], [0], [12], rope_pos=[[6, 6, 6, 6]]), cache))
    np.testing.assert_array_equal(out[0], out[1])
    cache = model.new_cache(1, 32)
    model.forward(Batch.single(toks), cache)
    assert np.abs(model.forward(Batch([toks[0]], [0], [12]), cache) - out[0]).max() > 1e-3
