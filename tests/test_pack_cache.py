"""The file-backed cache of packed matrices (core/model/weights/pack_cache.py): a model with
experts maps the packed form of its attention (and other whole-step) matrices from a cache file
instead of holding it in anonymous memory; the results are the unpacked matrices' bits."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.kernels.qmm import QuantMatrix
from llamacli.core.model.kernels.qmm.matrix import pack_matrix
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.weights.pack_cache import ENV
from tests.tiny_models import fixture_tokens, write_tiny_model


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "packs"
    monkeypatch.setenv(ENV, str(d))
    return d


@pytest.fixture
def moe_file(tmp_path: Path) -> Path:
    return write_tiny_model("qwen3moe", "Q4_K", tmp_path / "m.gguf")


def _attention(model) -> list[QuantMatrix]:  # type: ignore[no-untyped-def]
    mats = [lin.q for lw in model.layers for lin in (lw.wq, lw.wk, lw.wv, lw.wo)]
    assert all(m is not None for m in mats)
    return mats  # type: ignore[return-value]


def _logits(model) -> np.ndarray:  # type: ignore[no-untyped-def]
    return model.forward(Batch.single(fixture_tokens("qwen3moe"), all_logits=True), model.new_cache(1, 64))


def _mapped_ranges(path: str) -> list[tuple[int, int]]:
    """This process's mappings of the file at `path` (/proc/self/maps), as address ranges."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == path:
                a, b = (int(v, 16) for v in parts[0].split("-"))
                out.append((a, b))
    return out


def test_a_model_with_experts_maps_its_packed_matrices_from_the_cache(cache: Path, moe_file: Path) -> None:
    model, g, stats = load_model(moe_file)
    pc = stats.pack_cache
    assert pc.built and pc.reason == "" and Path(pc.path).parent == cache and Path(pc.path).is_file()
    assert stats.packed_bytes == 0  # nothing packed into anonymous memory
    ranges = _mapped_ranges(pc.path)
    mats = _attention(model)
    for m in mats:
        assert m.packed is not None and not m.packed.flags.writeable
        at = m.packed.__array_interface__["data"][0]
        assert any(a <= at and at + m.packed.nbytes <= b for a, b in ranges)  # file-backed pages
        fresh = QuantMatrix(m.data, m.qtype, m.n_in)
        assert pack_matrix(fresh)
        np.testing.assert_array_equal(m.packed, fresh.packed)  # the in-memory packing's bytes
    assert pc.nbytes == sum({id(m): m.packed.nbytes for m in mats if m.packed is not None}.values())
    for lw in model.layers:  # the experts stay as stored in the model file
        assert lw.moe is not None
        for ex in (lw.moe.gate, lw.moe.up, lw.moe.down):
            assert ex.whole is not None and ex.whole.packed is None and np.shares_memory(ex.whole.data, g.data)

    again, _, stats2 = load_model(moe_file)  # a second load maps the same file, packing nothing
    assert not stats2.pack_cache.built and stats2.pack_cache.path == pc.path
    assert sorted(os.listdir(cache)) == [Path(pc.path).name]
    np.testing.assert_array_equal(_logits(again), _logits(model))


def test_packed_from_the_cache_gives_the_unpacked_results(cache: Path, moe_file: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model, _, _ = load_model(moe_file)
    monkeypatch.setenv(ENV, "off")
    plain, _, stats = load_model(moe_file)
    assert "off" in stats.pack_cache.reason and stats.pack_cache.nbytes == 0
    assert all(m.packed is None for m in _attention(plain))
    assert all(m.packed is not None for m in _attention(model))
    np.testing.assert_array_equal(_logits(model), _logits(plain))


def test_a_changed_model_file_gets_its_own_cache_file(cache: Path, moe_file: Path) -> None:
    _, _, first = load_model(moe_file)
    st = moe_file.stat()
    os.utime(moe_file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # as a rewrite would
    _, _, second = load_model(moe_file)
    assert second.pack_cache.built and second.pack_cache.path != first.pack_cache.path


def test_a_damaged_cache_file_is_rebuilt(cache: Path, moe_file: Path) -> None:
    model, _, first = load_model(moe_file)
    want = _logits(model)
    path = Path(first.pack_cache.path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    again, _, second = load_model(moe_file)
    assert second.pack_cache.built and second.pack_cache.path == str(path)
    np.testing.assert_array_equal(_logits(again), want)
    path.write_bytes(b"not a cache file")
    _, _, third = load_model(moe_file)
    assert third.pack_cache.built and third.pack_cache.nbytes == first.pack_cache.nbytes


def test_a_cache_that_cannot_be_written_leaves_the_matrices_as_stored(tmp_path: Path, moe_file: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(ENV, str(blocker / "packs"))  # a directory inside a regular file
    model, _, stats = load_model(moe_file)
    assert "not written" in stats.pack_cache.reason and stats.pack_cache.nbytes == 0
    assert all(m.packed is None for m in _attention(model))
    assert np.isfinite(_logits(model)).all()


def test_a_dense_model_packs_in_memory_and_writes_no_cache(cache: Path, tmp_path: Path) -> None:
    _, _, stats = load_model(write_tiny_model("qwen3", "Q4_K", tmp_path / "d.gguf"))
    assert stats.packed_bytes > 0 and stats.pack_cache.nbytes == 0 and not cache.exists()
