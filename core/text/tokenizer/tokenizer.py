"""Text <-> token ids with llama.cpp's semantics (llama_tokenize, llama_token_to_piece,
llama_detokenize in src/llama-vocab.cpp).

`load_tokenizer(metadata)` picks the model from `tokenizer.ggml.model`: `llama` is SPM,
`gpt2` (and `gemma4`) BPE, `bert` WPM, `t5` UGM. Text goes through the special-token partition first,
then each raw fragment through the model's encoder, with BOS/EOS/SEP framing per model.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from llamacli.core.errors import TokenizerError
from llamacli.core.text.tokenizer.bpe import BpeEncoder
from llamacli.core.text.tokenizer.partition import SpecialPartitioner
from llamacli.core.text.tokenizer.pretokenize import pretokenizer_for
from llamacli.core.text.tokenizer.spm import SPACE, SpmEncoder
from llamacli.core.text.tokenizer.ugm import UgmEncoder
from llamacli.core.text.tokenizer.unicode import CHAR_TO_BYTE, encode_utf8
from llamacli.core.text.tokenizer.vocab import (
    ATTR_BYTE,
    ATTR_CONTROL,
    ATTR_NORMAL,
    ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
    Vocab,
)
from llamacli.core.text.tokenizer.wpm import WpmEncoder

_SPECIAL = ATTR_UNKNOWN | ATTR_CONTROL
_SPACE_BYTES = SPACE.encode("utf-8")

# llama_detokenize's clean_spaces passes; each is one left-to-right rewrite (see detokenize)
_CLEAN_PUNCT = re.compile(rb" (?=[?!.,])")
_CLEAN_QUOTE = re.compile(rb" ' ")
_CLEAN_CONTRACTION = re.compile(rb" '(?=[sm]|re|ve)")


class Encoder(Protocol):
    def encode_fragments(self, fragments: list[bytes]) -> list[list[int]]:
        """The ids of each raw text fragment (UTF-8, possibly invalid), tokenized apart."""
        ...


def _decode_text(text: str) -> bytes:
    """llama_decode_text: byte-level alphabet -> bytes, unknown chars spelled out."""
    out = bytearray()
    for ch in text:
        b = CHAR_TO_BYTE.get(ch)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + encode_utf8(ch).hex().encode() + encode_utf8(text) + b"]"
    return bytes(out)


class Tokenizer:
    """Tokenizes and detokenizes for one vocabulary; build with `load_tokenizer`."""

    def __init__(self, vocab: Vocab, encoder: Encoder) -> None:
        self.vocab = vocab
        self._encoder = encoder
        self._partitioner = SpecialPartitioner(vocab)
        self._pieces: dict[int, bytes] = {}  # the tokens detokenized so far (a list of all: 2 MiB)

    # -- tokenize -------------------------------------------------------------------------

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """llama_tokenize: `add_special` adds BOS/EOS (SEP for BERT) as the model asks;
        `parse_special` turns control-token text such as `<start_of_turn>` into its id."""
        data = encode_utf8(text) if isinstance(text, str) else bytes(text)
        fragments = self._partitioner.split(data, parse_special)
        v = self.vocab
        out: list[int] = []
        if add_special and (v.add_bos or v.kind == "wpm"):
            out.append(self._require(v.bos, "BOS"))
        encoded = iter(self._encoder.encode_fragments(self._raw_fragments(fragments)))
        for frag in fragments:
            if isinstance(frag, int):
                out.append(frag)
            else:
                out += next(encoded)
        if add_special and v.kind == "wpm":
            out.append(self._require(v.sep, "SEP"))
        elif add_special and v.add_eos:
            out.append(self._require(v.eos, "EOS"))
        return out

    def _raw_fragments(self, fragments: list[bytes | int]) -> list[bytes]:
        """The text fragments as the encoder reads them: SPM adds the space prefix at the
        start and after each special token (when the model asks for it) and escapes spaces
        to U+2581; so does BPE with escape_whitespaces (no prefix)."""
        v = self.vocab
        raw: list[bytes] = []
        prev_special = True
        for frag in fragments:
            if isinstance(frag, int):
                prev_special = True
                continue
            if v.kind == "spm":
                if v.add_space_prefix and prev_special:
                    frag = b" " + frag
                frag = frag.replace(b" ", _SPACE_BYTES)
            elif v.kind == "bpe" and v.escape_whitespaces:
                frag = frag.replace(b" ", _SPACE_BYTES)
            raw.append(frag)
            prev_special = False
        return raw

    @staticmethod
    def _require(token_id: int | None, name: str) -> int:
        if token_id is None:
            raise TokenizerError(f"the model asks for a {name} token but defines none")
        return token_id

    # -- pieces and detokenize ------------------------------------------------------------

    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        """llama_token_to_piece (lstrip 0): the bytes a token stands for; control and unknown
        tokens give b"" unless `special`."""
        v = self.vocab
        if not 0 <= token_id < v.n_tokens:
            raise TokenizerError(f"token id {token_id} is out of range (vocabulary of {v.n_tokens})")
        if not special and v.attrs[token_id] & _SPECIAL:
            return b""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self._make_piece(token_id)
        return piece

    def _make_piece(self, token_id: int) -> bytes:
        v = self.vocab
        attr = int(v.attrs[token_id])
        text = v.tokens[token_id]
        if attr & (_SPECIAL | ATTR_USER_DEFINED):
            return encode_utf8(text)
        if attr & ATTR_NORMAL:
            if v.kind != "bpe" or v.escape_whitespaces:
                return encode_utf8(text.replace(SPACE, " "))
            return _decode_text(text)
        if attr & ATTR_BYTE:
            return bytes((int(text[3:5], 16),))
        return b""

    def detokenize_bytes(
        self, ids: Iterable[int], remove_special: bool = False, unparse_special: bool = False
    ) -> bytes:
        """llama_detokenize, as bytes."""
        v = self.vocab
        ids = list(ids)
        remove_space = v.add_space_prefix
        if remove_special and v.add_bos and ids and ids[0] == v.bos:
            remove_space = False
            ids = ids[1:]
        if remove_special and v.add_eos and ids and ids[-1] == v.eos:
            ids = ids[:-1]
        parts = [self.token_to_piece(t, unparse_special) for t in ids]
        if remove_space and parts and parts[0][:1] == b" ":
            parts[0] = parts[0][1:]
        text = b"".join(parts)
        if v.clean_spaces and text:
            # Each C++ pass rewrites in place while reading characters it has not yet
            # overwritten, which is a non-overlapping left-to-right substitution.
            text = _CLEAN_PUNCT.sub(b"", text)
            text = _CLEAN_QUOTE.sub(b"'", text)
            text = _CLEAN_CONTRACTION.sub(b"'", text)
        return text

    def detokenize(self, ids: Iterable[int], remove_special: bool = False, unparse_special: bool = False) -> str:
        """llama_detokenize, decoded as UTF-8 (invalid bytes become U+FFFD)."""
        return self.detokenize_bytes(ids, remove_special, unparse_special).decode("utf-8", "replace")

    def is_eog(self, token_id: int) -> bool:
        """Whether the token ends generation (EOS, EOT, EOM and llama.cpp's EOG list)."""
        return token_id in self.vocab.eog_ids

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_tokens

    @functools.cached_property
    def max_token_chars(self) -> int:
        """The length of the longest token as the vocabulary spells it: no token covers more
        characters of text (SPM, BPE), so a text longer than n_ctx times this cannot fit a
        context of n_ctx tokens. WPM and UGM drop or merge whitespace: for them it is a
        bound on any text that is not mostly whitespace. Drivers use it to bound the work of
        one request before tokenizing."""
        return max((len(t) for t in self.vocab.tokens), default=1)


def load_tokenizer(md: Mapping[str, Any]) -> Tokenizer:
    """Build the tokenizer that `tokenizer.ggml.model` names from GGUF metadata."""
    vocab = Vocab.from_metadata(md)
    if vocab.kind == "spm":
        return Tokenizer(vocab, SpmEncoder(vocab))
    if vocab.kind == "bpe":
        try:
            pre = pretokenizer_for(vocab.pre_type)
        except TokenizerError as e:
            raise TokenizerError(f"pre-tokenizer {vocab.pre or 'default'!r} is not supported: {e}") from e
        return Tokenizer(vocab, BpeEncoder(vocab, pre))
    if vocab.kind == "wpm":
        return Tokenizer(vocab, WpmEncoder(vocab))
    if vocab.kind == "ugm":
        return Tokenizer(vocab, UgmEncoder(vocab))
    raise TokenizerError(f"tokenizer model {vocab.model!r} is not supported")
