"""What can go wrong around a tool call, as the drivers report it: an unknown tool (llama-server
answers 404), parameters of the wrong shape or a working directory outside the sandbox (400), and
a tool runtime this build cannot run (`--tools-runtime`, the `x-tool-runtime` header: 501).

A failure *inside* a call (a missing file, a refused path, a timed-out command) is not an
exception: it is the call's result, `{"error": "..."}`, which the model reads and may act on."""

from __future__ import annotations

from llamacli.core.errors import InvalidRequest, LlamaError


class UnknownTool(LlamaError):
    """No such tool, or it cannot stream."""


class ToolParamsError(InvalidRequest):
    """A call's params do not fit the tool's definition, or a header names a directory the
    sandbox refuses."""


class RuntimeUnsupported(InvalidRequest):
    """A tools runtime (container, SSH) that cannot be used here."""
