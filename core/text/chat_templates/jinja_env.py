"""The sandboxed Jinja environment chat templates run in, set up as Hugging Face does.

A GGUF is untrusted input (CVE-2024-34359 was a chat template escaping a plain jinja2
Environment), so templates run in jinja2's ``ImmutableSandboxedEnvironment``. As in
transformers' ``_compile_jinja_template``: ``trim_blocks``/``lstrip_blocks``, the
``loopcontrols`` extension, the ``{% generation %}`` tag, a ``tojson`` filter without HTML
escaping, ``raise_exception`` and ``strftime_now``. Two deliberate additions: list
``append``/``pop``/``extend``/``insert`` are allowed (Kimi templates use them and llama.cpp's
engine runs them; every render gets deep copies, so nothing of the caller's is changed), and
``*``/``**`` are bounded so a template cannot exhaust memory; reading an unsafe attribute
(``__class__``, ``__globals__``, ...) is an error at once rather than a silent undefined.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any, NoReturn

import jinja2
import jinja2.nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .messages import ChatTemplateError

MAX_REPEAT = 1 << 20  # longest string or list that `*` may build
MAX_EXPONENT = 4096  # largest integer exponent `**` accepts
_LIST_MUTATORS = frozenset({"append", "pop", "extend", "insert"})


class TemplateRaised(Exception):
    """What ``raise_exception`` throws: carries the template's own message."""


class GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers' AssistantTracker): renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


class ChatSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, plus list mutators on lists, bounded ``*``/``**``, and an error
    (not a silent undefined) for any unsafe attribute."""

    intercepted_binops = frozenset({"*", "**"})

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, list) and attr in _LIST_MUTATORS:
            return True
        return super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        """Fail at once on an unsafe attribute (jinja2 would return a silent undefined)."""
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_REPEAT:
                    raise SecurityError(f"the template builds a sequence longer than {MAX_REPEAT}")
        elif operator == "**" and isinstance(right, int) and abs(right) > MAX_EXPONENT:
            raise SecurityError(f"the template raises to a power above {MAX_EXPONENT}")
        return super().call_binop(context, operator, left, right)


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: ``json.dumps`` with non-ASCII kept and no HTML escaping.

    Python's defaults then give ``", "``/``": "`` without indent and ``","``/``": "`` with it,
    which is also what llama.cpp's own Jinja engine emits.
    """
    seps = (separators[0], separators[1]) if separators is not None else None
    return json.dumps(
        _plain(value), ensure_ascii=ensure_ascii, indent=indent, separators=seps, sort_keys=sort_keys, default=_plain
    )


def _plain(value: Any) -> Any:
    """JSON-able form of what templates pass to tojson: undefined is null, ``map()`` output a list."""
    if isinstance(value, jinja2.Undefined):
        return None
    if isinstance(value, Iterator):
        return list(value)
    if isinstance(value, (str, int, float, bool, type(None), list, tuple, dict)):
        return value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def raise_exception(message: str) -> NoReturn:
    """The ``raise_exception`` global HF templates call to reject a conversation."""
    raise TemplateRaised(str(message))


def strftime_now(fmt: str) -> str:
    """The ``strftime_now`` global: the local time formatted with ``fmt``."""
    return datetime.now().strftime(fmt)


def _make_env() -> ChatSandbox:
    env = ChatSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, GenerationTag])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_ENV = _make_env()


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """Compile ``source`` once (cached by its text); a syntax error is a ChatTemplateError."""
    try:
        return _ENV.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat template syntax error on line {exc.lineno}: {exc.message}") from None
    except Exception as exc:  # noqa: BLE001 - any failure of untrusted input is a template error
        raise ChatTemplateError(f"chat template cannot be compiled: {exc}") from None


def render_template(template: jinja2.Template, context: Mapping[str, Any]) -> str:
    """Render with ``context``; every failure becomes a ChatTemplateError with a clear message."""
    try:
        return template.render(**context)
    except TemplateRaised as exc:
        raise ChatTemplateError(f"chat template error: {exc}") from None
    except SecurityError as exc:
        raise ChatTemplateError(f"chat template blocked by the sandbox: {exc}") from None
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template error: {exc}") from None
    except RecursionError:
        raise ChatTemplateError("chat template error: recursion too deep") from None
    except Exception as exc:  # noqa: BLE001 - a template's runtime error must never crash the engine
        raise ChatTemplateError(f"chat template error: {type(exc).__name__}: {exc}") from None
