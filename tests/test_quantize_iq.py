"""The IQ1/IQ2/IQ3 quantizers beyond the byte-identity runs of test_quantize_options.py: the
lattice tables against a brute-force reading of iq2xs_init_impl / iq3xs_init_impl, row
independence (the thread pool splits tensors by rows), and the types that cannot work without
importance weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from typer.testing import CliRunner

from llamacli.cli import app, register_all
from llamacli.core.quantize.iq import IQ_TYPES, NEEDS_WEIGHTS, encode_iq
from llamacli.core.quantize.iqgrid import _SPECS, iq_grid

from tests.test_quantize_inputs import write_imatrix, write_input


def _brute_neighbours(grid: np.ndarray, key: int, bits: int, nwant: int) -> list[int]:
    """C's way: all distances, qsort by (distance, index), cut after nwant distinct distances."""
    pos = np.array([2 * ((key >> (bits * k)) & ((1 << bits) - 1)) + 1 for k in range(grid.shape[1])])
    d2 = ((grid.astype(np.int64) - pos) ** 2).sum(axis=1)
    order = np.lexsort((np.arange(grid.shape[0]), d2))
    keep = set(sorted(set(d2.tolist()))[:nwant])
    return [int(j) for j in order if d2[j] in keep]


@pytest.mark.parametrize("name", sorted(_SPECS))
def test_neighbour_lists_are_c_order(name: str) -> None:
    g = iq_grid(name)
    _, _, bits, _, nwant = _SPECS[name]
    on = np.nonzero(g.kmap >= 0)[0]
    assert on.size == g.grid.shape[0]  # every grid point has its own key
    off = np.nonzero(g.kmap < 0)[0]
    rng = np.random.default_rng(3)
    for key in rng.choice(off, 40, replace=False):
        start = -int(g.kmap[key]) - 1
        n = int(g.neighbours[start])
        assert g.neighbours[start + 1 : start + 1 + n].tolist() == _brute_neighbours(g.grid, int(key), bits, nwant)


@pytest.mark.parametrize("qtype", sorted(IQ_TYPES), ids=lambda t: t.name)
def test_rows_are_independent(qtype: QT) -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((5, 512)) * 0.05).astype(np.float32)
    qw = rng.gamma(0.7, 1.0, 512).astype(np.float32)
    whole = encode_iq(x, qw, qtype)
    rows = np.concatenate([encode_iq(x[i : i + 1], qw, qtype) for i in range(5)])
    np.testing.assert_array_equal(whole, rows)


def test_weightless_iq_types_refuse_without_weights() -> None:
    x = np.ones((1, 256), np.float32)
    for qtype in NEEDS_WEIGHTS:
        with pytest.raises(ValueError, match="needs importance weights"):
            encode_iq(x, None, qtype)


def test_forced_iq2_xxs_on_a_tensor_the_imatrix_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the imatrix has no token_embd entry: llama.cpp aborts in ggml_quantize_chunk; we say why
    src = write_input("llama-f32", tmp_path / "in.gguf")
    write_imatrix(src, tmp_path / "imatrix.gguf")
    monkeypatch.chdir(tmp_path)
    register_all()
    r = CliRunner().invoke(app, ["quantize", "--imatrix", "imatrix.gguf", "--token-embedding-type", "iq2_xxs",
                                 "in.gguf", "out.gguf", "Q4_K_M", "2"], catch_exceptions=False)
    assert r.exit_code == 1
    assert "IQ2_XXS needs importance weights" in r.output and "token_embd.weight" in r.output
    assert not (tmp_path / "out.gguf").exists()


def test_dry_run_of_an_iq_type_without_imatrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as llama-quantize --dry-run: sizes are computed, and it says an imatrix will be needed
    write_input("llama-f32", tmp_path / "in.gguf")
    monkeypatch.chdir(tmp_path)
    register_all()
    r = CliRunner().invoke(app, ["quantize", "--dry-run", "in.gguf", "out.gguf", "IQ2_XXS", "2"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "importance matrix" in r.output and not (tmp_path / "out.gguf").exists()
