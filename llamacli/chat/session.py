"""A chat session: conversation -> prompt tokens -> one engine task -> a streamed reply.

No terminal code here: a reply is streamed through an `on_text` callback, and its outcome comes
back as a `Reply` with the numbers for the stats footer.

With tools (`llama chat --tools`, the loop in chat/agent.py) a step goes through core's tool
calling instead (`submit_step`/`stream_step`): the prompt from `prepare_chat` with the tools'
definitions, its grammar, and the answer read by the tool-call parser into content, thoughts
and the calls the model asked for (`Reply.tool_calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from llamacli.chat.conversation import Conversation
from llamacli.chat.settings import ChatSettings
from llamacli.core.errors import ContextOverflow, InvalidRequest
from llamacli.core.model.loaded import ModelInfo
from llamacli.core.text.reasoning import ReasoningBudgetSpec, ReasoningSplitter, prompt_opens_thinking, thinking_tags
from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.core.text.tool_calls import ChatSetup, ToolCall


class EngineLike(Protocol):
    def submit(self, task: Task) -> Task: ...


class TokenizerLike(Protocol):
    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]: ...


class TemplateLike(Protocol):
    @property
    def name(self) -> str: ...

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str: ...


class ConversationTooLong(ContextOverflow):
    """The rendered conversation does not fit the context window."""

    def __init__(self, n_tokens: int, n_ctx: int) -> None:
        self.n_prompt_tokens = n_tokens
        self.n_ctx = n_ctx
        InvalidRequest.__init__(
            self,
            f"the conversation has {n_tokens} tokens, more than the context size ({n_ctx}); "
            "use /undo or /clear, or start with a larger -c",
        )


@dataclass
class TurnStats:
    """Numbers for the one-line footer under a reply."""

    n_generated: int = 0
    tokens_per_second: float = 0.0
    n_prompt: int = 0  # prompt tokens of this turn
    n_prompt_new: int = 0  # of which processed now (the rest came from the prompt cache)
    prompt_per_second: float = 0.0
    ctx_used: int = 0
    n_ctx: int = 0
    seconds: float = 0.0

    @classmethod
    def from_final(cls, final: Final, n_ctx: int) -> TurnStats:
        t = final.timings.to_dict()
        return cls(
            n_generated=len(final.tokens),
            tokens_per_second=t["predicted_per_second"],
            n_prompt=len(final.prompt_tokens),
            n_prompt_new=final.timings.prompt_n,
            prompt_per_second=t["prompt_per_second"],
            ctx_used=len(final.prompt_tokens) + len(final.tokens),
            n_ctx=n_ctx,
            seconds=(final.timings.prompt_ms + final.timings.predicted_ms) / 1e3,
        )


@dataclass
class Reply:
    content: str
    final: Final | None
    interrupted: bool = False
    stats: TurnStats = field(default_factory=TurnStats)
    reasoning: str = ""  # a reasoning model's thoughts (not kept in the conversation)
    tool_calls: list[ToolCall] = field(default_factory=list)  # what the model asked to run (tool steps)

    @property
    def finish_reason(self) -> str:
        if self.interrupted:
            return "interrupted"
        return self.final.finish_reason if self.final is not None else "cancelled"

    @property
    def context_full(self) -> bool:
        return self.final is not None and self.final.truncated


@dataclass
class ChatSession:
    engine: EngineLike
    tokenizer: TokenizerLike
    template: TemplateLike
    n_ctx: int  # context of the session's slot
    settings: ChatSettings = field(default_factory=ChatSettings)
    conversation: Conversation = field(default_factory=Conversation)
    info: ModelInfo = field(default_factory=lambda: ModelInfo("", None, None, 0))  # what /show and the banner say
    splitters: dict[int, ReasoningSplitter] = field(default_factory=dict)  # task id -> how its thoughts are found
    mtmd: Any = None  # -mm: the projector's encoders (core/multimodal/media_encoder.Encoders); None: text only
    pending: list[Any] = field(default_factory=list)  # media attached (--image, --audio, /image, /audio) for the next message
    media_limits: Any = None  # core/multimodal/limits.MediaLimits of --image-max-pixels/-bytes, --audio-max-seconds

    # ---- media ---------------------------------------------------------------------------
    def attach(self, media: Any) -> None:
        """An image or audio clip (core/multimodal/media.Media) for the next user message; one
        the projector does not take is refused now (llama-server's message)."""
        if self.mtmd is None:
            raise InvalidRequest(f"{media.kind} input needs a multimodal projector: start llama chat with -mm/--mmproj FILE")
        self.mtmd.encoder_for(media)
        self.pending.append(media)

    def add_user(self, message: str) -> None:
        """The user's message, with the images attached since the last one (a marker each in
        front, as llama-mtmd-cli does, unless the message places them)."""
        from llamacli.core.multimodal.encoder import MEDIA_MARKER

        media, self.pending = self.pending, []
        if media and MEDIA_MARKER not in message:
            message = MEDIA_MARKER * len(media) + message
        self.conversation.add_user(message, media)

    # ---- prompts -------------------------------------------------------------------------
    def render(self, conv: Conversation | None = None, add_generation_prompt: bool = True) -> str:
        conv = conv or self.conversation
        if conv.has_tool_turns:  # tool calls and results, as the template can show them
            return self.chat_setup(None, None, conv, add_generation_prompt).prompt
        return self.template.render(conv.for_template(), add_generation_prompt=add_generation_prompt)

    def chat_setup(self, tools: list[dict[str, Any]] | None, tool_choice: Any, conv: Conversation | None = None,
                   add_generation_prompt: bool = True) -> ChatSetup:
        """core's tool-calling setup of the conversation: prompt, grammar, parser format."""
        from llamacli.core.text.tool_calls import prepare_chat

        conv = conv or self.conversation
        return prepare_chat(self.template, conv.for_template(), tools=tools or None,  # type: ignore[arg-type]
                            tool_choice=tool_choice if tools else None, grammar=self.settings.grammar,
                            tokenizer=self.tokenizer, add_generation_prompt=add_generation_prompt,  # type: ignore[arg-type]
                            reasoning_format="auto")

    def tokens(self, conv: Conversation | None = None, add_generation_prompt: bool = True) -> list[int]:
        return self.tokenizer.tokenize(self.render(conv, add_generation_prompt), add_special=True, parse_special=True)

    def count_tokens(self) -> int:
        """/tokens: the conversation so far as the model sees it (no generation prompt)."""
        if not self.conversation.messages and not self.conversation.system:
            return 0
        return len(self.tokens(add_generation_prompt=False))

    def submit(self, conv: Conversation | None = None) -> Task:
        """Start generating the answer to `conv` (default: the session's conversation)."""
        prompt = self.render(conv)
        tags = thinking_tags(getattr(self.template, "source", "") or "")
        splitter = ReasoningSplitter(tags, prompt_opens_thinking(prompt, tags))
        params = self.settings.task_params()
        st = self.settings
        if st.reasoning_budget >= 0:
            params.reasoning = ReasoningBudgetSpec(tags.start, tags.end, st.reasoning_budget, st.reasoning_budget_message,
                                                   splitter.forced_open)
        task = self._start(prompt, params, conv or self.conversation)
        self.splitters[task.id] = splitter
        return task

    def submit_step(self, tools: list[dict[str, Any]], tool_choice: Any = "auto") -> tuple[Task, ChatSetup]:
        """Start one step of the tool loop: the conversation so far with the tools' definitions
        (tool_choice: OpenAI's auto, none, required, or {"type": "function", ...})."""
        setup = self.chat_setup(tools, tool_choice)
        params = self.settings.task_params()
        params.grammar = setup.grammar
        params.preserved_tokens = setup.preserved_tokens
        params.reasoning = setup.budget(self.settings.reasoning_budget, self.settings.reasoning_budget_message)
        return self._start(setup.prompt, params, self.conversation), setup

    def _start(self, prompt: str, params: TaskParams, conv: Conversation) -> Task:
        images = conv.media()
        if images and self.mtmd is not None:
            from llamacli.core.multimodal.prompt import prompt_with_media

            toks, media = prompt_with_media(prompt, images, self.mtmd, self.tokenizer)  # type: ignore[arg-type]
        else:
            toks, media = self.tokenizer.tokenize(prompt, add_special=True, parse_special=True), ()
        if len(toks) >= self.n_ctx:
            raise ConversationTooLong(len(toks), self.n_ctx)
        return self.engine.submit(Task(toks, params, media=media))

    # ---- streaming -----------------------------------------------------------------------
    def stream(
        self, task: Task, on_text: Callable[[str], None], on_thought: Callable[[str], None] | None = None
    ) -> Reply:
        """Read the task's results, calling on_text for each new piece of the answer and
        on_thought for each new piece of thinking (`<think>...</think>`, core/text/reasoning).

        A KeyboardInterrupt (Ctrl-C) while streaming cancels the task: the engine stops it
        within one step, and the Reply comes back with `interrupted=True` and the text
        generated so far. Further Ctrl-Cs while the engine winds down are ignored.
        """
        splitter = self.splitters.pop(task.id, ReasoningSplitter())
        shown = _Shown(splitter, on_text, on_thought)
        text, final, interrupted = self._read(task, shown.piece)
        split = splitter.split(text, final=True)
        if not interrupted:
            shown.update(text, final=True)
        return self._reply(final, interrupted, split.content, split.reasoning)

    def stream_step(self, task: Task, setup: ChatSetup, on_text: Callable[[str], None],
                    on_thought: Callable[[str], None] | None = None) -> Reply:
        """Read one tool-loop step's results through the tool-call parser: content and
        thoughts are passed on as they come, the calls come back in `Reply.tool_calls` (a call
        still being written when the answer was cut is dropped)."""
        parser = setup.parser()

        def deliver(deltas: list[Any]) -> None:
            for d in deltas:
                if d.content:
                    on_text(d.content)
                if d.reasoning and on_thought is not None:
                    on_thought(d.reasoning)

        _text, final, interrupted = self._read(task, lambda piece: deliver(parser.feed(piece)))
        if not interrupted and final is not None:
            deliver(parser.finish(cut=final.stop_type != "eos"))
        msg = parser.message
        reply = self._reply(final, interrupted, msg.content or "", msg.reasoning_content)
        reply.tool_calls = [] if interrupted else list(msg.tool_calls)
        return reply

    def _read(self, task: Task, on_piece: Callable[[str], None]) -> tuple[str, Final | None, bool]:
        """The task's whole text, its Final and whether Ctrl-C interrupted it; each new piece
        goes to on_piece until then."""
        parts: list[str] = []
        final: Final | None = None
        interrupted = False
        results = iter(task.results)
        while True:
            try:
                for r in results:
                    if isinstance(r, Final):
                        final = r
                    elif r.content:
                        parts.append(r.content)
                        if not interrupted:
                            on_piece(r.content)
                break
            except KeyboardInterrupt:
                interrupted = True
                task.cancel()
                results = iter(task.results)
        if final is not None and final.error is not None:
            raise final.error
        text = final.content if final is not None and final.content else "".join(parts)
        return text, final, interrupted

    def _reply(self, final: Final | None, interrupted: bool, content: str, reasoning: str) -> Reply:
        stats = TurnStats.from_final(final, self.n_ctx) if final is not None else TurnStats(n_ctx=self.n_ctx)
        cancelled = interrupted or (final is not None and final.stop_type == "cancelled")
        return Reply(content, final, cancelled, stats, reasoning)

    def reply(self, on_text: Callable[[str], None], on_thought: Callable[[str], None] | None = None) -> Reply:
        """Answer the conversation's last user turn and append the answer to it.

        Interrupted: the user turn stays; the partial answer, when there is any text, is kept
        as the assistant turn (so the prompt cache still matches and /retry can replace it).
        """
        task = self.submit()
        r = self.stream(task, on_text, on_thought)
        if r.content.strip():
            self.conversation.add_assistant(r.content)
        return r


class _Shown:
    """What of a streamed reply has been shown: its thoughts and its answer, each passed on
    once (the splitter holds back a partial tag)."""

    def __init__(
        self, splitter: ReasoningSplitter, on_text: Callable[[str], None], on_thought: Callable[[str], None] | None
    ) -> None:
        self.splitter = splitter
        self.on_text = on_text
        self.on_thought = on_thought
        self.n_text = 0
        self.n_thought = 0
        self.text = ""

    def piece(self, piece: str) -> None:
        self.text += piece
        self.update(self.text, final=False)

    def update(self, text: str, final: bool) -> None:
        s = self.splitter.split(text, final)
        if len(s.reasoning) > self.n_thought:
            if self.on_thought is not None:
                self.on_thought(s.reasoning[self.n_thought :])
            self.n_thought = len(s.reasoning)
        if len(s.content) > self.n_text:
            self.on_text(s.content[self.n_text :])
            self.n_text = len(s.content)
