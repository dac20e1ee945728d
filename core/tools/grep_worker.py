"""grep_search's matching, run as its own process (`python -I grep_worker.py`, the request as
JSON on stdin, the report on stdout) so that a pattern that backtracks for minutes (`(a+)+b`)
is ended by the time limit instead of holding the server: Python's `re` keeps the GIL while
it matches. It imports nothing of llamacli.

Report lines as llama-server's: `path:line`, `path:N:line` with numbers, `path-N-line` for
context lines, `--` after each match with context; then the total, and a note when the limit
of matches was reached.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any


def report(req: dict[str, Any]) -> str:
    pattern = re.compile(req["pattern"], re.IGNORECASE if req["ignore_case"] else 0)
    ctx, limit = int(req["context_lines"]), int(req["max_results"])
    numbered = bool(req["line_numbers"]) or ctx > 0
    out: list[str] = []
    total = 0
    reached = False
    for full, shown in req["files"]:
        if reached:
            break
        try:
            with open(full, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for i, line in enumerate(lines):
            if total >= limit:
                reached = True
                break
            if not pattern.search(line):
                continue
            for j in range(max(0, i - ctx), min(len(lines) - 1, i + ctx) + 1):
                mark = ":" if j == i else "-"
                out.append(f"{shown}{mark}{f'{j + 1}{mark}' if numbered else ''}{lines[j]}\n")
            if ctx > 0:
                out.append("--\n")
            total += 1
    out.append(f"\n---\nTotal matches: {total}\n")
    if reached:
        out.append(f"[{limit} matches limit reached. Narrow the path/pattern/include to see more.]\n")
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(report(json.loads(sys.stdin.buffer.read().decode("utf-8"))))
