"""One log line per finished generation task, as llama-server prints its timings: prompt and
generated tokens with their speeds, the slot, and why it stopped (text or JSON lines)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from llamacli.core.runtime.tasks import Final
from llamacli.http.sse import dumps


def task_line(task_id: int, final: Final, log_format: str = "text") -> str:
    t = final.timings.to_dict()
    if log_format == "json":
        return dumps({
            "ts": round(time.time(), 3), "level": "info", "msg": "task", "id_task": task_id, "id_slot": final.id_slot,
            "prompt_n": final.timings.prompt_n, "cache_n": final.tokens_cached, "prompt_per_second": round(t["prompt_per_second"], 2),
            "predicted_n": final.timings.predicted_n, "predicted_per_second": round(t["predicted_per_second"], 2),
            "stop": final.stop_type,
        })
    return (
        f"task {task_id} (slot {final.id_slot}): prompt {final.timings.prompt_n} tok"
        f" (+{final.tokens_cached} cached) {t['prompt_per_second']:.1f} tok/s, "
        f"generated {final.timings.predicted_n} tok {t['predicted_per_second']:.1f} tok/s, stop: {final.stop_type}"
    )


def log_task(task_id: int, final: Final, log_format: str = "text", out: TextIO | Any = None) -> None:
    print(task_line(task_id, final, log_format), file=out or sys.stderr, flush=True)
