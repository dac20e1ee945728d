"""The vocabulary of a GGUF model, read from its metadata as llama.cpp's llama_vocab::load.

Token attributes, special token ids, the end-of-generation set and the tokenizer flags all
follow llama.cpp (src/llama-vocab.cpp), including its heuristics that find special tokens by
their text. One deliberate difference: where several tokens could fill the same slot (say
both `<|im_end|>` and `<|endoftext|>` for EOT), llama.cpp takes whichever its hash map yields
first; we take the one listed first below. Every candidate is in the EOG set either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llamacli.core.errors import TokenizerError
from llamacli.core.string_array import StringArray
from llamacli.core.text.tokenizer import pretypes
from llamacli.core.text.tokenizer.token_index import TokenIndex

# llama_token_type (GGUF tokenizer.ggml.token_type values)
TYPE_UNDEFINED, TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED, TYPE_UNUSED, TYPE_BYTE = range(7)

# llama_token_attr bits
ATTR_UNDEFINED = 0
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_NORMALIZED = 1 << 6
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8
ATTR_SINGLE_WORD = 1 << 9

_TYPE_TO_ATTR = np.array(
    [ATTR_UNDEFINED, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_UNUSED, ATTR_BYTE],
    dtype=np.int32,
)

_K = "tokenizer.ggml."

# model -> (kind, default special ids)
_MODELS: dict[str, tuple[str, dict[str, int | None]]] = {
    "llama": ("spm", {"bos": 1, "eos": 2, "unk": 0, "sep": None, "pad": None, "mask": None}),
    "bert": ("wpm", {"bos": 101, "eos": None, "unk": 100, "sep": 102, "pad": 0, "mask": 103}),
    "gpt2": ("bpe", {"bos": 11, "eos": 11, "unk": None, "sep": None, "pad": None, "mask": None}),
    "gemma4": ("bpe", {"bos": None, "eos": None, "unk": None, "sep": None, "pad": None, "mask": None}),
    "t5": ("ugm", {"bos": None, "eos": 1, "unk": 2, "sep": None, "pad": 0, "mask": None}),
}

# slot -> GGUF keys (later keys are deprecated aliases)
_SPECIAL_KEYS: tuple[tuple[str, str], ...] = (
    ("bos", "bos_token_id"),
    ("eos", "eos_token_id"),
    ("eot", "eot_token_id"),
    ("eom", "eom_token_id"),
    ("unk", "unknown_token_id"),
    ("sep", "seperator_token_id"),
    ("pad", "padding_token_id"),
    ("mask", "mask_token_id"),
    ("fim_pre", "fim_pre_token_id"),
    ("fim_suf", "fim_suf_token_id"),
    ("fim_mid", "fim_mid_token_id"),
    ("fim_pad", "fim_pad_token_id"),
    ("fim_rep", "fim_rep_token_id"),
    ("fim_sep", "fim_sep_token_id"),
    ("fim_pre", "prefix_token_id"),
    ("fim_suf", "suffix_token_id"),
    ("fim_mid", "middle_token_id"),
)

# slots found by token text when the metadata does not name them
_BY_TEXT: dict[str, tuple[str, ...]] = {
    "eot": ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
            "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"),
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}

_EOG_TEXTS = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
)


@dataclass
class Vocab:
    """Tokens, their scores and attributes, special ids and tokenizer flags of one model."""

    model: str  # tokenizer.ggml.model
    kind: str  # "spm", "bpe", "wpm" or "ugm"
    pre: str  # tokenizer.ggml.pre as llama.cpp uses it ("" when absent)
    pre_type: str  # llama.cpp LLAMA_VOCAB_PRE_TYPE_* name without the prefix
    tokens: Sequence[str]  # a StringArray when loaded (core/string_array.py)
    scores: np.ndarray  # float32 [n_tokens]
    types: np.ndarray  # int32 [n_tokens], GGUF token types
    attrs: np.ndarray  # int32 [n_tokens], llama_token_attr bits
    token_to_id: Mapping[str, int]  # a TokenIndex when loaded (token_index.py)
    merges: Sequence[str] | None = None
    bos: int | None = None
    eos: int | None = None
    eot: int | None = None
    eom: int | None = None
    unk: int | None = None
    sep: int | None = None
    pad: int | None = None
    mask: int | None = None
    fim_pre: int | None = None
    fim_suf: int | None = None
    fim_mid: int | None = None
    fim_pad: int | None = None
    fim_rep: int | None = None
    fim_sep: int | None = None
    eog_ids: frozenset[int] = frozenset()
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False
    add_space_prefix: bool = False
    ignore_merges: bool = False
    clean_spaces: bool = False
    remove_extra_whitespaces: bool = False
    escape_whitespaces: bool = True
    treat_whitespace_as_suffix: bool = False
    normalizer_lowercase: bool = True
    normalizer_strip_accents: bool = True
    precompiled_charsmap: bytes = b""
    special_ids: list[int] = field(default_factory=list)  # parsed before the model, longest first

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def attr(self, token_id: int) -> int:
        return int(self.attrs[token_id])

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> Vocab:
        return _load(md)


def _opt_bool(md: Mapping[str, Any], key: str, default: bool) -> bool:
    v = md.get(key)
    return default if v is None else bool(v)


def _load(md: Mapping[str, Any]) -> Vocab:
    model = md.get(_K + "model")
    if not isinstance(model, str):
        raise TokenizerError("the model has no tokenizer.ggml.model key")
    if model not in _MODELS:
        raise TokenizerError(f"unknown or unsupported tokenizer model {model!r}")
    kind, special_defaults = _MODELS[model]
    pre = md.get(_K + "pre") or ""
    if not isinstance(pre, str):
        raise TokenizerError("tokenizer.ggml.pre is not a string")

    flags: dict[str, Any] = {}
    merges: Sequence[str] | None = None
    # slot name -> token id or None (Any: they are passed on as Vocab's keyword arguments)
    special: dict[str, Any] = {slot: None for slot, _ in _SPECIAL_KEYS}
    special.update(special_defaults)
    if kind == "bpe":
        merges = md.get(_K + "merges")
        if merges is None:
            if pre != "kimi-k2":  # llama.cpp lets Kimi-K2 go without merges
                raise TokenizerError("cannot find tokenizer merges (tokenizer.ggml.merges) in the model")
            merges = []
        if model == "gemma4":
            pre = "gemma4"
        spec = pretypes.lookup(pre)
        pre_type = spec.pre_type
        flags.update(add_space_prefix=False, escape_whitespaces=False, clean_spaces=True)
        flags.update(spec.flags)
        if spec.no_bos:
            special["bos"] = None
    else:
        pre_type = "DEFAULT"
        if kind == "spm":
            flags.update(add_space_prefix=True, clean_spaces=False, add_bos=True, add_eos=False)
        elif kind == "wpm":
            flags.update(add_space_prefix=False, clean_spaces=True, add_bos=True, add_eos=False, add_sep=True)
        else:
            flags.update(add_bos=False, add_eos=True)
    flags["add_space_prefix"] = _opt_bool(md, _K + "add_space_prefix", flags.get("add_space_prefix", False))
    flags["remove_extra_whitespaces"] = _opt_bool(md, _K + "remove_extra_whitespaces", False)

    raw_tokens = md.get(_K + "tokens")
    if not isinstance(raw_tokens, (list, StringArray)) or not raw_tokens:
        raise TokenizerError("cannot find the token list (tokenizer.ggml.tokens) in the model")
    n = len(raw_tokens)
    tokens = raw_tokens if isinstance(raw_tokens, StringArray) else StringArray.of(raw_tokens)
    if not tokens.lengths().all():
        tokens = StringArray.of(t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens))
    scores = _array(md, "scores", n, np.float32, 0.0)
    types = _array(md, "token_type", n, np.int32, TYPE_NORMAL)
    attrs = np.where((types >= 0) & (types < len(_TYPE_TO_ATTR)), _TYPE_TO_ATTR[np.clip(types, 0, 6)], 0)
    attrs = attrs.astype(np.int32)
    token_to_id = TokenIndex(tokens)
    if token_to_id.n_distinct() != n:
        raise TokenizerError(f"the vocabulary has duplicate tokens ({n - token_to_id.n_distinct()} of {n})")

    for slot, value in special.items():
        if value is not None and value >= n:
            special[slot] = None
    for slot, key in _SPECIAL_KEYS:
        v = md.get(_K + key)
        if isinstance(v, (int, np.integer)) and 0 <= int(v) < n:
            special[slot] = int(v)

    flags["add_bos"] = _opt_bool(md, _K + "add_bos_token", flags.get("add_bos", False))
    flags["add_eos"] = _opt_bool(md, _K + "add_eos_token", flags.get("add_eos", False))
    flags["add_sep"] = _opt_bool(md, _K + "add_sep_token", flags.get("add_sep", False))
    if pre_type == "GEMMA4":
        flags["add_bos"] = True
    lower = _opt_bool(md, _K + "normalizer.lowercase", True)
    strip = _opt_bool(md, _K + "normalizer.strip_accents", lower)

    _detect_special(special, attrs, tokens, token_to_id)
    eog = _eog_ids(special, attrs, tokens, token_to_id)
    special_ids = [int(i) for i in np.nonzero(attrs & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))[0]]
    special_ids.sort(key=lambda i: -len(tokens[i].encode("utf-8")))  # longest (in bytes) first
    _strip_attrs(md, attrs, special_ids, token_to_id)

    charsmap = md.get(_K + "precompiled_charsmap")
    return Vocab(
        model=model,
        kind=kind,
        pre=pre,
        pre_type=pre_type,
        tokens=tokens,
        scores=scores,
        types=types,
        attrs=attrs,
        token_to_id=token_to_id,
        merges=merges,
        eog_ids=frozenset(eog),
        normalizer_lowercase=lower,
        normalizer_strip_accents=strip,
        precompiled_charsmap=bytes(np.asarray(charsmap, dtype=np.uint8)) if charsmap is not None else b"",
        special_ids=special_ids,
        **special,
        **flags,
    )


def _array(md: Mapping[str, Any], name: str, n: int, dtype: type, default: float) -> np.ndarray:
    v = md.get(_K + name)
    if v is None:
        return np.full(n, default, dtype=dtype)
    arr = np.asarray(v)
    if arr.ndim != 1 or len(arr) < n or arr.dtype.kind not in "iuf":
        raise TokenizerError(f"tokenizer.ggml.{name} has the wrong type or fewer than {n} entries")
    return arr[:n].astype(dtype, copy=False)  # the metadata's own array when it has the type


def _detect_special(
    special: dict[str, int | None], attrs: np.ndarray, tokens: Sequence[str], token_to_id: Mapping[str, int]
) -> None:
    for slot, texts in _BY_TEXT.items():
        if special[slot] is not None:
            continue
        for text in texts:
            tid = token_to_id.get(text)
            if tid is not None:
                special[slot] = tid
                attrs[tid] |= ATTR_CONTROL
                break
    # control tokens whose text says "unused" are also unused (they stay special)
    for tid in np.nonzero(attrs & ATTR_CONTROL)[0].tolist():
        if "unused" in tokens[tid]:
            attrs[tid] |= ATTR_UNUSED


def _eog_ids(
    special: dict[str, int | None], attrs: np.ndarray, tokens: Sequence[str], token_to_id: Mapping[str, int]
) -> set[int]:
    eog: set[int] = set()
    for slot in ("fim_pad", "fim_rep", "fim_sep"):
        if special[slot] is not None:
            eog.add(special[slot])  # type: ignore[arg-type]
    for text in _EOG_TEXTS:
        tid = token_to_id.get(text)
        if tid is not None:
            eog.add(tid)
            attrs[tid] |= ATTR_CONTROL
    # gpt-oss: always rendered
    for text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
        tid = token_to_id.get(text)
        if tid is not None:
            attrs[tid] = ATTR_USER_DEFINED
    for slot in ("eos", "eot", "eom"):
        if special[slot] is not None:
            eog.add(special[slot])  # type: ignore[arg-type]
    texts = {tokens[t]: t for t in eog}
    if ("<|end|>" in texts and (("<|return|>" in texts and "<|call|>" in texts)
                                or (("<|call|>" in texts or "<|calls|>" in texts) and "<|flush|>" in texts))):
        end = texts["<|end|>"]
        eog.discard(end)
        attrs[end] = ATTR_USER_DEFINED
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
        s = texts["</s>"]
        eog.discard(s)
        attrs[s] = ATTR_NORMAL
    return eog


def _strip_attrs(md: Mapping[str, Any], attrs: np.ndarray, special_ids: list[int], token_to_id: Mapping[str, int]) -> None:
    """Per-model LSTRIP/RSTRIP attributes (the end of llama_vocab::impl::load)."""
    name = str(md.get("general.name") or "").lower()
    arch = str(md.get("general.architecture") or "")
    gguf_pre = str(md.get(_K + "pre") or "")

    def set_attr(text: str, bit: int, on: bool) -> None:
        tid = token_to_id.get(text)
        if tid is None:
            raise TokenizerError(f"token {text!r} is missing from the vocabulary")
        attrs[tid] = (attrs[tid] | bit) if on else (attrs[tid] & ~bit)

    if any(s in gguf_pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        if "<mask>" in token_to_id:
            set_attr("<mask>", ATTR_LSTRIP, True)
    elif "phi-3" in name or "phi3" in name:
        for tid in special_ids:
            attrs[tid] |= ATTR_RSTRIP
        set_attr("</s>", ATTR_RSTRIP, True)
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            set_attr(text, ATTR_RSTRIP, False)
    elif "modern-bert" in name:
        if "[MASK]" in token_to_id:
            set_attr("[MASK]", ATTR_LSTRIP, True)
