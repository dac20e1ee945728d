"""Grammar-constrained decoding with llguidance over our own tokenizer.

    grammar = compile_grammar(tokenizer, spec)       # checks it; GrammarError when unusable
                                                      # (or over a limit: limits.py)
    c = GrammarConstraint(grammar)                    # one per task
    c.apply(logits)                                   # -inf where the grammar forbids a token
    tok = sampler.sample(logits); c.accept(tok)       # commit; c.is_stopped: nothing may follow

llguidance's tokenizer is built once per vocabulary (about 1.5 s for 262k tokens) from our
token bytes, with control tokens marked special, every end-of-generation token as its EOS set
(the mask allows them only where the grammar may end), and our real tokenizer for the text it
tokenizes itself.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from llamacli.core.text.grammar import worker
from llamacli.core.text.grammar.limits import DEFAULT_LIMITS, GrammarLimits, check_limits
from llamacli.core.text.grammar.spec import GrammarError, GrammarSpec

if TYPE_CHECKING:
    import llguidance
    from llamacli.core.text.tokenizer import Tokenizer

# llama_token_attr bits (core/text/tokenizer/vocab.py)
_ATTR_UNKNOWN, _ATTR_UNUSED, _ATTR_CONTROL = 1 << 0, 1 << 1, 1 << 3

_lock = threading.Lock()  # the caches below; held for lookups only
_build_lock = threading.Lock()  # building llguidance's tokenizer (seconds)
# Per tokenizer of ours: llguidance's tokenizer and the grammars compiled for it (most recent
# last). Both go when our tokenizer goes (a server that sleeps on idle releases its model):
# nothing in the value refers back to the key strongly.
_tokenizers: weakref.WeakKeyDictionary[Any, tuple[llguidance.LLTokenizer, OrderedDict[GrammarSpec, CompiledGrammar]]] = (
    weakref.WeakKeyDictionary()
)
_CACHE_SIZE = 64
_CACHE_BYTES = 2 * 1024 * 1024  # of grammar text: a matcher takes ~200 times its text's size


class _Wrapper:
    """What `llguidance.TokenizerWrapper` reads: token bytes, special ids, EOS, and a
    tokenize callable over bytes."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        from llamacli.core.text.tokenizer import Tokenizer as Tok

        v = tokenizer.vocab
        self.eos_token_id = v.eos if v.eos is not None else min(v.eog_ids, default=0)
        self.bos_token_id = v.bos
        tokens: list[bytes] = []
        special: list[int] = []
        for i in range(v.n_tokens):
            attr = int(v.attrs[i])
            # control tokens are special: spelled with a 0xFF lead byte no text can produce, a
            # grammar names them as <[id]>; user-defined tokens (Qwen's <tool_call>) stay text,
            # so that a literal "<tool_call>" in a grammar matches the model's single token
            if attr & (_ATTR_CONTROL | _ATTR_UNKNOWN | _ATTR_UNUSED):
                tokens.append(b"\xff" + v.tokens[i].encode("utf-8"))
                special.append(i)
            else:
                tokens.append(tokenizer.token_to_piece(i, special=True))
        self.tokens = tokens
        self.special_token_ids = special
        # llguidance tokenizes forced text and expects the pieces to spell it exactly: an SPM
        # vocabulary that adds a leading space to a first fragment must not do that here
        self._tok = Tok(replace(v, add_space_prefix=False), tokenizer._encoder) if v.add_space_prefix else weakref.proxy(tokenizer)

    def __call__(self, data: bytes | str) -> list[int]:
        return self._tok.tokenize(data, add_special=False, parse_special=False)


