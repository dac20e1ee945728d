"""Grammar-constrained decoding with llguidance over our own tokenizer.

    grammar = compile_grammar(tokenizer, spec)       # checks it; GrammarError when unusable
    c = GrammarConstraint(grammar)                    # one per task
    c.apply(logits)                                   # -inf where the grammar forbids a token
    tok = sampler.sample(logits); c.accept(tok)       # commit; c.is_stopped: nothing may follow

llguidance's tokenizer is built once per vocabulary (about 1.5 s for 262k tokens) from our
token bytes, with control tokens marked special, every end-of-generation token as its EOS set
(the mask allows them only where the grammar may end), and our real tokenizer for the text it
tokenizes itself.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from llamacli.core.text.grammar.spec import GrammarError, GrammarSpec

if TYPE_CHECKING:
    import llguidance
    from llamacli.core.text.tokenizer import Tokenizer

# llama_token_attr bits (core/text/tokenizer/vocab.py)
_ATTR_UNKNOWN, _ATTR_UNUSED, _ATTR_CONTROL = 1 << 0, 1 << 1, 1 << 3

_lock = threading.Lock()
# Per tokenizer of ours: llguidance's tokenizer and the grammars compiled for it (most recent
# last). Both go when our tokenizer goes (a server that sleeps on idle releases its model):
# nothing in the value refers back to the key strongly.
_tokenizers: weakref.WeakKeyDictionary[Any, tuple[llguidance.LLTokenizer, OrderedDict[GrammarSpec, CompiledGrammar]]] = (
    weakref.WeakKeyDictionary()
)
_CACHE_SIZE = 64


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
        if entry is None:
            eog = sorted(tokenizer.vocab.eog_ids)
            w = _Wrapper(tokenizer)
            lt = llguidance.LLTokenizer(llguidance.TokenizerWrapper(w), eos_token=eog or [w.eos_token_id])
            entry = _tokenizers[tokenizer] = (lt, OrderedDict())
        return entry


@dataclass(frozen=True)
class CompiledGrammar:
    """A checked grammar for one tokenizer; make a `GrammarConstraint` per task from it."""

    spec: GrammarSpec
    grammar: str  # llguidance's serialized grammar
    tokenizer: Any  # llguidance.LLTokenizer
    warnings: tuple[str, ...] = ()


def compile_grammar(tokenizer: Tokenizer, spec: GrammarSpec) -> CompiledGrammar:
    """Check ``spec`` against the tokenizer's vocabulary (cached per spec). Raises
    `GrammarError` with llguidance's message for a malformed grammar or an unsupported
    schema: a request is never silently answered without its constraint."""
    import llguidance

    lt, cache = _entry(tokenizer)
    with _lock:
        hit = cache.get(spec)
        if hit is not None:
            cache.move_to_end(spec)
            return hit
    g = spec.to_llguidance()
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(g, lt)
    if is_error:
        msg = "; ".join(m.strip() for m in messages) or "unknown error"
        what = "invalid JSON schema" if spec.kind == "json_schema" else f"failed to parse {spec.describe()}"
        raise GrammarError(f"{what}: {msg}")
    compiled = CompiledGrammar(spec, g, lt, tuple(messages))
    with _lock:
        cache[spec] = compiled
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)
    return compiled


class GrammarConstraint:
    """The grammar state of one generation: masks logits and follows the sampled tokens."""

    def __init__(self, grammar: CompiledGrammar) -> None:
        import llguidance

        self.grammar = grammar
        self.matcher = llguidance.LLMatcher(grammar.tokenizer, grammar.grammar, log_level=0)
        if self.matcher.is_error():
            raise GrammarError(f"failed to start the grammar: {self.matcher.get_error()}")
        self.n_vocab = int(grammar.tokenizer.vocab_size)
        self._bits = np.zeros((self.n_vocab + 31) // 32, dtype=np.int32)  # one bit per token

    def allowed(self) -> np.ndarray:
        """Bool (n_vocab,): the tokens the grammar allows next (EOG only where it may end)."""
        self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        return np.unpackbits(self._bits.view(np.uint8), count=self.n_vocab, bitorder="little").view(bool)

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
        return bool(self.matcher.consume_token(int(token)))

    @property
    def is_stopped(self) -> bool:
        """The grammar is complete: nothing but end-of-generation may follow."""
        return bool(self.matcher.is_stopped())

    @property
    def is_accepting(self) -> bool:
        """The output so far is a whole sentence of the grammar (it may still go on)."""
        return bool(self.matcher.is_accepting())

    def error(self) -> str:
        return str(self.matcher.get_error())
