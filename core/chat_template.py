"""Public entry point for chat templates; the implementation lives in ``core/chat_templates/``."""

from llamacli.core.chat_templates import (
    BUILTIN_NAMES,
    ChatTemplate,
    ChatTemplateError,
    TemplateCaps,
    builtin_names,
    default_builtin,
    detect_builtin,
    format_builtin,
)

__all__ = [
    "BUILTIN_NAMES",
    "ChatTemplate",
    "ChatTemplateError",
    "TemplateCaps",
    "builtin_names",
    "default_builtin",
    "detect_builtin",
    "format_builtin",
]
