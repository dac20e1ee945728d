"""Chat templates: Jinja templates from GGUF files (sandboxed) and llama.cpp's built-in formats."""

from .builtin import BUILTIN_NAMES, format_builtin
from .caps import TemplateCaps
from .detect import default_builtin, detect_builtin
from .messages import ChatTemplateError
from .template import ChatTemplate, builtin_names, check_override

__all__ = [
    "BUILTIN_NAMES",
    "ChatTemplate",
    "ChatTemplateError",
    "TemplateCaps",
    "builtin_names",
    "check_override",
    "default_builtin",
    "detect_builtin",
    "format_builtin",
]
