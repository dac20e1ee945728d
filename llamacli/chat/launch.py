"""Turning a loaded model into a chat session: engine, slots, session."""

from __future__ import annotations

from llamacli.chat.conversation import Conversation
from llamacli.chat.session import ChatSession
from llamacli.chat.settings import ChatSettings
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.speculative.config import SpecConfig
from llamacli.loading import OpenedModel


def start_session(
    rt: OpenedModel,
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
    (KV memory is allocated lazily, so unused slot capacity costs nothing.) The session renders
    with the model's chat template (`open_model(..., chat_template=...)`)."""
    template = rt.info.template
    if template is None:
        raise ValueError("start_session: open the model with its chat template (with_template=True)")
    n_ctx = n_ctx if n_ctx > 0 else int(rt.model.args.n_ctx_train)
    config = EngineConfig(n_ctx=n_ctx * n_parallel, n_parallel=n_parallel, n_batch=n_batch, speculative=speculative)
    engine = Engine(rt.model, rt.tokenizer, config, rt.loras, draft_model=draft_model)
    engine.start()
    session = ChatSession(
        engine, rt.tokenizer, template, engine.n_ctx_slot, settings, Conversation(system=system), rt.info
    )
    return engine, session
