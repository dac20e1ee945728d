"""GGUF parsing and validation: every bad file gives a ModelLoadError naming the file."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUFFile, read_metadata
from tests.pages import HAVE_PAGEMAP, mapped_pages


def write_small(path: Path, arch: str = "llama") -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint32("test.u32", 7)
    w.add_float32("test.f32", 0.5)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo")
    w.add_array("test.strs", ["a", "", "ü€"])
    w.add_array("test.ints", [1, -2, 3])
    w.add_tensor("a.weight", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("b.weight", np.ones(32, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_reads_metadata_and_tensors(tmp_path: Path) -> None:
    p = write_small(tmp_path / "m.gguf")
    g = GGUFFile(p)
    assert g.version == 3
    assert g.architecture == "llama"
    md = g.metadata
    assert md["test.u32"] == 7 and md["test.f32"] == 0.5 and md["test.bool"] is True
    assert md["test.str"] == "héllo"
    assert md["test.strs"] == ["a", "", "ü€"]
    assert md["test.ints"].tolist() == [1, -2, 3]
    a = g.tensor("a.weight")
    assert a.shape == (2, 32) and a.qtype == gguf.GGMLQuantizationType.F32
    np.testing.assert_array_equal(np.frombuffer(g.raw("a.weight"), np.float32).reshape(2, 32), np.arange(64).reshape(2, 32))
    assert g.tensor("b.weight").qtype == gguf.GGMLQuantizationType.F16
    assert read_metadata(p)["test.u32"] == 7


def test_tensor_directory_agrees_with_gguf_reader(tmp_path: Path) -> None:
    p = write_small(tmp_path / "m.gguf")
    r = gguf.GGUFReader(str(p))
    ours = GGUFFile(p)
    for t in r.tensors:
        mine = ours.tensor(t.name)
        assert mine.offset == t.data_offset  # absolute in both
        assert mine.nbytes == t.n_bytes


def test_v2_file_is_read(tmp_path: Path) -> None:
    p = write_small(tmp_path / "m.gguf")
    raw = bytearray(p.read_bytes())
    raw[4:8] = struct.pack("<I", 2)  # v2 has the same layout as v3 for little-endian files
    p2 = tmp_path / "v2.gguf"
    p2.write_bytes(raw)
    assert GGUFFile(p2).version == 2


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b"NOPE" + b[4:], "not a GGUF file"),
        (lambda b: b[:4] + struct.pack("<I", 1) + b[8:], "v1"),
        (lambda b: b[:4] + struct.pack("<I", 99) + b[8:], "unsupported GGUF version 99"),
        (lambda b: b[:60], "truncated"),
        (lambda b: b[:-10], "truncated file: tensor"),
        (lambda b: b"", "not a GGUF file"),
    ],
)
def test_bad_files_name_the_file_and_problem(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    p = write_small(tmp_path / "m.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(mutate(p.read_bytes()))
    with pytest.raises(ModelLoadError) as ei:
        GGUFFile(bad)
    assert message in str(ei.value)
    assert str(bad) in str(ei.value)


def test_tensor_offset_out_of_range(tmp_path: Path) -> None:
    p = write_small(tmp_path / "m.gguf")
    raw = bytearray(p.read_bytes())
    g = GGUFFile(p)
    # find b.weight's directory entry: name, n_dims, dims, type, then its uint64 offset
    name = b"b.weight"
    at = raw.index(name) + len(name) + 4 + 8 + 4
    struct.pack_into("<Q", raw, at, 1 << 40)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(raw)
    with pytest.raises(ModelLoadError, match="b.weight"):
        GGUFFile(bad)
    assert g.tensor("b.weight").nbytes == 64


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such file"):
        GGUFFile(tmp_path / "nope.gguf")
    with pytest.raises(ModelLoadError, match="directory"):
        GGUFFile(tmp_path)


def test_missing_tensor(tmp_path: Path) -> None:
    g = GGUFFile(write_small(tmp_path / "m.gguf"))
    with pytest.raises(ModelLoadError, match="missing tensor 'c.weight'"):
        g.tensor("c.weight")


def test_header_pages_are_released_after_parsing(tmp_path: Path) -> None:
    """The header (a vocabulary: megabytes) is copied while parsed; its mapped pages go."""
    if not HAVE_PAGEMAP:
        pytest.skip("no /proc/self/pagemap")
    tokens = [f"token number {i:06d}" for i in range(20000)]  # ~0.5 MB of header
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_tensor("a.weight", np.ones((2, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    g = GGUFFile(tmp_path / "m.gguf")
    assert list(g.metadata["tokenizer.ggml.tokens"]) == tokens
    header = g.data_offset // 4096 * 4096
    assert header > 100 * 4096
    assert mapped_pages(g.data.ctypes.data, header) == 0
    assert bytes(g.data[:4]) == b"GGUF"  # still readable: the page comes back from the page cache


def test_reads_q2_0_tensors_which_gguf_py_does_not_know(tmp_path: Path) -> None:
    """ggml type 42 (Q2_0: 64 values in 18 bytes), newer than gguf-py: read with its block size."""
    from llamacli.core.model.kernels.ggml_types import Q2_0

    raw = np.random.default_rng(0).integers(0, 256, size=(3, 2 * 18), dtype=np.uint8)
    w = gguf.GGUFWriter(str(tmp_path / "q2.gguf"), "llama")
    w.add_tensor("q.weight", raw, raw_dtype=Q2_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t = GGUFFile(tmp_path / "q2.gguf").tensor("q.weight")
    assert (int(t.qtype), t.qtype.name, t.shape, t.nbytes) == (42, "Q2_0", (3, 128), raw.nbytes)
    np.testing.assert_array_equal(np.frombuffer(GGUFFile(tmp_path / "q2.gguf").raw("q.weight"), np.uint8), raw.reshape(-1))
