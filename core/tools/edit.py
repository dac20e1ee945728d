"""edit_file: exact text replacements, several per call, as llama-server's (server-tools.cpp).

Each `old_text` is looked for in the file as it is. When one is not found exactly, the file and
every `old_text` are compared after a per-line normalisation (trailing blanks dropped; smart
quotes, dashes and odd spaces made ASCII), and the lines no edit touches are then written back
exactly as they were. Each `old_text` must occur once (counted on the normalised text, so a
copy differing only in blanks counts too), edits must not overlap, and an edit that changes
nothing is an error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llamacli.core.tools.base import AgentTool, Call, Result
from llamacli.core.tools.files import write_bytes
from llamacli.core.tools.sandbox import PathRefused

# characters the fuzzy match reads as their ASCII look-alikes (llama-server's list)
_FOLD = str.maketrans({
    **{c: "'" for c in "\u2018\u2019\u201a\u201b"},
    **{c: '"' for c in "\u201c\u201d\u201e\u201f"},
    **{c: "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"},
    **{c: " " for c in "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"},
})


def normalize(content: str) -> str:
    """Every line without trailing blanks and with look-alikes folded; the line count stays."""
    return "\n".join(line.rstrip(" \t\r").translate(_FOLD) for line in content.split("\n"))


@dataclass(frozen=True)
class Match:
    edit: int  # index in the request's edits
    at: int  # offset in the text matched against (the file, or its normalised form)
    length: int
    new_text: str


def _replace(text: str, matches: list[Match], offset: int = 0) -> str:
    """Apply non-overlapping matches (sorted by `at`; offsets relative to `offset`)."""
    out, pos = [], 0
    for m in matches:
        out += [text[pos : m.at - offset], m.new_text]
        pos = m.at - offset + m.length
    out.append(text[pos:])
    return "".join(out)


def _split_nl(text: str) -> list[str]:
    """Lines with their newlines kept (only '\n' ends a line)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    return out + [parts[-1]] if parts[-1] else out


def _keep_untouched(original: str, base: str, matches: list[Match]) -> str:
    """The edits applied to `base` (the normalised file), line groups they touch only; every
    other line comes from `original` unchanged."""
    orig_lines = _split_nl(original)
    spans, pos = [], 0
    for line in _split_nl(base):
        spans.append((pos, pos + len(line)))
        pos += len(line)
    groups: list[tuple[int, int, list[Match]]] = []
    for m in matches:
        first = next((i for i, (s, e) in enumerate(spans) if s <= m.at < e), len(spans) - 1)
        last = first
        while last < len(spans) - 1 and spans[last][1] < m.at + m.length:
            last += 1
        if groups and first < groups[-1][1]:
            g0, g1, ms = groups[-1]
            groups[-1] = (g0, max(g1, last + 1), ms + [m])
        else:
            groups.append((first, last + 1, [m]))
    out, done = [], 0
    for g0, g1, ms in groups:
        out += orig_lines[done:g0]
        lo, hi = spans[g0][0], spans[g1 - 1][1]
        out.append(_replace(base[lo:hi], ms, lo))
        done = g1
    out += orig_lines[done:]
    return "".join(out)


def apply_edits(original: str, edits: list[tuple[str, str]], path: str) -> str | Result:
    """The new content, or the error result."""
    norm_original = normalize(original)
    fuzzy = False
    for i, (old, _) in enumerate(edits):
        if old in original:
            continue
        if not normalize(old) or normalize(old) not in norm_original:
            return {"error": f"could not find edits[{i}].old_text in {path}, it must match the file's current content exactly"}
        fuzzy = True
    base = norm_original if fuzzy else original
    matches = []
    for i, (old, new) in enumerate(edits):
        needle = normalize(old) if fuzzy else old
        n = norm_original.count(normalize(old)) if normalize(old) else 0  # blanks only: found as they are
        if n > 1:
            return {"error": f"found {n} occurrences of edits[{i}].old_text in {path}, it must be unique"}
        matches.append(Match(i, base.find(needle), len(needle), new))
    matches.sort(key=lambda m: m.at)
    for a, b in zip(matches, matches[1:]):
        if a.at + a.length > b.at:
            return {"error": f"edits[{a.edit}] and edits[{b.edit}] overlap in {path}; "
                             "merge them into one edit or target disjoint regions"}
    new = _keep_untouched(original, base, matches) if fuzzy else _replace(base, matches)
    if new == original:
        return {"error": "no changes made: the replacement(s) produced identical content"}
    return new


class EditFile(AgentTool):
    name = "edit_file"
    display_name = "Edit file"
    description = ("Edit a file using exact text replacement. Each edits[].old_text must be unique in the file "
                   "and is matched against the original content, not incrementally. Merge nearby changes into "
                   "one edit instead of overlapping edits. Use write_file to replace the whole file.")
    writes = True

    def parameters(self) -> dict[str, Any]:
        item = {"type": "object", "properties": {
            "old_text": {"type": "string", "description": "Exact text to find; must be unique in the file and must not "
                                                          "overlap with other edits"},
            "new_text": {"type": "string", "description": "Text to replace old_text with"},
        }, "required": ["old_text", "new_text"]}
        return {"type": "object", "properties": {
            "path": {"type": "string", "description": "Path to the file to edit"},
            "edits": {"type": "array", "description": "One or more exact text replacements to apply", "items": item},
        }, "required": ["path", "edits"]}

    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        path, raw = params["path"], params["edits"]
        if not raw:
            return {"error": "\"edits\" must be a non-empty array"}
        edits = [(e["old_text"], e["new_text"]) for e in raw]
        for i, (old, _) in enumerate(edits):
            if not old:
                return {"error": f"edits[{i}].old_text must not be empty"}
        try:
            original = call.resolve(path, writing=True).read_bytes().decode("utf-8", "surrogateescape")
        except PathRefused as e:
            return {"error": str(e)}
        except OSError:
            return {"error": f"failed to open file: {path}"}
        new = apply_edits(original, edits, path)
        if isinstance(new, dict):
            return new
        failed = write_bytes(call, path, new.encode("utf-8", "surrogateescape"))
        return failed or {"result": "file edited successfully", "path": path, "edits_applied": len(edits)}
