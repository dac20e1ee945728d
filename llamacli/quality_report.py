"""What `llama perplexity` and `llama imatrix` print: llama-perplexity's and llama-imatrix's
lines, character for character (their printf formats), and the `--json` objects.

C's printf writes a NaN made by arithmetic (0/0, sqrt of a negative) as "-nan" on x86;
`cf` does the same so that the lines read as llama.cpp's.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from llamacli.core.quality.choices import TaskScore, wilson
from llamacli.core.quality.chunks import ChunkPlan
from llamacli.core.quality.imatrix_stats import LayerStats, TensorStats
from llamacli.core.quality.kld import Estimate, KldStatus, KldSummary
from llamacli.core.quality.perplexity import KldResult, PerplexityResult

F32 = np.float32


def cf(spec: str, v: float) -> str:
    """printf(spec, v) for one float conversion, NaN written as glibc writes x86's "-nan"."""
    if math.isnan(v):
        width = spec[1:].split(".")[0].rstrip("lf")
        return f"%{width}s" % "-nan"
    return spec % v


def _pm(spec: str, e: Estimate, scale: float = 1.0, sep: str = " ± ") -> str:
    return cf(spec, scale * e.value) + sep + cf(spec, scale * e.uncertainty)


# ---- perplexity ----------------------------------------------------------------------------

def eta_line(tool: str, seconds: float, n_passes: float) -> str:
    """`X seconds per pass - ETA [H hours ]M minutes` after the first pass."""
    total = int(seconds * n_passes)
    hours = f"{total // 3600} hours " if total >= 3600 else ""
    return f"{tool}: {seconds:.2f} seconds per pass - ETA {hours}{(total % 3600 if hours else total) / 60.0:.2f} minutes"


def plan_line(tool: str, what: str, plan: ChunkPlan) -> str:
    return f"{tool}: {what} over {plan.n_chunk} chunks, n_ctx={plan.n_ctx}, batch_size={plan.n_batch}, n_seq={plan.n_seq}"


def chunk_text(chunk: int, res: PerplexityResult, output_type: int = 0, stride: int = 0) -> str:
    """The text llama-perplexity prints after a chunk: `[i]ppl,` (output type 0), or one line
    with the chunk's start token, PPL, mean nll and its standard error (type 1; llama.cpp
    writes the start of the chunk's group, kept here; strided: the window's start and PPL)."""
    if output_type == 0:
        return f"[{chunk}]{res.ppl:.4f},"
    if stride:
        return f"{(chunk - 1) * stride:8d}  {res.ppl:.4f}\n"
    plan = res.plan
    start = (chunk - 1) // plan.n_seq * plan.n_seq * plan.n_ctx
    av = res.nll / res.count
    av2 = res.nll2 / res.count - av * av
    if av2 > 0:
        av2 = math.sqrt(av2 / (res.count - 1))
    return f"{start:8d}  {res.ppl:.4f}  {av:4f}  {av2:4f}\n"


def final_estimate(res: PerplexityResult) -> str:
    unc = res.uncertainty
    if unc is None:
        return "Unexpected negative standard deviation of log(prob)"
    return f"Final estimate: PPL = {res.ppl:.4f} +/- {unc:.5f}"


def perplexity_json(res: PerplexityResult, model: str, stride: int = 0) -> dict[str, Any]:
    p = res.plan
    return {
        "mode": "perplexity", "model": model, "n_tokens": res.n_tokens, "n_ctx": p.n_ctx, "n_batch": p.n_batch,
        "n_seq": p.n_seq, "n_chunk": p.n_chunk, "ppl_stride": stride, "n_scored": res.count,
        "chunks": res.chunk_ppl, "ppl": res.ppl, "ppl_uncertainty": res.uncertainty,
        "seconds": res.seconds, "tokens_per_second": p.n_chunk * p.n_ctx / res.seconds if res.seconds else None,
    }


# ---- KL divergence -------------------------------------------------------------------------

