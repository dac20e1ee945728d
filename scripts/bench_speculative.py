"""Speculative decoding (--spec-type ngram-simple) against plain decoding, single stream, on
the demo model (or -m MODEL), in-process:

1. repetitive: a ~420-token code listing, then "the same file after renaming a function" and
   its first 12 lines, so that the continuation mostly copies the listing (the demo model is
   a base model: it continues text rather than following an instruction);
2. non-repetitive: prose whose continuation has nothing to copy (n-gram drafts rarely fire,
   so this measures the drafting overhead).

Both variants run interleaved (off, on, off, on, ...) in the same process so that a loaded
machine slows them alike; the ratio of decode tokens/s (timings' predicted_per_second) is
reported per repetition and as the median, with the load average.

Last, the cost of one ngram-simple lookup on the final history (what every decode step pays
when no draft is found), which a loaded machine's noise hides in the ratio.

    python scripts/bench_speculative.py [-m MODEL] [--reps 3] [--tokens 192] [--tasks repetitive,non-repetitive]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamacli.core.runtime.engine import Engine, EngineConfig  # noqa: E402
from llamacli.core.sampling import SamplingParams  # noqa: E402
from llamacli.core.speculative import SpecConfig  # noqa: E402
from llamacli.core.speculative.ngram import ngram_simple_draft  # noqa: E402
from llamacli.core.runtime.tasks import Final, Task, TaskParams  # noqa: E402
from llamacli.loading import open_model  # noqa: E402

CODE = '''import json
import os
from dataclasses import dataclass, field


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 4
    timeout: float = 30.0
    allowed_origins: list[str] = field(default_factory=list)
    log_level: str = "info"


def parse_config(path: str) -> ServerConfig:
    """Read a JSON configuration file and return a ServerConfig."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no configuration file at {path}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    config = ServerConfig()
    for key, value in data.items():
        if not hasattr(config, key):
            raise KeyError(f"unknown configuration key: {key}")
        setattr(config, key, value)
    if config.port < 1 or config.port > 65535:
        raise ValueError(f"port out of range: {config.port}")
    if config.workers < 1:
        raise ValueError("at least one worker is needed")
    return config


def merge_configs(base: ServerConfig, override: dict) -> ServerConfig:
    """Return a copy of base with the keys of override replaced."""
    merged = ServerConfig(**base.__dict__)
    for key, value in override.items():
        setattr(merged, key, value)
    return merged


def describe(config: ServerConfig) -> str:
    origins = ", ".join(config.allowed_origins) or "none"
    return (
        f"listening on {config.host}:{config.port} with {config.workers} workers, "
        f"timeout {config.timeout} s, origins: {origins}, log level {config.log_level}"
    )
'''

REPETITIVE = (
    "```python\n" + CODE + "```\n\nThe same file after renaming `parse_config` to `load_config`:\n\n```python\n"
    + "".join(CODE.splitlines(keepends=True)[:12])
)

PROSE = (
    "The lighthouse keeper had not spoken to another person in eleven weeks when the boat "
    "appeared on the horizon. She watched it from the gallery, one hand shading her eyes, "
    "trying to decide whether the grey smudge was moving toward the island or away from it. "
    "The supply ship was not due for another month, and nobody else came this far north "
    "in autumn. When she could finally make out the red hull and the figure standing at the "
    "bow, she went down the spiral stairs"
)


def run_once(engine: Engine, prompt: list[int], n_tokens: int) -> Final:
    params = TaskParams(n_predict=n_tokens, cache_prompt=True, sampling=SamplingParams(temperature=0.0))
    return engine.run(Task(prompt, params))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--threads", type=int, default=-1)
    ap.add_argument("--tasks", default="repetitive,non-repetitive")
    args = ap.parse_args()
    rt = open_model(args.model, threads=args.threads)
    spec = SpecConfig(types=("ngram-simple",))
    engines = {
        "off": Engine(rt.model, rt.tokenizer, EngineConfig(n_ctx=2048)).start(),
        "ngram-simple": Engine(rt.model, rt.tokenizer, EngineConfig(n_ctx=2048, speculative=spec)).start(),
    }
    print(f"model: {rt.path}; load average before: {os.getloadavg()[0]:.2f}; {args.reps} repetitions, "
          f"{args.tokens} tokens, greedy", flush=True)
    tasks = {"repetitive": REPETITIVE, "non-repetitive": PROSE}
    history: list[int] = []
    for name in args.tasks.split(","):
        text = tasks[name]
        prompt = rt.tokenizer.tokenize(text, add_special=True, parse_special=True)
        for e in engines.values():  # prompt evaluated once (cached), kernels warm
            run_once(e, prompt, 2)
        ratios: list[float] = []
        for rep in range(args.reps):
            tps: dict[str, float] = {}
            finals: dict[str, Final] = {}
            for variant, e in engines.items():
                f = run_once(e, prompt, args.tokens)
                finals[variant] = f
                tps[variant] = f.timings.to_dict()["predicted_per_second"]
            same = finals["off"].tokens == finals["ngram-simple"].tokens
            history = finals["off"].prompt_tokens + finals["off"].tokens
            t = finals["ngram-simple"].timings
            ratios.append(tps["ngram-simple"] / tps["off"])
            print(f"{name} ({len(prompt)} prompt tokens) rep {rep + 1}: off {tps['off']:.1f} tok/s, "
                  f"ngram-simple {tps['ngram-simple']:.1f} tok/s, ratio {ratios[-1]:.2f}x, "
                  f"drafted {t.draft_n}, accepted {t.draft_n_accepted}, same tokens: {same}, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
        print(f"{name}: median ratio {statistics.median(ratios):.2f}x over {args.reps} repetitions", flush=True)
    for e in engines.values():
        e.stop()
    if history:
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            ngram_simple_draft(history[:-1], history[-1], spec.ngram_size_n, spec.ngram_size_m)
        us = (time.perf_counter() - t0) / n * 1e6
        print(f"one ngram-simple lookup over {len(history) - 1} tokens: {us:.0f} us", flush=True)


if __name__ == "__main__":
    main()
