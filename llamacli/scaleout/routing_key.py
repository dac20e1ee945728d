"""The routing text of a request: what the router matches against the text each replica was
sent before. A conversation's next turn must extend its previous turn's text, so the messages
are written in order, each with its role and a separator that text cannot contain
(`\\x1e role \\x1f content`): turn k's text is a prefix of turn k+1's whenever the client sends
the earlier messages unchanged, as chat clients do.

The fields read cover llama-server's API families: OpenAI chat (`messages`), completions and
/completion (`prompt`, also token arrays), /infill and /tokenize (`content`), Anthropic
(`system` + `messages`) and the Responses API (`instructions` + `input`). Anything else (or a
body that is not JSON) has no routing text and goes to the least-loaded replica.
"""

from __future__ import annotations

import json
from typing import Any

RS, US = "\x1e", "\x1f"  # ASCII record and unit separators: between messages, after a role
_PREAMBLE = ("system", "instructions")  # Anthropic's system prompt, the Responses API's instructions
_BODY = ("messages", "input", "prompt", "content")  # the first one present is the prompt


def routing_key(body: bytes) -> str:
    """The routing text of a JSON request body ("" when it has none)."""
    if not body:
        return ""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    if not isinstance(obj, dict):
        return ""
    text = "".join(_text(obj[k]) for k in _PREAMBLE if k in obj)
    for k in _BODY:
        if k in obj:
            return text + _text(obj[k])
    return text


def _text(value: Any) -> str:
    """A prompt value as text: strings as they are, messages with their roles, content parts'
    text, token ids as numbers (a token prompt's prefix is then a text prefix too)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, (int, float)):
        return f"{value} "
    if isinstance(value, list):
        return "".join(_text(v) for v in value)
    if isinstance(value, dict):
        if "role" in value:
            return f"{RS}{value['role']}{US}{_text(value.get('content'))}"
        if isinstance(value.get("text"), str):
            return str(value["text"])
        return _text(value.get("content"))
    return ""