def llg_tokenizer(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's tokenizer for ours, built on first use and kept as long as ours lives."""
    return _entry(tokenizer)[0]


def _entry(tokenizer: Tokenizer) -> tuple[llguidance.LLTokenizer, OrderedDict[GrammarSpec, CompiledGrammar]]:
    import llguidance

    with _lock:
        entry = _tokenizers.get(tokenizer)
    if entry is not None:
        return entry
    with _build_lock:  # one build at a time, without holding the cache's lock for seconds
        with _lock:
            entry = _tokenizers.get(tokenizer)
        if entry is None:
            eog = sorted(tokenizer.vocab.eog_ids)
            w = _Wrapper(tokenizer)
            lt = llguidance.LLTokenizer(llguidance.TokenizerWrapper(w), eos_token=eog or [w.eos_token_id])
            with _lock:
                entry = _tokenizers[tokenizer] = (lt, OrderedDict())
        return entry


def _cached(tokenizer: Tokenizer, spec: GrammarSpec) -> CompiledGrammar | None:
    with _lock:
        entry = _tokenizers.get(tokenizer)
        if entry is None or spec not in entry[1]:
            return None
        entry[1].move_to_end(spec)
        return entry[1][spec]


@dataclass(frozen=True)
class CompiledGrammar:
    """A checked grammar for one tokenizer; make a `GrammarConstraint` per task from it.
    ``matcher`` is llguidance's matcher in its start state, built on a compile thread; it is
    never advanced, only copied."""

    spec: GrammarSpec
    grammar: str  # llguidance's serialized grammar
    tokenizer: Any  # llguidance.LLTokenizer
    matcher: Any  # llguidance.LLMatcher
    warnings: tuple[str, ...] = ()


def compile_grammar(tokenizer: Tokenizer, spec: GrammarSpec, limits: GrammarLimits = DEFAULT_LIMITS) -> CompiledGrammar:
    """Check ``spec`` against ``limits`` and the tokenizer's vocabulary (cached per spec).
    Raises `GrammarError` with llguidance's message for a malformed grammar or an
    unsupported schema, and for one over a limit: a request is never silently answered
    without its constraint. The compilation runs on a compile thread (`worker.py`), whatever
    thread calls; this one waits at most ``limits.timeout_s``."""
    return compile_grammar_future(tokenizer, spec, limits).result()


def compile_grammar_future(
    tokenizer: Tokenizer, spec: GrammarSpec, limits: GrammarLimits = DEFAULT_LIMITS
) -> Future[CompiledGrammar]:
    """`compile_grammar` for a caller that must not block (an event loop): the limits are
    checked now (`GrammarError`), the compilation starts on a compile thread, and the future
    holds its `CompiledGrammar` or its `GrammarError` (a time limit passed included)."""
    hit = _cached(tokenizer, spec)
    if hit is not None:
        done: Future[CompiledGrammar] = Future()
        done.set_result(hit)
        return done
    check_limits(spec, limits)

    def too_slow() -> GrammarError:
        return GrammarError(
            f"the {spec.describe()} did not compile within {limits.timeout_s:g} s (too complex, or the "
            "server is busy compiling others); simplify it or try again"
        )

    return worker.submit(lambda: _compile(tokenizer, spec), limits.timeout_s, too_slow)


def _compile(tokenizer: Tokenizer, spec: GrammarSpec) -> CompiledGrammar:
    """On a compile thread: llguidance's grammar and its matcher, cached when usable."""
    import llguidance

    lt, cache = _entry(tokenizer)
    what = "invalid JSON schema" if spec.kind == "json_schema" else f"failed to parse {spec.describe()}"
    try:
        with panics_as_errors(what):
            g = spec.to_llguidance()
            # short errors: a verbose one carries the parser's state and the whole grammar
            m = llguidance.LLMatcher(lt, g, log_level=0, limits=llguidance.LLParserLimits(verbose_errors=False))
    except RecursionError:
        raise GrammarError(f"{what}: nested too deeply") from None
    except (ValueError, TypeError) as e:
        raise GrammarError(f"{what}: {clean_message(str(e))}") from None
    if m.is_error():
        raise GrammarError(f"{what}: {clean_message(m.get_error())}")
    with panics_as_errors(what):
        failure = _first_token_fails(m)
    if failure is not None:
        raise GrammarError(f"the {spec.describe()} cannot start: {explain(failure)}")
    compiled = CompiledGrammar(spec, g, lt, m, tuple(clean_message(w) for w in m.get_grammar_warnings()))
    with _lock:
        cache[spec] = compiled
        size = sum(len(k.source) for k in cache)
        while len(cache) > 1 and (len(cache) > _CACHE_SIZE or size > _CACHE_BYTES):
            old, _ = cache.popitem(last=False)
            size -= len(old.source)
    return compiled


_PROBE = 16  # first tokens tried at compile time


def _first_token_fails(m: llguidance.LLMatcher) -> str | None:
    """llguidance's error when the grammar's first step fails whatever the model picks: the
    mask itself, or each of the (at most _PROBE) tokens it allows (a parser limit met on the
    first token, as with a start rule of thousands of alternatives), else None."""
    allowed = np.flatnonzero(np.unpackbits(np.frombuffer(m.compute_bitmask(), np.uint8), bitorder="little"))
    if m.is_error():
        return str(m.get_error())
    if not 0 < len(allowed) <= _PROBE:
        return None
    errors = []
    for tok in allowed.tolist():
        probe = m.deep_copy()
        if probe.consume_token(tok) or not probe.is_error():
            return None
        errors.append(str(probe.get_error()))
    return errors[0]


_ROW = re.compile(r"Current row has (\d+) items; max is (\d+)")


def explain(msg: str) -> str:
    """llguidance's error from a parser step, its limits said as such: a row of the Earley
    parser over max_items_in_row (a rule of thousands of alternatives met where the parser
    must track each, such as the start rule; in a rule of its own they become one lexeme)."""
    msg = clean_message(msg)
    row = _ROW.search(msg)
    if row is None:
        return msg
    return (f"the parser would hold {row[1]} items at one point, over llguidance's limit of {row[2]} "
            "(max_items_in_row): a rule of that many alternatives where each must be tracked, such as the start "
            "rule, is over it; in a rule of its own they become one lexeme")


def clean_message(msg: str) -> str:
    """llguidance's message without the native backtrace a Rust panic appends to it (nor
    the parser state, nor the marker that says the state was left out)."""
    for tail in ("<backtrace>", "<state>", "<non-verbose/>"):
        cut = msg.find(tail)
        if cut >= 0:
            msg = msg[:cut]
    return msg.strip() or "unknown error"


@contextmanager
def panics_as_errors(what: str) -> Iterator[None]:
    """A Rust panic inside llguidance surfaces as pyo3's PanicException, a BaseException
    that `except Exception` lets through (on the engine's thread it would end the loop):
    make it a `GrammarError` with the panic's message and no backtrace."""
    try:
        yield
    except BaseException as e:
        if type(e).__name__ != "PanicException":
            raise
        raise GrammarError(f"{what}: {clean_message(str(e))}") from None


class GrammarConstraint:
    """The grammar state of one generation: masks logits and follows the sampled tokens."""

    def __init__(self, grammar: CompiledGrammar) -> None:
        self.grammar = grammar
        with panics_as_errors("the grammar engine failed"):
            self.matcher: llguidance.LLMatcher = grammar.matcher.deep_copy()  # no recompilation
        self.n_vocab = int(grammar.tokenizer.vocab_size)
        self._bits = np.zeros((self.n_vocab + 31) // 32, dtype=np.int32)  # one bit per token

    def allowed(self) -> np.ndarray:
        """Bool (n_vocab,): the tokens the grammar allows next (EOG only where it may end)."""
        with panics_as_errors("the grammar engine failed"):
            self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        return np.unpackbits(self._bits.view(np.uint8), count=self.n_vocab, bitorder="little").view(bool)

    def allowed_last(self, token: int) -> bool:
        """Whether the last mask computed (`allowed`, `apply`) allowed ``token``."""
        return 0 <= token < self.n_vocab and bool(self._bits.view(np.uint32)[token >> 5] >> (token & 31) & 1)

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """Set logits (n_logits,) of forbidden tokens to -inf, in place (rows past the
        vocabulary, a padded output layer's, are forbidden too); returns logits."""
        ok = self.allowed()
        n = min(self.n_vocab, logits.shape[0])
        np.putmask(logits[:n], ~ok[:n], -np.inf)
        if logits.shape[0] > n:
            logits[n:] = -np.inf
        return logits

    def accept(self, token: int) -> bool:
        """Commit a sampled token; False (the matcher is then in error) when it breaks the grammar."""
        with panics_as_errors("the grammar engine failed"):
            return bool(self.matcher.consume_token(int(token)))

    @property
    def is_stopped(self) -> bool:
        """The grammar is complete: nothing but end-of-generation may follow."""
        return bool(self.matcher.is_stopped())

    @property
    def is_accepting(self) -> bool:
        """The output so far is a whole sentence of the grammar (it may still go on)."""
        return bool(self.matcher.is_accepting())

    @property
    def failed(self) -> bool:
        """The matcher is in error (a limit of its parser met while computing a mask)."""
        return bool(self.matcher.is_error())

    def error(self) -> str:
        return explain(str(self.matcher.get_error()))
