"""Running a child process for a tool: its output (stdout and stderr together) read as it comes,
passed on in pieces when asked (streaming), capped in size, with a time limit and a cancel event.

The child leads its own process group (a new session), so a timeout or a cancel ends the command
and whatever it started (`sleep 100 &` included): the whole group gets SIGKILL. Output past the
cap is still read (a child blocked on a full pipe would never exit) but dropped; the result then
ends with `[output truncated]`, as llama-server's does.
"""

from __future__ import annotations

import codecs
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

POLL_S = 0.05  # how often a quiet child's deadline and cancel event are looked at
AFTER_EXIT_S = 0.5  # output still read once the command exited (children holding the pipe)


@dataclass
class ProcessResult:
    output: str
    exit_code: int  # -1: it could not start, or was killed
    timed_out: bool = False
    cancelled: bool = False


def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    timeout: float,
    max_output: int,
    on_chunk: Callable[[str], None] | None = None,
    cancelled: threading.Event | None = None,
    stdin: bytes | None = None,
    merge_stderr: bool = True,
) -> ProcessResult:
    """Run argv in cwd; its output decoded as UTF-8 (invalid bytes replaced)."""
    try:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:
        return ProcessResult(f"failed to spawn process: {e.strerror or e}", -1)
    if stdin is not None:
        _feed(proc, stdin)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    kept: list[str] = []
    n_kept = 0
    truncated = timed_out = was_cancelled = False
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    eof = False
    while True:
        now = time.monotonic()
        if cancelled is not None and cancelled.is_set():
            was_cancelled = True
            break
        if now >= deadline:
            timed_out = True
            break
        if eof:  # the output is closed: wait for the exit status
            try:
                proc.wait(POLL_S)
                break
            except subprocess.TimeoutExpired:
                continue
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > AFTER_EXIT_S:
            break  # something the command left behind still holds the pipe
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if not ready:
            continue
        data = os.read(fd, 65536)
        if not data:
            eof = True
            continue
        if truncated:
            continue
        if n_kept + len(data) > max_output:
            data, truncated = data[: max_output - n_kept], True
        n_kept += len(data)
        text = decoder.decode(data)
        if text:
            kept.append(text)
            if on_chunk is not None:
                on_chunk(text)
    _kill_group(proc)
    proc.stdout.close()
    code = proc.wait()
    tail = decoder.decode(b"", final=True)
    if tail:
        kept.append(tail)
        if on_chunk is not None:
            on_chunk(tail)
    out = "".join(kept)
    if truncated:
        out += "\n[output truncated]"
    return ProcessResult(out, -1 if (timed_out or was_cancelled) and code < 0 else code, timed_out, was_cancelled)


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    """Write stdin from a thread (the child may answer before it has read everything)."""
    assert proc.stdin is not None
    pipe = proc.stdin

    def write() -> None:
        try:
            pipe.write(data)
        except OSError:
            pass  # the child closed its stdin; its exit status says the rest
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    threading.Thread(target=write, name="llama-tool-stdin", daemon=True).start()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (the command and everything it started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
