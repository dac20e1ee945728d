"""Turning a loaded model into a chat session: chat template, engine, model info."""

from __future__ import annotations

from llamacli.chat.conversation import Conversation
from llamacli.chat.session import ChatSession, ModelInfo
from llamacli.chat.settings import ChatSettings
from llamacli.core.chat_templates import ChatTemplate
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.models.base import DecoderModel
from llamacli.core.speculative.config import SpecConfig
from llamacli.runtime import Runtime


def chat_template(rt: Runtime, override: str | None = None, use_jinja: bool = True) -> ChatTemplate:
    """The model's template (or --chat-template's built-in name / Jinja source)."""
    vocab = rt.tokenizer.vocab
    bos = vocab.tokens[vocab.bos] if vocab.bos is not None and vocab.bos >= 0 else ""
    eos = vocab.tokens[vocab.eos] if vocab.eos is not None and vocab.eos >= 0 else ""
    return ChatTemplate.from_metadata(rt.gguf.metadata, override=override, bos_token=bos, eos_token=eos, use_jinja=use_jinja)


def model_info(rt: Runtime) -> ModelInfo:
    md = rt.gguf.metadata
    return ModelInfo(
        path=rt.path,
        name=str(md.get("general.name", "") or ""),
        architecture=str(md.get("general.architecture", "") or ""),
        n_ctx_train=int(rt.model.args.n_ctx_train),
        n_params=sum(int(t.n_elements) for t in rt.gguf.tensors.values()),
        size_bytes=int(rt.gguf.file_size),
    )


def start_session(
    rt: Runtime,
    template: ChatTemplate,
    settings: ChatSettings,
    *,
    n_ctx: int,
    n_batch: int = 512,
    n_parallel: int = 1,
    system: str = "",
    speculative: SpecConfig = SpecConfig(),
    draft_model: DecoderModel | None = None,
) -> tuple[Engine, ChatSession]:
    """A started engine with `n_parallel` slots of `n_ctx` tokens each, and a session on it.
    (KV memory is allocated lazily, so unused slot capacity costs nothing.)"""
    n_ctx = n_ctx if n_ctx > 0 else int(rt.model.args.n_ctx_train)
    config = EngineConfig(n_ctx=n_ctx * n_parallel, n_parallel=n_parallel, n_batch=n_batch, speculative=speculative)
    engine = Engine(rt.model, rt.tokenizer, config, rt.loras, draft_model=draft_model)
    engine.start()
    session = ChatSession(
        engine, rt.tokenizer, template, engine.n_ctx_slot, settings, Conversation(system=system), model_info(rt)
    )
    return engine, session
