"""Every error the HTTP adapter returns, in llama-server's OpenAI-shaped JSON:

    {"error": {"code": 400, "message": "...", "type": "invalid_request_error", ...extra}}

`to_api_error` is the one place where engine exceptions become statuses; handlers raise
`ApiError` (or let engine errors propagate) and never build error bodies themselves.
"""

from __future__ import annotations

from typing import Any

from llamacli.core.text.chat_templates import ChatTemplateError
from llamacli.core.errors import SlotBusy
from llamacli.core.errors import ContextOverflow, InvalidRequest, LlamaError, TokenizerError
from llamacli.core.runtime.slot_store import SlotFileError

# llama-server's error_type names (server-common.h: format_error_response)
TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    500: "server_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


class ApiError(Exception):
    """An error response: HTTP status, message, llama-server's error type and extra fields."""

    def __init__(self, status: int, message: str, type: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or TYPE_BY_STATUS.get(status, "server_error")
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.status, "message": self.message, "type": self.type, **self.extra}}


def bad_request(message: str, **extra: Any) -> ApiError:
    return ApiError(400, message, **extra)


def not_supported(message: str) -> ApiError:
    return ApiError(501, message, "not_supported_error")


def no_multimodal(message: str) -> ApiError:
    """An image, audio or other media input: this server has no multimodal support. A 400, since
    the input, not the server, is what cannot be served (llama-server answers 500 without an
    mmproj)."""
    return ApiError(400, message)


LOADING = ApiError(503, "Loading model", "unavailable_error")


def cut_by_shutdown() -> ApiError:
    """What a task still running at shutdown ends with: a stream's error event (never a finish
    reason that reads like a finished answer), or a non-streamed request's 503."""
    return ApiError(503, "the server is shutting down: the answer was cut off before it finished", "unavailable_error")
INVALID_API_KEY = ApiError(401, "Invalid API Key", "authentication_error")


def to_api_error(exc: BaseException) -> ApiError:
    """Map an exception to its response. Unknown exceptions become a 500 whose message names
    the exception type only (the traceback goes to the server log, never to the client)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ContextOverflow):
        return ApiError(
            400,
            f"request ({exc.n_prompt_tokens} tokens) exceeds the available context size "
            f"({exc.n_ctx} tokens), try increasing it",
            "exceed_context_size_error",
            n_prompt_tokens=exc.n_prompt_tokens,
            n_ctx=exc.n_ctx,
        )
    if isinstance(exc, (InvalidRequest, ChatTemplateError, TokenizerError)):
        return ApiError(400, str(exc))
    if isinstance(exc, SlotBusy):
        return ApiError(409, str(exc))
    if isinstance(exc, SlotFileError):
        return ApiError(400, str(exc))
    if isinstance(exc, LlamaError):
        return ApiError(500, str(exc), "server_error")
    name = type(exc).__name__
    return ApiError(500, f"internal server error ({name}); see the server log", "server_error")
