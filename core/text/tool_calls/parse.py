"""Model output -> content and tool calls, for each tool-call format.

`scan(fmt, text, final)` reads the whole output so far and reports only what can no longer
change: content up to (not including) anything that may still turn into a tool-call marker,
and per call its name once the name is complete and the text of its arguments so far. Reading
a longer text never contradicts a shorter one, which is what lets `ToolCallParser` stream
deltas that never need to be retracted. ``final=True`` reads the finished output.

Formats:
  hermes   `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes 2/3, Qwen 2.5/3)
  llama3   `{"name": ..., "parameters": {...}}` as the whole reply (Llama 3.1/3.2/3.3),
           optionally after `<|python_tag|>`
  mistral  `[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}]` (Mistral Nemo) or
           `[TOOL_CALLS]name[ARGS]{...}` (newer Mistral templates)
  glm45    `<tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n...</tool_call>`
           (GLM-4.5/4.6): the arguments object is written pair by pair; a value that is JSON
           other than a string (a number, true, an object, ...) is taken as that, any other
           text as a string (the template writes strings raw and the rest as JSON)
  deepseek_r1   `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```
                <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>` (DeepSeek-R1, V3-0324; llama.cpp's autoparser
                patch for these templates)
  deepseek_v31  `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...
                <｜tool▁calls▁end｜>` (DeepSeek-V3.1); one scanner reads both
  qwen3_coder `<tool_call>\n<function=name>\n<parameter=k>\nv\n</parameter>\n...</function>\n</tool_call>`
           (Qwen3-Coder, Qwen3.5): as glm45, the arguments object is written pair by pair, a value
           that is JSON other than a string taken as that, any other text as a string
  seed_oss `<seed:tool_call>\n<function=name>\n<parameter=k>v</parameter>\n</function>\n</seed:tool_call>`
           (Seed-OSS): qwen3_coder's calls in their own tags
  minimax_m2 `<minimax:tool_call>\n<invoke name="name">\n<parameter name="k">v</parameter>\n</invoke>\n...
           </minimax:tool_call>` (MiniMax-M2): several calls in one block, values as qwen3_coder's
  generic  llama.cpp's format for templates with no tool syntax: the reply is one JSON object,
           `{"tool_call": {"name", "arguments"}}`, `{"tool_calls": [...]}` or `{"response": ...}`
  content  no tool calls (no tools, or tool_choice none)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from llamacli.core.text.holdback import partial_stop_len
from llamacli.core.text.tool_calls.partial_json import Node, parse_partial, skip_ws

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
MISTRAL_MARK, MISTRAL_ARGS, MISTRAL_CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
PYTHON_TAG = "<|python_tag|>"
GLM_KEY, GLM_KEY_END, GLM_VALUE, GLM_VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"
DS_CALLS, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL, DS_SEP, DS_CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
DS_FENCE, DS_FENCE_END = "```json", "```"
QWEN_FN, QWEN_FN_END, QWEN_PARAM, QWEN_PARAM_END = "<function=", "</function>", "<parameter=", "</parameter>"
_CALL_KEYS = frozenset(("name", "arguments", "parameters", "id", "type"))


@dataclass
class RawCall:
    name: str | None  # None until the name is complete
    arguments: str = ""  # the arguments' JSON text so far (complete once `complete`)
    complete: bool = False
    id: str | None = None  # an id the model wrote itself


@dataclass
class Scan:
    content: str = ""
    calls: list[RawCall] = field(default_factory=list)


def _call_from_object(text: str, node: Node, final: bool, args_keys: tuple[str, ...]) -> RawCall | None:
    """The call an object spells, or None when it is not (or not yet known to be) one."""
    first = node.first_key()
    if first is None or first not in _CALL_KEYS:
        return None
    name_node = node.get("name")
    if name_node is None or name_node.kind != "string" or not name_node.complete:
        return None
    call = RawCall(str(name_node.value))
    args = None
    for k in args_keys:
        args = node.get(k)
        if args is not None:
            break
    if args is not None:
        if args.kind == "string":  # arguments given as a JSON string
            if args.complete:
                call.arguments = str(args.value)
        else:
            call.arguments = text[args.start : args.end]
    id_node = node.get("id")
    if id_node is not None and id_node.kind == "string" and id_node.complete:
        call.id = str(id_node.value)
    call.complete = node.complete
    if node.complete and args is None:
        call.arguments = "{}"
    if final and not call.arguments:
        call.arguments = "{}"
    return call


def _object_is_not_call(node: Node) -> bool:
    """An object that can no longer turn into a call: its first key says so, or it ended without a name."""
    first = node.first_key()
    if first is not None and first not in _CALL_KEYS:
        return True
    if node.complete:
        n = node.get("name")
        return n is None or n.kind != "string"
    return False


def _next_marker(text: str, pos: int, mark: str, final: bool, parts: list[str]) -> int:
    """Where the next `mark` from pos starts, the text before it appended to parts; -1 when
    there is none (the rest appended, less a tail that may still become the marker)."""
    i = text.find(mark, pos)
    seg = text[pos:] if i < 0 else text[pos:i]
    if i < 0 and not final:
        seg = seg[: len(seg) - partial_stop_len(seg, (mark,))]
    parts.append(seg)
    return i


# ---- formats ------------------------------------------------------------------------------
def scan_content(text: str, final: bool) -> Scan:
    return Scan(text)


def scan_hermes(text: str, final: bool) -> Scan:
    out = Scan()
    parts: list[str] = []
    pos = 0
    n = len(text)
    while True:
        i = _next_marker(text, pos, HERMES_OPEN, final, parts)
        if i < 0:
            break
        j = i + len(HERMES_OPEN)
        r = parse_partial(text, j, final)
        if r.node is None and not r.error and not final:
            break  # only whitespace after the tag so far
        if r.node is None or r.node.kind != "object" or _object_is_not_call(r.node):
            parts.append(HERMES_OPEN)  # not a call after all: the tag is text
            pos = j
            continue
        call = _call_from_object(text, r.node, final, ("arguments", "parameters"))
        if call is None:
            if final:  # cut off before its name: keep the text
                parts.append(text[i:])
            break
        out.calls.append(call)
        if not r.node.complete:
            break
        k = skip_ws(text, r.node.end)
        if text.startswith(HERMES_CLOSE, k):
            pos = k + len(HERMES_CLOSE)
        elif not final and HERMES_CLOSE.startswith(text[k:n]):
            break  # the closing tag is still coming
        else:
            pos = k
    out.content = "".join(parts)
    return out


def _scan_json_calls(text: str, pos: int, final: bool, out: Scan, args_keys: tuple[str, ...]) -> int | None:
    """Calls written as JSON objects (or one array of them) from pos, separated by whitespace,
    `;` or `,`. Returns where plain text resumes, or None when reading must wait."""
    n = len(text)
    while True:
        r = parse_partial(text, pos, final)
        if r.node is None:
            return None if (not final and not r.error) else pos
        nodes = r.node.items if r.node.kind == "array" else [r.node]
        for node in nodes:
            if not isinstance(node, Node) or node.kind != "object":
                return pos if not out.calls else r.end
            if _object_is_not_call(node):
                return pos if not out.calls else node.start
            call = _call_from_object(text, node, final, args_keys)
            if call is None:
                return None if not final else pos
            out.calls.append(call)
            if not node.complete:
                return None
        if not r.node.complete:
            return None
        k = skip_ws(text, r.end)
        if k < n and text[k] in ";,":
            k = skip_ws(text, k + 1)
        if k >= n:
            return None if not final else n
        if text[k] not in "{[":
            return k
        pos = k


def scan_llama3(text: str, final: bool) -> Scan:
    out = Scan()
    start = skip_ws(text, 0)
    if text.startswith(PYTHON_TAG, start):
        start = skip_ws(text, start + len(PYTHON_TAG))
    elif not final and PYTHON_TAG.startswith(text[start:]) and start < len(text):
        return out
    if start >= len(text):
        return out if not final else Scan(text)
    if text[start] != "{":
        return Scan(text)
    rest = _scan_json_calls(text, start, final, out, ("parameters", "arguments"))
    if not out.calls:
        if rest is None:
            return out  # still undecided: hold everything
        return Scan(text)  # not a call: it was all text
    if rest is not None:
        out.content = text[rest:]
    return out


def scan_mistral(text: str, final: bool) -> Scan:
    out = Scan()
    parts: list[str] = []
    pos = 0
    while True:
        i = _next_marker(text, pos, MISTRAL_MARK, final, parts)
        if i < 0:
            break
        j = skip_ws(text, i + len(MISTRAL_MARK))
        if j >= len(text):
            break
        if text[j] in "[{":
            rest = _scan_json_calls(text, j, final, out, ("arguments", "parameters"))
            if rest is None:
                break
            pos = rest
            continue
        # [TOOL_CALLS]name[ARGS]{...}
        a = text.find(MISTRAL_ARGS, j)
        head = text[j:a] if a >= 0 else ""
        name, _, call_id = head.partition(MISTRAL_CALL_ID)
        if a < 0 or not name.strip() or any(c in name for c in "{}[]\n"):
            if a < 0 and not final and not any(c in text[j:] for c in "{}\n"):
                break  # the name is still being written
            parts.append(MISTRAL_MARK)
            pos = i + len(MISTRAL_MARK)
            continue
        call = RawCall(name.strip(), id=call_id.strip() or None)
        r = parse_partial(text, a + len(MISTRAL_ARGS), final)
        out.calls.append(call)
        if r.node is None:
            if final:
                call.arguments = "{}"
                pos = len(text)
                continue
            break
        call.arguments = text[r.node.start : r.node.end]
        call.complete = r.node.complete
        if not r.node.complete:
            break
        pos = r.node.end
    out.content = "".join(parts)
    return out


def _not_json(name: str) -> None:
    raise ValueError(name)


def _glm_value(raw: str) -> str:
    """An <arg_value> as JSON text (module docstring)."""
    try:
        value = json.loads(raw, parse_constant=_not_json)  # NaN, Infinity: text
    except ValueError:
        value = raw
    return json.dumps(raw if isinstance(value, str) else value, ensure_ascii=False)


def _glm_args(text: str, k: int, final: bool, call: RawCall) -> int | None:
    """The <arg_key>/<arg_value> pairs from k into call.arguments, as a JSON object written so
    far; where plain text resumes after `</tool_call>`, or None when reading must wait."""
    pairs: list[str] = []
    while True:
        k = skip_ws(text, k)
        if text.startswith(HERMES_CLOSE, k):
            call.arguments, call.complete = "{" + ", ".join(pairs) + "}", True
            return k + len(HERMES_CLOSE)
        ke = text.find(GLM_KEY_END, k) if text.startswith(GLM_KEY, k) else -1
        vs = skip_ws(text, ke + len(GLM_KEY_END)) if ke >= 0 else -1
        ve = text.find(GLM_VALUE_END, vs) if vs >= 0 and text.startswith(GLM_VALUE, vs) else -1
        if ve < 0:  # a pair (or the end) still being written; or, final, what the call has
            call.arguments = "{" + ", ".join(pairs) + ("}" if final else "")
            return len(text) if final else None
        key = text[k + len(GLM_KEY) : ke].strip()
        pairs.append(json.dumps(key, ensure_ascii=False) + ": " + _glm_value(text[vs + len(GLM_VALUE) : ve]))
        k = ve + len(GLM_VALUE_END)


def scan_glm45(text: str, final: bool) -> Scan:
    out, parts, pos = Scan(), list[str](), 0
    while (i := _next_marker(text, pos, HERMES_OPEN, final, parts)) >= 0:
        j = i + len(HERMES_OPEN)
        ends = [e for e in (text.find("\n", j), text.find(GLM_KEY, j), text.find(HERMES_CLOSE, j)) if e >= 0]
        if not ends:
            if final:  # cut off in its name: the text stays
                parts.append(text[i:])
            break  # the name is still being written
        name = text[j : min(ends)].strip()
        if not name or any(c in name for c in '{}[]<>" '):
            parts.append(HERMES_OPEN)  # not a call after all: the tag is text
            pos = j
            continue
        call = RawCall(name)
        out.calls.append(call)
        rest = _glm_args(text, min(ends), final, call)
        if rest is None:
            break
        pos = rest
    out.content = "".join(parts)
    return out


def _bad_name(name: str) -> bool:
    return not name or any(c in name for c in '{}[]<>" \n')


def _ds_call(text: str, k: int, final: bool, out: Scan) -> int | None:
    """One DeepSeek call from k (after `<｜tool▁call▁begin｜>`) into out.calls; where reading
    resumes after `<｜tool▁call▁end｜>`, -1 when it is no call, None when reading must wait."""
    s = text.find(DS_SEP, k)
    if s < 0:
        return -1 if final or "\n" in text[k:] else None
    name, a = text[k:s].strip(), s + len(DS_SEP)
    fenced = name == "function"  # R1: the name on the line after the separator, JSON fenced
    if fenced:
        nl = text.find("\n", a)
        if nl < 0 and not final:
            return None
        name, a = text[a : len(text) if nl < 0 else nl].strip(), len(text) if nl < 0 else nl
        a = skip_ws(text, a)
        if text.startswith(DS_FENCE, a):
            a += len(DS_FENCE)
        elif not final and DS_FENCE.startswith(text[a:]):
            return None
    if _bad_name(name):
        return -1
    call = RawCall(name)
    out.calls.append(call)
    r = parse_partial(text, a, final)
    if r.node is None:
        if final:
            call.arguments, call.complete = "{}", True
            return len(text)
        return None
    call.arguments, call.complete = text[r.node.start : r.node.end], r.node.complete
    if not r.node.complete:
        return None
    e = skip_ws(text, r.node.end)
    if fenced and text.startswith(DS_FENCE_END, e):
        e = skip_ws(text, e + len(DS_FENCE_END))
    if text.startswith(DS_CALL_END, e):
        return e + len(DS_CALL_END)
    waiting = DS_CALL_END.startswith(text[e:]) or (fenced and DS_FENCE_END.startswith(text[e:]))
    return None if not final and waiting else e


def scan_deepseek(text: str, final: bool) -> Scan:
    out, parts, pos = Scan(), list[str](), 0
    while (i := _next_marker(text, pos, DS_CALLS, final, parts)) >= 0:
        k, n0 = i + len(DS_CALLS), len(out.calls)
        while True:
            k = skip_ws(text, k)
            if text.startswith(DS_CALL, k):
                n_calls = len(out.calls)
                rest = _ds_call(text, k + len(DS_CALL), final, out)
                if rest is None:
                    out.content = "".join(parts)
                    return out
                if rest < 0:  # no call after all: the markers are text
                    del out.calls[n_calls:]
                    parts.append(text[i:k + len(DS_CALL)])
                    pos = k + len(DS_CALL)
                    break
                k = rest
            elif text.startswith(DS_CALLS_END, k):
                pos = k + len(DS_CALLS_END)
                break
            elif not final and any(m.startswith(text[k:]) for m in (DS_CALL, DS_CALLS_END)):
                out.content = "".join(parts)
                return out  # a marker still being written
            else:  # the section ends without its marker (with no call in it: the marker is text)
                if len(out.calls) == n0:
                    parts.append(text[i:k])
                pos = k
                break
    out.content = "".join(parts)
    return out


@dataclass(frozen=True)
class XmlCallTags:
    """The tags of an XML-like call format: a block `open`..`close` around calls `fn` NAME
    `name_end` (pairs `param` KEY `key_end` VALUE `param_end`)* `fn_end`; `many`: several calls
    in one block (MiniMax-M2), else one per block; `trim`: a value loses one newline at each end
    (qwen3_coder's templates write it between two; Seed-OSS's and MiniMax-M2's write it bare)."""

    open: str
    close: str
    fn: str
    name_end: str
    fn_end: str
    param: str
    key_end: str
    param_end: str
    many: bool = False
    trim: bool = False


QWEN3_CODER_TAGS = XmlCallTags(HERMES_OPEN, HERMES_CLOSE, QWEN_FN, ">", QWEN_FN_END, QWEN_PARAM, ">", QWEN_PARAM_END,
                               trim=True)
SEED_OSS_TAGS = XmlCallTags("<seed:tool_call>", "</seed:tool_call>", QWEN_FN, ">", QWEN_FN_END, QWEN_PARAM, ">",
                            QWEN_PARAM_END)
MINIMAX_M2_TAGS = XmlCallTags("<minimax:tool_call>", "</minimax:tool_call>", '<invoke name="', '">', "</invoke>",
                              '<parameter name="', '">', QWEN_PARAM_END, many=True)
XML_TAGS = {"qwen3_coder": QWEN3_CODER_TAGS, "seed_oss": SEED_OSS_TAGS, "minimax_m2": MINIMAX_M2_TAGS}


def _xml_args(text: str, k: int, final: bool, call: RawCall, t: XmlCallTags) -> int | None:
    """The parameter pairs from k into call.arguments (a JSON object so far), up to `fn_end`;
    where reading resumes after it, or None while reading must wait (or, final, the call is
    unfinished)."""
    pairs: list[str] = []
    while True:
        k = skip_ws(text, k)
        if text.startswith(t.fn_end, k):
            call.arguments = "{" + ", ".join(pairs) + "}"
            return k + len(t.fn_end)
        ke = text.find(t.key_end, k) if text.startswith(t.param, k) else -1
        ve = text.find(t.param_end, ke) if ke >= 0 else -1
        if ve < 0:  # a pair (or the end) still being written; or, final, what the unfinished call has
            call.arguments = "{" + ", ".join(pairs) + ("}" if final else "")
            return None
        raw = text[ke + len(t.key_end) : ve]
        if t.trim:
            raw = raw[1:] if raw.startswith("\n") else raw
            raw = raw[:-1] if raw.endswith("\n") else raw
        pairs.append(json.dumps(text[k + len(t.param) : ke].strip(), ensure_ascii=False) + ": " + _glm_value(raw))
        k = ve + len(t.param_end)


def _xml_block(text: str, k: int, final: bool, out: Scan, t: XmlCallTags) -> int | None:
    """The calls of one block from k (after `open`) into out.calls; where plain text resumes,
    -1 when the block holds no call (its tag is text), None while reading must wait."""
    first = True
    while True:
        j = skip_ws(text, k)
        e = text.find(t.name_end, j) if text.startswith(t.fn, j) else -1
        if e < 0 and not final and t.fn.startswith(text[j : j + len(t.fn)]) and "\n" not in text[j:]:
            return None  # the function's name is still being written
        name = text[j + len(t.fn) : e].strip() if e >= 0 else ""
        if _bad_name(name):
            return -1 if first else j
        call = RawCall(name)
        out.calls.append(call)
        end = _xml_args(text, e + len(t.name_end), final, call, t)
        if end is None:
            return None
        n = skip_ws(text, end)
        waiting = t.close.startswith(text[n:]) or (t.many and t.fn.startswith(text[n:]))
        if not final and waiting and n + len(t.close) > len(text):
            return None  # the closing tag (or the next call) is still coming
        call.complete, first = True, False
        if t.many and text.startswith(t.fn, n):
            k = n
            continue
        return n + len(t.close) if text.startswith(t.close, n) else n


def scan_xml_calls(text: str, final: bool, t: XmlCallTags) -> Scan:
    """Calls in the XML-like format of tags t (qwen3_coder, seed_oss, minimax_m2)."""
    out, parts, pos = Scan(), list[str](), 0
    while (i := _next_marker(text, pos, t.open, final, parts)) >= 0:
        rest = _xml_block(text, i + len(t.open), final, out, t)
        if rest is None:
            break
        if rest < 0:  # not a call after all: the tag is text
            parts.append(t.open)
            pos = i + len(t.open)
            continue
        pos = rest
    out.content = "".join(parts)
    return out


def scan_generic(text: str, final: bool) -> Scan:
    out = Scan()
    start = skip_ws(text, 0)
    if start >= len(text):
        return out if not final else Scan(text)
    if text[start] != "{":
        return Scan(text)
    r = parse_partial(text, start, final)
    node = r.node
    assert node is not None
    first = node.first_key()
    if first is None:
        return out if not (final or r.error) else Scan(text)
    value = node.items[0][1]
    if first == "response":
        if value is None:
            return out
        if value.kind == "string":
            out.content = str(value.value or "")
        elif value.complete:
            out.content = text[value.start : value.end]
        return out
    if first in ("tool_call", "tool_calls"):
        if value is None:
            return out
        items = value.items if value.kind == "array" else [value]
        for item in items:
            if not isinstance(item, Node) or item.kind != "object":
                break
            call = _call_from_object(text, item, final, ("arguments", "parameters"))
            if call is None:
                break
            out.calls.append(call)
            if not item.complete:
                break
        return out
    return Scan(text)  # some other JSON object: plain content


SCANNERS: dict[str, Callable[[str, bool], Scan]] = {
    "content": scan_content,
    "hermes": scan_hermes,
    "llama3": scan_llama3,
    "mistral": scan_mistral,
    "mistral_args": scan_mistral,
    "glm45": scan_glm45,
    "deepseek_r1": scan_deepseek,
    "deepseek_v31": scan_deepseek,
    **{fmt: partial(scan_xml_calls, t=t) for fmt, t in XML_TAGS.items()},
    "generic": scan_generic,
}


def scan(fmt: str, text: str, final: bool = False) -> Scan:
    try:
        return SCANNERS[fmt](text, final)
    except KeyError:
        raise ValueError(f"unknown tool-call format {fmt!r} (one of: {', '.join(SCANNERS)})") from None
