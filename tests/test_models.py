"""Every architecture on tiny random models: loading, cache consistency, batching, errors."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.model.state.batch import Batch
from llamacli.core.errors import ModelLoadError, UnsupportedArchitecture, UnsupportedTensorType
from llamacli.core.model.load import load_model
from tests.tiny_models import ARCHES, GRANITE_MODELS, PHI3_MODELS, VARIANTS, fixture_tokens, rewrite_gguf, write_tiny_model

ALL = [(a, v) for a in ARCHES for v in VARIANTS] + list(PHI3_MODELS) + [m for m in GRANITE_MODELS if m[0] == "granite"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny")


def _path(model_dir: Path, arch: str, variant: str) -> Path:
    p = model_dir / f"{arch}-{variant}.gguf"
    if not p.exists():
        write_tiny_model(arch, variant, p)
    return p


@pytest.mark.parametrize("numerics", ["f32", "ggml"])
@pytest.mark.parametrize("arch,variant", ALL)
def test_incremental_decoding_equals_full_forward(model_dir: Path, arch: str, variant: str, numerics: str) -> None:
    model, _, _ = load_model(_path(model_dir, arch, variant), numerics=numerics)
    toks = fixture_tokens(arch, 24)
    full = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
    cache = model.new_cache(1, 64)
    parts = [model.forward(Batch.single(toks[:7], all_logits=True), cache)]
    parts.append(model.forward(Batch.single(toks[7:15], start_pos=7, all_logits=True), cache))
    for i in range(15, 24):  # then token by token, as generation does
        parts.append(model.forward(Batch.single(toks[i : i + 1], start_pos=i), cache))
    inc = np.concatenate(parts)
    assert inc.shape == full.shape == (24, model.args.n_vocab)
    # f32: only BLAS summation order differs. ggml: a value on a quantization boundary may
    # round the other way when the summation order changes, so allow that.
    tol = 1e-4 if numerics == "f32" else 5e-2
    atol = tol * max(1.0, float(np.abs(full).max()))
    np.testing.assert_allclose(inc, full, atol=atol)
    # the top token agrees except at near-ties (the other choice within the tolerance)
    picked = full[np.arange(24), inc.argmax(-1)]
    assert np.all(picked >= full.max(-1) - 2 * atol)


@pytest.mark.parametrize("arch", ARCHES)
def test_unified_batch_equals_sequences_alone(model_dir: Path, arch: str) -> None:
    """Three sequences of different lengths in one forward give each one's own logits."""
    model, _, _ = load_model(_path(model_dir, arch, "F32"), numerics="f32")
    toks = fixture_tokens(arch, 30)
    seqs = [toks[:12], toks[5:10], toks[3:4]]
    alone = []
    for s in seqs:
        alone.append(model.forward(Batch.single(s, all_logits=True), model.new_cache(1, 32)))
    tokens = np.concatenate([np.asarray(s) for s in seqs])
    seq_ids = np.concatenate([np.full(len(s), i) for i, s in enumerate(seqs)])
    pos = np.concatenate([np.arange(len(s)) for s in seqs])
    cache = model.new_cache(3, 32)
    together = model.forward(Batch(tokens, seq_ids, pos, np.ones(len(tokens), bool)), cache)
    np.testing.assert_allclose(together, np.concatenate(alone), atol=1e-4)
    # then one decode step for all three at once: one-token sequences share one attention matmul
    nxt = [int(a[-1].argmax()) for a in alone]
    step = model.forward(Batch(np.array(nxt), np.arange(3), np.array([len(s) for s in seqs])), cache)
    for i, s in enumerate(seqs):
        ref = model.forward(Batch.single(list(s) + [nxt[i]], all_logits=True), model.new_cache(1, 32))[-1]
        np.testing.assert_allclose(step[i], ref, atol=1e-4)


def test_outputs_only_requested_rows(model_dir: Path) -> None:
    model, _, _ = load_model(_path(model_dir, "llama", "F32"), numerics="f32")
    toks = fixture_tokens("llama", 10)
    full = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 16))
    last = model.forward(Batch.single(toks), model.new_cache(1, 16))
    assert last.shape == (1, model.args.n_vocab)
    np.testing.assert_allclose(last[0], full[-1], atol=1e-5)