KLD_HEADER = ("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
              "Δp RMS            Same top p")


def kld_status_line(s: KldStatus) -> str:
    return (f"{s.chunk:4d}    {_pm('%9.4f', s.ppl)}    {_pm('%10.5f', s.log_ppl_ratio)}    {_pm('%10.5f', s.kld)}"
            f"    {_pm('%6.3f', s.p_diff_rms, 100.0)} %    {_pm('%6.3f', s.same_top, 100.0)} %")


def kld_summary_lines(s: KldSummary) -> list[str]:
    """The three blocks llama-perplexity prints after the chunks."""
    out = ["====== Perplexity statistics ======",
           f"Mean PPL(Q)                   : {_pm('%10.6f', s.ppl)}",
           f"Mean PPL(base)                : {_pm('%10.6f', s.ppl_base)}",
           f"Cor(ln(PPL(Q)), ln(PPL(base))): {cf('%6.2f', 100.0 * s.cor)}%",
           f"Mean ln(PPL(Q)/PPL(base))     : {_pm('%10.6f', s.log_ppl_ratio)}",
           f"Mean PPL(Q)/PPL(base)         : {_pm('%10.6f', s.ppl_ratio)}",
           f"Mean PPL(Q)-PPL(base)         : {_pm('%10.6f', s.ppl_diff)}",
           "",
           "====== KL divergence statistics ======",
           f"Mean    KLD: {_pm('%10.6f', s.kld)}"]
    out += [f"{_label(name, 'KLD')}{cf('%10.6f', v)}" for name, v in s.kld_levels]
    out += ["", "====== Token probability statistics ======",
            f"Mean    Δp: {cf('%6.3f', 100.0 * s.p_diff.value)} ± {cf('%5.3f', 100.0 * s.p_diff.uncertainty)} %"]
    out += [f"{_label(name, 'Δp')}{cf('%6.3f', 100.0 * v)}%" for name, v in s.p_diff_levels]
    out += [f"RMS Δp    : {cf('%6.3f', 100.0 * s.p_diff_rms.value)} ± {cf('%5.3f', 100.0 * s.p_diff_rms.uncertainty)} %",
            f"Same top p: {cf('%6.3f', 100.0 * s.same_top.value)} ± {cf('%5.3f', 100.0 * s.same_top.uncertainty)} %"]
    return out


def _label(name: str, what: str) -> str:
    """`Maximum KLD: `, `99.9%   KLD: `, `Median  KLD: `, ` 5.0%   KLD: ` (llama.cpp's columns)."""
    if name.endswith("%"):
        return f"{name}   {what}: "
    return f"{name:<8}{what}: " if name == "Median" else f"{name} {what}: "


def kld_json(status: list[KldStatus], summary: KldSummary | None, model: str, base: str, res: KldResult) -> dict[str, Any]:
    p = res.plan
    return {
        "mode": "kl-divergence", "model": model, "base": base, "n_ctx": p.n_ctx, "n_batch": p.n_batch,
        "n_seq": p.n_seq, "n_chunk": p.n_chunk, "chunks": [asdict(s) for s in status],
        "summary": None if summary is None else asdict(summary),
        "seconds": res.seconds, "tokens_per_second": p.n_chunk * p.n_ctx / res.seconds if res.seconds else None,
    }


# ---- imatrix --show-statistics -------------------------------------------------------------

_STATS_HEAD = "\t".join((" Layer", "       Tensor", "          Σ(Act²)", "  Min", "            Max", "           μ",
                         "   σ", " % Active", "N", "   Entropy", "E (norm)", "ZD", "  CosSim"))


def _pct32(fraction: float) -> float:
    """100.0f * x in float32, as llama-imatrix prints its fractions."""
    return float(F32(100) * F32(fraction))


