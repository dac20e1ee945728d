"""file_glob_search and grep_search, as llama-server defines them (server-tools.cpp): the
entries under a directory (listing.py: git's view, or a walk) filtered by include/exclude
globs (glob.py); grep's matching runs in a child process with a time limit (grep_worker.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from llamacli.core.tools import grep_worker
from llamacli.core.tools.base import AgentTool, Call, Result
from llamacli.core.tools.glob import path_glob_match
from llamacli.core.tools.listing import KINDS, Entry, list_entries
from llamacli.core.tools.process import run_process
from llamacli.core.tools.sandbox import PathRefused

MAX_FILES = 100  # file_glob_search's most results
MAX_MATCHES = 100  # grep_search's
GREP_TIMEOUT_S = 15.0
GREP_MAX_OUTPUT = 256 * 1024


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _filtered(entries: list[Entry], include: str, exclude: str) -> list[Entry]:
    return [e for e in entries if path_glob_match(include, e.rel) and not (exclude and path_glob_match(exclude, e.rel))]


class FileGlobSearch(AgentTool):
    name = "file_glob_search"
    display_name = "File search"
    description = (
        "Recursively search for files matching a glob pattern under a directory. "
        "Automatically skips files ignored by .gitignore (when the directory is inside a git repo) "
        "and common junk directories (.git, node_modules, build, dist, etc.) otherwise. "
        "A pattern with no '/' (e.g. \"*.cpp\") matches the file's basename at any depth. "
        "A pattern containing '/' matches the full relative path; unless already anchored with "
        "\"**/\" or a leading '/', it is automatically prefixed with \"**/\". "
        "Use type=\"dir\" or \"all\" to also list directories; directory entries are suffixed with '/' in the output. "
        "Note: directory listings do not apply .gitignore filtering.")

    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {
            "path": _str("Base directory to search in"),
            "include": _str("Glob pattern for files to include (e.g. \"*.cpp\" or \"src/**/*.cpp\"). Default: **"),
            "exclude": _str("Glob pattern for files to exclude"),
            "type": _str("Entry type to return: \"file\" (default), \"dir\" or \"all\""),
            "max_depth": {"type": "integer", "description": "Maximum depth to descend into subdirectories "
                                                           "(default: 0 = unlimited; 1 = direct children only)"},
            "limit": {"type": "integer", "description": f"Maximum number of results to return, capped at {MAX_FILES} "
                                                       f"(default {MAX_FILES})"},
        }, "required": ["path"]}

    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        path = params["path"]
        include, exclude = params.get("include") or "**", params.get("exclude") or ""
        kind = params.get("type") or "file"
        max_depth = max(0, params.get("max_depth") or 0)
        limit = params.get("limit")
        limit = MAX_FILES if limit is None else limit
        if limit < 1:
            return {"error": f"invalid limit: {limit} (expected 1 or more)"}
        if kind not in KINDS:
            return {"error": f"invalid type: {kind} (expected \"file\", \"dir\" or \"all\")"}
        try:
            base = call.resolve(path)
        except PathRefused as e:
            return {"error": str(e)}
        if not base.is_dir():
            return {"error": f"path does not exist or is not a directory: {path}"}
        listing = list_entries(base, max_depth, kind)
        matches = _filtered(listing.entries, include, exclude)
        shown = matches[: min(limit, MAX_FILES)]
        text = "".join(e.rel + ("/" if e.is_dir else "") + "\n" for e in shown)
        text += f"\n---\nTotal matches: {len(matches)}\n"
        if len(matches) > len(shown):
            text += (f"[{len(shown)} results limit reached ({len(matches)} total matches). "
                     "Refine the glob pattern to narrow the search.]\n")
        if listing.truncated:
            text += "[results truncated: time budget or unreadable directory]\n"
        return {"plain_text_response": text,
                "entries": [{"path": e.rel, "type": "dir" if e.is_dir else "file"} for e in shown],
                "base": str(base)}


class GrepSearch(AgentTool):
    name = "grep_search"
    display_name = "Grep search"
    description = (
        "Search for a pattern in files under a path. Returns matching lines with file paths "
        "(and, unless searching a single file, paths relative to the given directory). "
        "Automatically skips files ignored by .gitignore (when the directory is inside a git repo) "
        "and common junk directories (.git, node_modules, build, dist, etc.) otherwise. "
        "include/exclude: a pattern with no '/' matches the basename at any depth; a pattern "
        "containing '/' matches the full relative path (auto-anchored with \"**/\" unless already anchored).")

    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {
            "path": _str("File or directory to search in"),
            "pattern": _str("Pattern to search for (regular expression unless literal is true)"),
            "include": _str("Glob pattern to filter files (default: **)"),
            "exclude": _str("Glob pattern to exclude files"),
            "return_line_numbers": {"type": "boolean", "description": "If true, include line numbers in results"},
            "literal": {"type": "boolean", "description": "Treat pattern as a literal string instead of a regular "
                                                          "expression (default: false)"},
            "ignore_case": {"type": "boolean", "description": "Case-insensitive search (default: false)"},
            "context_lines": {"type": "integer", "description": "Number of lines of context to show before and after "
                                                               "each match (default: 0)"},
        }, "required": ["path", "pattern"]}

    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        path, pattern = params["path"], params["pattern"]
        if params.get("literal"):
            pattern = re.escape(pattern)
        try:
            re.compile(pattern, re.IGNORECASE if params.get("ignore_case") else 0)
        except (re.error, OverflowError, ValueError) as e:  # OverflowError: a repeat count too large
            return {"error": f"invalid regex: {e}"}
        except RecursionError:
            return {"error": "invalid regex: nested too deeply"}
        try:
            full = call.resolve(path)
        except PathRefused as e:
            return {"error": str(e)}
        files = self._files(full, path, params)
        if files is None:
            return {"error": f"path does not exist: {path}"}
        request = {"pattern": pattern, "ignore_case": bool(params.get("ignore_case")),
                   "context_lines": max(0, params.get("context_lines") or 0),
                   "line_numbers": bool(params.get("return_line_numbers")), "max_results": MAX_MATCHES, "files": files}
        res = run_process([sys.executable, "-I", grep_worker.__file__], cwd=call.cwd, timeout=GREP_TIMEOUT_S,
                          max_output=GREP_MAX_OUTPUT, cancelled=call.cancelled, stdin=json.dumps(request).encode("utf-8"))
        if res.timed_out:
            return {"error": f"the search took more than {GREP_TIMEOUT_S:.0f} s and was stopped: "
                             "narrow the path, or simplify the pattern"}
        if res.cancelled:
            return {"error": "cancelled"}
        if res.exit_code != 0:
            return {"error": f"the search failed: {res.output.strip()[-300:]}"}
        return {"plain_text_response": res.output}

    @staticmethod
    def _files(full: Path, path: str, params: dict[str, Any]) -> list[tuple[str, str]] | None:
        """(absolute path, shown path) of each file to search; None when the path is neither."""
        if full.is_file():
            return [(str(full), path)]
        if not full.is_dir():
            return None
        entries = _filtered(list_entries(full).entries, params.get("include") or "**", params.get("exclude") or "")
        return [(str(full / e.rel), e.rel) for e in entries]
