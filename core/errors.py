"""Exception hierarchy shared by the engine; drivers map these to exit codes and HTTP errors."""

from __future__ import annotations


class LlamaError(Exception):
    """Base class of every error the engine raises on purpose."""

    exit_code: int = 1


class ModelLoadError(LlamaError):
    """The model file cannot be used: missing, not a GGUF, truncated, inconsistent."""

    exit_code = 2

    def __init__(self, path: str, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class UnsupportedArchitecture(ModelLoadError):
    """`general.architecture` names a model family we have no module for."""


class UnsupportedTensorType(ModelLoadError):
    """A tensor is stored in a ggml type we cannot dequantize."""


class TokenizerError(LlamaError):
    """The vocabulary cannot be used (unknown tokenizer model or pre-tokenizer, bad data)."""

    exit_code = 2


class InvalidRequest(LlamaError):
    """A caller asked for something impossible (bad parameter, prompt longer than the context)."""

    exit_code = 1


class SlotBusy(LlamaError):
    """A slot operation (save, restore, erase) needs an idle slot."""


class ContextOverflow(InvalidRequest):
    """The prompt does not fit the context window."""

    def __init__(self, n_prompt_tokens: int, n_ctx: int) -> None:
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(
            f"the prompt has {n_prompt_tokens} tokens, more than the context size ({n_ctx})"
        )