def imatrix_stats_lines(path: str, tensors: list[TensorStats], layers: list[LayerStats]) -> list[str]:
    out = ["", f"Computing statistics for {path} ({len(tensors)} tensors)", "", _STATS_HEAD, "=" * 169]
    for t in tensors:
        out.append(f"{t.layer:>5}\t{t.name:<20}\t{t.total:10.2f}\t{t.minimum:8.4f}\t{t.maximum:11.4f}\t{t.mean:6.2f}\t"
                   f"{t.stddev:6.2f}\t{_pct32(t.active):8.2f}%\t{t.elements:6d}\t{t.entropy:10.4f}\t"
                   f"{t.entropy_norm:6.2f}%\t{_pct32(t.zd):10.2f}%\t{cf('%8.4f', t.cossim)}")
    out += ["", f"Computing weighted average statistics per layer ({len(layers)} layers)", "",
            "  Layer\t     μΣ(Act²)\t      μZD\tμCosSim", "=" * 48]
    out += [f"{ly.layer:5d}\t{ly.bias:14.2f}\t{_pct32(ly.zd):10.4f}%\t{cf('%6.4f', ly.cossim)}" for ly in layers]
    return out + [""]


# ---- HellaSwag, Winogrande, multiple choice ------------------------------------------------

BENCH_HEADERS = {"hellaswag": "\ntask\tacc_norm\t95% confidence interval\n", "winogrande": "",
                 "multiple-choice": "\ntask\tacc_norm\n"}


def task_line(kind: str, s: TaskScore) -> str:
    """The line llama-perplexity prints after each task."""
    if kind == "hellaswag":
        lo, hi = wilson(s.correct, s.done)
        return f"{s.index}\t{100.0 * s.accuracy:3.8f}%\t[{100.0 * lo:3.4f}%, {100.0 * hi:3.4f}%]\n"
    if kind == "winogrande":
        return (f"{s.index}\t{100.0 * s.correct / s.done:.4f}\t{s.scores[0]:10.6f}  {s.scores[1]:10.6f}  "
                f"{s.chosen}  {s.answer}\n")
    return f"{s.done}\t{100.0 * s.correct / s.done:.8f}\n"


def _f32_proportion(k: int, n: int, done: int) -> tuple[F32, F32]:
    """p = k/n and sqrt(p(1-p)/(done-1)) in float32, as llama.cpp's float arithmetic has them."""
    p = F32(F32(k) / F32(n))
    with np.errstate(all="ignore"):
        return p, F32(np.sqrt(F32(p * F32(F32(1) - p)) / F32(done - 1)))


def bench_final(kind: str, last: TaskScore | None, n_answers: int) -> str:
    """What llama-perplexity prints after the tasks: HellaSwag nothing, Winogrande its score
    from 100 tasks on, multiple choice always its result and the random chance (its early
    return for fewer than 100 tasks compares the count it has just set to the count asked for)."""
    if last is None:
        return "\n"
    if kind == "hellaswag":
        return "\n"
    p, sigma = _f32_proportion(last.correct, last.done, last.done)
    if kind == "winogrande":
        if last.done < 100:
            return "\n"
        return f"\nFinal Winogrande score({last.done} tasks): {float(F32(100) * p):.4f} +/- {float(F32(100) * sigma):.4f}\n"
    rp, rsigma = _f32_proportion(last.done, n_answers, last.done)
    return (f"\nFinal result: {float(F32(100) * p):.4f} +/- {float(F32(100) * sigma):.4f}\n"
            f"Random chance: {float(F32(100) * rp):.4f} +/- {float(F32(100) * rsigma):.4f}\n\n")


def bench_json(kind: str, scores: list[TaskScore], model: str, n_answers: int) -> dict[str, Any]:
    last = scores[-1] if scores else None
    out: dict[str, Any] = {"mode": kind, "model": model, "n_tasks": len(scores),
                           "accuracy": None if last is None else last.accuracy,
                           "tasks": [{"chosen": s.chosen, "answer": s.answer, "scores": list(s.scores)} for s in scores]}
    if last is not None:
        out["interval_95"] = list(wilson(last.correct, last.done))
        out["random_chance"] = last.done / n_answers if n_answers else None
    return out
