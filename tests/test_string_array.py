"""core/string_array.py (a GGUF string array in one UTF-8 buffer) and the vocabulary's
TokenIndex (token text -> id over the encoders' hash table), as the GGUF reader and the
tokenizer use them: the same strings and ids as a list and a dict of them."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.model.weights.gguf_file import STRING_ARRAY_MIN, GGUFFile
from llamacli.core.string_array import StringArray, utf8_string_array
from llamacli.core.text.tokenizer.token_index import TokenIndex

WORDS = ["a", "", "ü€", "▁the", "<start_of_turn>", "\x00x", "😀"]


def _raw(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    start = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=start[1:])
    return np.frombuffer(bytearray(b"".join(parts)), np.uint8), start


def test_a_string_array_reads_as_the_list() -> None:
    a = StringArray.of(WORDS)
    assert len(a) == len(WORDS) and list(a) == WORDS and a == WORDS and a == StringArray.of(WORDS)
    assert [a[i] for i in range(-len(WORDS), len(WORDS))] == WORDS + WORDS
    assert a[1:4] == WORDS[1:4] and a[::-2] == WORDS[::-2]
    assert a.encoded(2) == "ü€".encode() and list(a.lengths()) == [len(w.encode()) for w in WORDS]
    assert a != WORDS[:-1] and a != [*WORDS[:-1], "x"] and "😀" in a and "b" not in a
    assert a.index("▁the") == 3
    with pytest.raises(IndexError):
        a[len(WORDS)]
    with pytest.raises(TypeError):
        hash(a)
    assert not a.data.flags.writeable  # numba types the encoders' tables as read-only bytes


@pytest.mark.parametrize("parts", [
    [b"ok", b"\xff", b"a\xc3"],  # invalid bytes: each string decoded with "replace"
    [b"\xe2\x82", b"\xac"],  # a character split between two strings: the buffer decodes, they do not
    [b"", b"\x80abc", b"\xc3\xbc"],
])
def test_invalid_utf8_decodes_as_a_string_read_alone(parts: list[bytes]) -> None:
    a = utf8_string_array(*_raw(parts))
    assert list(a) == [p.decode("utf-8", "replace") for p in parts]
    assert [a.encoded(i) for i in range(len(a))] == [s.encode() for s in a]


def test_valid_utf8_keeps_the_arrays() -> None:
    data, start = _raw([w.encode() for w in WORDS])
    a = utf8_string_array(data, start)
    assert a.start is start and np.shares_memory(a.data, data) and list(a) == WORDS


def test_token_index_is_the_dict_of_the_tokens() -> None:
    tokens = StringArray.of(WORDS)
    ids = TokenIndex(tokens)
    assert dict(ids) == {w: i for i, w in enumerate(WORDS)} and len(ids) == len(WORDS)
    assert ids["ü€"] == 2 and ids.get("") == 1 and ids.get("ü") is None and "<start_of_turn>" in ids
    odd: list[object] = [3, b"a", None]
    assert not any(k in ids for k in odd)  # not text: in no vocabulary
    with pytest.raises(KeyError):
        ids["missing"]
    assert ids.n_distinct() == len(WORDS)
    assert TokenIndex(StringArray.of(["a", "b", "a"])).n_distinct() == 2


def test_gguf_reads_long_string_arrays_as_one_buffer(tmp_path: Path) -> None:
    long = [f"tok{i}" for i in range(STRING_ARRAY_MIN)] + ["\u00e9", "😀"]
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_array("test.long", long)
    w.add_array("test.short", WORDS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    md = GGUFFile(tmp_path / "m.gguf").metadata
    assert isinstance(md["test.long"], StringArray) and md["test.long"] == long
    assert isinstance(md["test.short"], list) and md["test.short"] == WORDS