def test_cache_truncation_reuses_prefix(model_dir: Path) -> None:
    model, _, _ = load_model(_path(model_dir, "gemma3", "F32"), numerics="f32")
    a = fixture_tokens("gemma3", 20)
    b = a[:12] + a[:5]  # shares a 12-token prefix with a
    cache = model.new_cache(1, 32)
    model.forward(Batch.single(a), cache)
    cache.truncate(0, 12)
    reused = model.forward(Batch.single(b[12:], start_pos=12), cache)
    fresh = model.forward(Batch.single(b), model.new_cache(1, 32))
    np.testing.assert_allclose(reused, fresh, atol=1e-4)


def test_sliding_window_changes_long_context(model_dir: Path) -> None:
    """gemma3's tiny window (8) is in force: a token 20 positions back stops mattering in
    sliding layers, so moving the window changes logits, and our mask equals llama.cpp's rule."""
    model, _, _ = load_model(_path(model_dir, "gemma3", "F32"), numerics="f32")
    assert model.args.sliding_window == 8
    assert model.args.swa_layers == (True, True, True, True, True, False)


def test_pooled_hidden_states(model_dir: Path) -> None:
    model, _, _ = load_model(_path(model_dir, "qwen3", "F32"), numerics="f32")
    toks = fixture_tokens("qwen3", 6)
    h = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 8), return_hidden=True)
    assert h.shape == (6, model.args.n_embd)
    from llamacli.core.model.kernels.pooling import pool

    seq_ids = np.zeros(6, dtype=np.int64)
    np.testing.assert_allclose(pool(h, seq_ids, "mean")[0], h.astype(np.float64).mean(0), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(pool(h, seq_ids, "last")[0], h[-1])
    np.testing.assert_array_equal(pool(h, seq_ids, "cls")[0], h[0])


# ---- errors -----------------------------------------------------------------------------------

def test_unknown_architecture(model_dir: Path, tmp_path: Path) -> None:
    bad = rewrite_gguf(_path(model_dir, "llama", "F32"), tmp_path / "x.gguf", arch="mamba9")
    with pytest.raises(UnsupportedArchitecture, match="unknown architecture 'mamba9'"):
        load_model(bad)


def test_missing_tensor_is_named(model_dir: Path, tmp_path: Path) -> None:
    bad = rewrite_gguf(_path(model_dir, "llama", "F32"), tmp_path / "x.gguf", drop="blk.1.ffn_up.weight")
    with pytest.raises(ModelLoadError, match="missing tensor 'blk.1.ffn_up.weight'"):
        load_model(bad)


def test_unsupported_tensor_type_is_named(model_dir: Path, tmp_path: Path) -> None:
    bad = rewrite_gguf(_path(model_dir, "llama", "F32"), tmp_path / "x.gguf",
                   retype=("blk.0.attn_q.weight", gguf.GGMLQuantizationType.Q8_1))
    with pytest.raises(UnsupportedTensorType) as ei:
        load_model(bad)
    assert "Q8_1" in str(ei.value) and "blk.0.attn_q.weight" in str(ei.value)


def test_shape_inconsistent_with_hyperparameters(model_dir: Path, tmp_path: Path) -> None:
    src = _path(model_dir, "llama", "F32")
    r = gguf.GGUFReader(str(src))
    n_head = int(r.fields["llama.attention.head_count"].contents())
    bad = tmp_path / "x.gguf"
    rewrite_gguf(src, bad)
    # claim one more head than the tensors have
    raw = bytearray(bad.read_bytes())
    key = b"llama.attention.head_count"
    at = raw.index(key + b"\x04\x00\x00\x00") + len(key) + 4
    raw[at : at + 4] = (n_head * 2).to_bytes(4, "little")
    bad.write_bytes(raw)
    with pytest.raises(ModelLoadError, match="has shape"):
        load_model(bad)


U32, F32_T, STR = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.STRING


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("key, value, message", [
    ("attention.head_count", (0, U32), "'{arch}.attention.head_count' is 0: it must be between 1 and"),
    ("context_length", (0.5, F32_T), "'{arch}.context_length' must be an integer, got float 0.5"),
    ("block_count", ("2", STR), "'{arch}.block_count' must be an integer, got str '2'"),
    ("attention.head_count_kv", (3, U32), "is not a multiple of {arch}.attention.head_count_kv (3)"),
    ("rope.freq_base", (-1.0, F32_T), "'{arch}.rope.freq_base' is -1.0: it must be a finite number above 0"),
    ("rope.dimension_count", (3, U32), "{arch}.rope.dimension_count is 3: it must be even"),
    ("attention.layer_norm_rms_epsilon", (float("nan"), F32_T), "layer_norm_rms_epsilon' is nan"),
])
def test_hyperparameters_are_validated_on_load(model_dir: Path, tmp_path: Path, arch: str, key: str,
                                               value: tuple[object, gguf.GGUFValueType], message: str) -> None:
    """A hyperparameter of the wrong type or out of range is a ModelLoadError naming the file
    and the key (head_count 0 was a ZeroDivisionError; a float context_length a context of 0)."""
    bad = rewrite_gguf(_path(model_dir, arch, "F32"), tmp_path / "x.gguf", set_values={f"{arch}.{key}": value})
    with pytest.raises(ModelLoadError) as ei:
        load_model(bad)
    assert str(ei.value).startswith(f"{bad}: ") and message.format(arch=arch) in str(ei.value)


@pytest.mark.parametrize("arch", ARCHES)
def test_batch_invariant_mode_is_bit_exact_across_batches(model_dir: Path, arch: str) -> None:
    """With batch_invariant, a sequence's hidden states do not depend on the rest of the batch
    at all (the vocabulary projection, which feeds nothing back, is not padded)."""
    model, _, _ = load_model(_path(model_dir, arch, "Q8_0"), numerics="ggml", batch_invariant=True)
    toks = fixture_tokens(arch, 30)
    seqs = [toks[:12], toks[5:10], toks[3:4]]
    alone = [model.forward(Batch.single(s), model.new_cache(1, 32), return_hidden=True)[0] for s in seqs]
    tokens = np.concatenate([np.asarray(s) for s in seqs])
    seq_ids = np.concatenate([np.full(len(s), i) for i, s in enumerate(seqs)])
    pos = np.concatenate([np.arange(len(s)) for s in seqs])
    cache = model.new_cache(3, 32)
    together = model.forward(Batch(tokens, seq_ids, pos), cache, return_hidden=True)
    for i in range(3):
        assert np.array_equal(together[i], alone[i])
    nxt = [int(model.logits(a[None])[0].argmax()) for a in alone]
    step = model.forward(Batch(np.array(nxt), np.arange(3), np.array([len(s) for s in seqs])), cache, return_hidden=True)
    for i, s in enumerate(seqs):
        c = model.new_cache(1, 32)
        model.forward(Batch.single(s), c)
        one = model.forward(Batch.single([nxt[i]], start_pos=len(s)), c, return_hidden=True)[0]
        assert np.array_equal(step[i], one)


def test_docs_list_every_supported_architecture() -> None:
    """docs/models.md's table and README's architectures line name exactly the registry's keys."""
    import re

    from llamacli.core.model.families import ARCHITECTURES

    root = Path(__file__).resolve().parent.parent
    table = (root / "docs" / "models.md").read_text().split("## Supported architectures", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([\w-]+)` \|", table, re.M)) == set(ARCHITECTURES)
    readme = (root / "README.md").read_text()
    line = readme[readme.index("Architectures:") : readme.index("Weight types:")]
    assert set(re.findall(r"`([\w-]+)`", line)) == set(ARCHITECTURES)


def test_docs_list_every_supported_weight_type() -> None:
    """docs/models.md's weight-type table and README's weight types line name exactly the types
    the matmuls have (and every one of them dequantizes: embeddings, `--numerics f32`)."""
    import re

    from llamacli.core.model.kernels.dequant import SUPPORTED_TYPES
    from llamacli.core.model.kernels.qmm.weight_types import FLOAT_FORMATS, QUANT_FORMATS

    names = {t.name for t in (*QUANT_FORMATS, *FLOAT_FORMATS)}
    assert names <= {t.name for t in SUPPORTED_TYPES}
    root = Path(__file__).resolve().parent.parent
    table = (root / "docs" / "models.md").read_text().split("## Supported weight types", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (`.*?) \|", table, re.M)
    assert {n for row in rows for n in re.findall(r"`(\w+)`", row)} == names
    readme = (root / "README.md").read_text()
    line = readme[readme.index("Weight types:") : readme.index("(docs/models.md)")]
    assert set(re.findall(r"`(\w+)`", line)) == names
