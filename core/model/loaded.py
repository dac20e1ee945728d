"""One loaded model, built once: weights, tokenizer, chat template and the facts about them.

The REPL (`llama chat`) and the server (`llama serve`) both open a model through `load()` and
report it from the same `ModelInfo`: name, path, sizes, special tokens. The special tokens are
read as llama.cpp reads them (common/chat.cpp common_chat_templates_init, and llama-server's
/props):
- ids: the GGUF's tokenizer.ggml.bos_token_id / eos_token_id, else the tokenizer model's
  defaults (core/text/tokenizer/vocab.py; some pre-tokenizers have no BOS at all);
- texts: common_token_to_piece(vocab, id, special=true), "" for a vocabulary without the token;
- add_bos / add_eos: llama_vocab_get_add_bos / _eos, i.e. tokenizer.ggml.add_bos_token, else the
  tokenizer model's default (SPM and WPM add BOS). The chat template drops a leading BOS text
  when the tokenizer adds BOS itself, so a prompt never starts with two.

Importing this module is cheap (the weights, tokenizer and template code load with the first
`load()`): `llama serve` imports it before it opens its port.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from llamacli.core.model.families.base import DecoderModel
    from llamacli.core.model.load import LoadStats
    from llamacli.core.model.weights.gguf_file import GGUFFile
    from llamacli.core.text.chat_templates import ChatTemplate
    from llamacli.core.text.tokenizer import Tokenizer

POOLING_BY_ID = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}  # llama_pooling_type

# llama_vocab_type numbers, as /v1/models reports them
VOCAB_TYPES = {"none": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6}


class TokenizerLike(Protocol):
    """What ModelInfo needs of a tokenizer (the real Tokenizer and the tests' fake)."""

    @property
    def vocab(self) -> Any: ...

    def token_to_piece(self, token_id: int, special: bool = False) -> bytes: ...


@dataclass(frozen=True)
class SpecialTokens:
    """BOS and EOS of a vocabulary as the chat template and /props see them."""

    bos: int | None = None
    eos: int | None = None
    bos_text: str = ""
    eos_text: str = ""
    add_bos: bool = False  # the tokenizer puts BOS in front of a prompt (llama_vocab_get_add_bos)
    add_eos: bool = False

    @classmethod
    def of(cls, tokenizer: TokenizerLike) -> SpecialTokens:
        v = tokenizer.vocab
        return cls(
            bos=v.bos,
            eos=v.eos,
            bos_text=_piece(tokenizer, v.bos),
            eos_text=_piece(tokenizer, v.eos),
            add_bos=bool(v.add_bos),
            add_eos=bool(v.add_eos),
        )


def _piece(tokenizer: TokenizerLike, token: int | None) -> str:
    """common_token_to_piece(vocab, token, special=true); "" when the vocabulary has no such token."""
    if token is None or token < 0:
        return ""
    return tokenizer.token_to_piece(token, True).decode("utf-8", "replace")


@dataclass
class ModelInfo:
    """Facts about the loaded model that the REPL shows and the API reports or needs."""

    path: str
    tokenizer: Any  # a Tokenizer (a fake one in tests)
    template: ChatTemplate | None
    n_vocab: int
    n_ctx_train: int = 0
    n_embd: int = 0
    n_params: int = 0
    size: int = 0  # bytes of the GGUF file
    name: str = ""  # general.name ("" when the file has none)
    architecture: str = ""  # general.architecture
    vocab_type: int = 0  # llama_vocab_type
    pooling: str = "mean"
    rerank_template: str | None = None  # the GGUF's tokenizer.chat_template.rerank
    n_cls_out: int = 0  # outputs of the classification head (rerankers); 0: none
    special: SpecialTokens = field(default_factory=SpecialTokens)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path)


def chat_template(
    md: Mapping[str, Any], special: SpecialTokens, override: str | None = None, use_jinja: bool = True
) -> ChatTemplate:
    """The model's chat template (or --chat-template's built-in name / Jinja source), given the
    vocabulary's BOS/EOS as llama.cpp gives them to the template."""
    from llamacli.core.text.chat_templates import ChatTemplate

    return ChatTemplate.from_metadata(
        md, override=override, bos_token=special.bos_text, eos_token=special.eos_text,
        add_bos=special.add_bos, add_eos=special.add_eos, use_jinja=use_jinja,
    )


def model_info(
    path: str,
    gguf: GGUFFile,
    model: DecoderModel,
    tokenizer: Tokenizer,
    chat_template_override: str | None = None,
    use_jinja: bool = True,
    with_template: bool = True,
) -> ModelInfo:
    """ModelInfo of a loaded model. with_template=False: no chat template (`llama complete`,
    which renders none, then works on a model whose template does not compile)."""
    from llamacli.core.text.rerank import rerank_template

    md = gguf.metadata
    arch = str(md.get("general.architecture", "") or "")
    special = SpecialTokens.of(tokenizer)
    template = chat_template(md, special, chat_template_override, use_jinja) if with_template else None
    pooling_id = md.get(f"{arch}.pooling_type")
    pooling = POOLING_BY_ID.get(int(pooling_id), "mean") if pooling_id is not None else "mean"
    n_cls_out = int(model.n_cls_out)
    if pooling == "rank" and not n_cls_out:
        pooling = "mean"  # no classification head to rank with
    return ModelInfo(
        path=path,
        tokenizer=tokenizer,
        template=template,
        n_vocab=int(model.args.n_vocab),
        n_ctx_train=int(model.args.n_ctx_train),
        n_embd=int(model.args.n_embd),
        n_params=sum(int(t.n_elements) for t in gguf.tensors.values()),
        size=int(gguf.file_size),
        name=str(md.get("general.name", "") or ""),
        architecture=arch,
        vocab_type=VOCAB_TYPES.get(str(md.get("tokenizer.ggml.model", "")), 0),
        pooling=pooling,
        rerank_template=rerank_template(md),
        n_cls_out=n_cls_out,
        special=special,
    )


@dataclass
class LoadedModel:
    """A model in memory with its tokenizer and its ModelInfo (which holds the chat template)."""

    model: DecoderModel
    gguf: GGUFFile
    tokenizer: Tokenizer
    info: ModelInfo
    stats: LoadStats

    @property
    def path(self) -> str:
        return self.info.path

    @property
    def template(self) -> ChatTemplate | None:
        return self.info.template


def load(
    path: str | os.PathLike[str],
    numerics: str = "ggml",
    threads: int = -1,
    batch_invariant: bool = False,
    chat_template_override: str | None = None,
    use_jinja: bool = True,
    with_template: bool = True,
) -> LoadedModel:
    """Load the model at `path` with its tokenizer, chat template and ModelInfo (see load_model
    for numerics, threads and batch_invariant; model_info for the template options)."""
    from llamacli.core.model.load import load_model
    from llamacli.core.text.tokenizer import load_tokenizer

    model, g, stats = load_model(path, numerics=numerics, threads=threads, batch_invariant=batch_invariant)
    tok = load_tokenizer(g.metadata)
    info = model_info(str(path), g, model, tok, chat_template_override, use_jinja, with_template)
    return LoadedModel(model, g, tok, info, stats)
