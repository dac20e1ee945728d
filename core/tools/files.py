"""read_file and write_file, as llama-server defines them (server-tools.cpp), on paths the
sandbox resolves. read_file reads line by line and stops at `end_line`, so a window into a huge
file costs what it shows (llama-server reads the whole file first)."""

from __future__ import annotations

import base64
import os
import stat
from typing import Any

from llamacli.core.tools.base import AgentTool, Call, Result
from llamacli.core.tools.sandbox import PathRefused

READ_MAX = 16 * 1024  # bytes of text one read returns
READ_MAX_BASE64 = 32 * 1024 * 1024  # bytes of a file read whole (x-resp-type: base64)
TRUNCATED = "[output truncated]"


def _prop(kind: str, description: str) -> dict[str, Any]:
    return {"type": kind, "description": description}


def write_bytes(call: Call, path: str, data: bytes) -> Result | None:
    """Create or replace the file at `path` (parent folders made as needed); None when done,
    else the error result. The last part is opened without following a link."""
    try:
        full = call.resolve(path, writing=True)
        full.parent.mkdir(parents=True, exist_ok=True)
        call.sandbox.check_links(full, path)  # the folders just made, and a link put there meanwhile
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except PathRefused as e:
        return {"error": str(e)}
    except OSError as e:
        return {"error": f"failed to write file: {path}: {e.strerror or e}"}
    return None


class ReadFile(AgentTool):
    name = "read_file"
    display_name = "Read file"
    description = ("Read the contents of a file. Optionally specify a 1-based line range. "
                   "If append_loc is true, each line is prefixed with its line number (e.g. \"1\u2192...\").")

    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {
            "path": _prop("string", "Path to the file"),
            "start_line": _prop("integer", "First line to read, 1-based (default: 1)"),
            "end_line": _prop("integer", "Last line to read, 1-based inclusive (default: end of file)"),
            "append_loc": _prop("boolean", "Prefix each line with its line number"),
        }, "required": ["path"]}

    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        path = params["path"]
        start = params.get("start_line") or 1
        end = params.get("end_line")
        end = -1 if end is None else end
        numbered = bool(params.get("append_loc"))
        try:
            full = call.resolve(path)
            st = os.stat(full, follow_symlinks=False)
        except PathRefused as e:
            return {"error": str(e)}
        except OSError:
            return {"error": f"cannot stat file: {path}"}
        if not stat.S_ISREG(st.st_mode):
            return {"error": f"cannot stat file: {path} (not a regular file)"}
        if call.resp_type == "base64":
            if st.st_size > READ_MAX_BASE64:
                return {"error": f"file too large ({st.st_size} bytes, max {READ_MAX_BASE64})"}
            data = full.read_bytes()
            return {"base64": base64.b64encode(data).decode("ascii"), "size_bytes": len(data)}
        if st.st_size > READ_MAX and end == -1:
            return {"error": f"file too large ({st.st_size} bytes, max {READ_MAX}). "
                             "Use start_line/end_line to read a portion."}
        try:
            return {"plain_text_response": _read_lines(full, start, end, numbered)}
        except OSError:
            return {"error": f"failed to open file: {path}"}


def _read_lines(full: os.PathLike[str], start: int, end: int, numbered: bool) -> str:
    """Lines start..end (1-based, inclusive; end -1: to the end), each ending in a newline,
    cut after READ_MAX bytes with a note."""
    out: list[str] = []
    size = 0
    with open(full, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if lineno < start:
                continue
            if end != -1 and lineno > end:
                break
            line = raw.rstrip(b"\n").decode("utf-8", "replace")
            text = f"{lineno}\u2192{line}\n" if numbered else line + "\n"
            n = len(text.encode("utf-8"))
            if size + n > READ_MAX:
                out.append(TRUNCATED)
                break
            out.append(text)
            size += n
    return "".join(out)


class WriteFile(AgentTool):
    name = "write_file"
    display_name = "Write file"
    description = ("Write content to a file, creating it (including parent directories) if it does not exist. "
                   "May use with edit_file for more complex edits.")
    writes = True

    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {
            "path": _prop("string", "Path of the file to write"),
            "content": _prop("string", "Content to write"),
        }, "required": ["path", "content"]}

    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        path, data = params["path"], params["content"].encode("utf-8")
        failed = write_bytes(call, path, data)
        return failed or {"result": "file written successfully", "path": path, "bytes": len(data)}
