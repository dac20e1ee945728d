"""llama.cpp's own tokenizer test vectors: models/ggml-vocab-*.gguf with .inp/.out.

Read like llama.cpp tests/test-tokenizer-0.cpp: inputs separated by
"\\n__ggml_vocab_test__\\n", one line of ids per input, tokenized with add_special=False,
parse_special=False. The vocab files come from the llama-cpp-python sdist (downloaded once
into the test cache; the test skips when offline).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.tokenizer import load_tokenizer
from sdist_cache import SDIST_VERSION, cache_root, sdist_archive

# every vocab with vectors in the sdist; all of their tokenizer models are supported
VOCABS = [
    "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
    "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder",
]


def vocab_dir() -> Path:
    """models/ggml-vocab-* from the sdist, extracted once into the test cache."""
    target = cache_root() / f"llama.cpp-{SDIST_VERSION}-vocabs"
    if target.is_dir():
        return target
    archive = sdist_archive()
    prefix = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/models/ggml-vocab-"
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=cache_root()))
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.startswith(prefix):
                    member.name = member.name.rsplit("/", 1)[1]
                    kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                    tar.extract(member, staging, **kwargs)
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def read_vectors(inp: Path, out: Path) -> list[tuple[str, list[int]]]:
    raw = inp.read_bytes().decode("utf-8")
    sep = "\n__ggml_vocab_test__\n"
    inputs: list[str] = []
    pos = 0
    while pos < len(raw):
        nxt = raw.find(sep, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(sep)
    lines = out.read_text(encoding="utf-8").split("\n")
    if len(lines) == len(inputs) + 1 and lines[-1] == "":
        lines.pop()
    assert len(lines) == len(inputs), f"{inp.name}: {len(inputs)} inputs but {len(lines)} outputs"
    return [(text, [int(x) for x in line.split()]) for text, line in zip(inputs, lines)]


@pytest.mark.parametrize("name", VOCABS)
def test_llama_cpp_vectors(name: str) -> None:
    path = vocab_dir() / f"ggml-vocab-{name}.gguf"
    tok = load_tokenizer(read_metadata(path))
    cases = read_vectors(Path(f"{path}.inp"), Path(f"{path}.out"))
    assert len(cases) >= 40
    failures = []
    for text, expected in cases:
        got = tok.tokenize(text, add_special=False, parse_special=False)
        if got != expected:
            failures.append((text, expected, got))
    assert not failures, f"{len(failures)}/{len(cases)} differ, first: {failures[0]!r}"


def test_every_vector_file_is_covered() -> None:
    names = sorted(p.name[len("ggml-vocab-") : -len(".gguf.inp")] for p in vocab_dir().glob("*.gguf.inp"))
    assert names == sorted(VOCABS)


# --- a larger corpus against llama.cpp, recorded by tests/fixtures/tokenizer/make_fixtures.py

FIXTURES = Path(__file__).parent / "fixtures" / "tokenizer"
RECORDED = [
    "aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4",
    "gpt-2", "gpt-neox", "llama-bpe", "llama-spm", "mpt", "nomic-bert-moe", "phi-3", "qwen2", "qwen35", "refact",
    "starcoder",
]


@pytest.fixture(scope="module")
def recorded() -> dict:
    with gzip.open(FIXTURES / "vocabs.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def _corpus() -> list[bytes]:
    items = json.loads((FIXTURES / "corpus.json").read_text(encoding="utf-8"))
    return [bytes.fromhex(t["hex"]) if isinstance(t, dict) else t.encode("utf-8") for t in items]


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_corpus(name: str, recorded: dict) -> None:
    tok = load_tokenizer(read_metadata(vocab_dir() / f"ggml-vocab-{name}.gguf"))
    want = recorded[name]
    texts = _corpus()
    for flags, expected in want["tokenize"].items():
        add_special, parse_special = flags[0] == "1", flags[1] == "1"
        bad = [(t, w, g) for t, w in zip(texts, expected) if (g := tok.tokenize(t, add_special, parse_special)) != w]
        assert not bad, f"{flags}: {len(bad)} texts differ, first: {bad[0]!r}"
    v = tok.vocab
    got = {"bos": v.bos, "eos": v.eos, "eot": v.eot, "sep": v.sep, "pad": v.pad}
    assert {k: -1 if x is None else x for k, x in got.items()} == want["specials"]
    assert sorted(v.eog_ids) == want["eog"]
    assert hashlib.sha256(json.dumps([int(a) for a in v.attrs]).encode()).hexdigest() == want["attrs_digest"]
    for special, digest in zip((False, True), want["pieces_digest"]):
        h = hashlib.sha256()
        for i in range(tok.n_vocab):
            p = tok.token_to_piece(i, special)
            h.update(len(p).to_bytes(4, "little") + p)
        assert h.hexdigest() == digest, f"pieces (special={special}) differ"
