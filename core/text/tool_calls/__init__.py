"""OpenAI tool calling over any chat template: render `tools`, constrain the calls with a
grammar where asked, and parse the output back into `tool_calls` (whole or as stream deltas).

    setup = prepare_chat(template, messages, tools=..., tool_choice=..., parallel_tool_calls=...,
                         grammar=grammar_from_request(body), tokenizer=tokenizer)
    # TaskParams(grammar=setup.grammar, preserved_tokens=setup.preserved_tokens)
    parser = setup.parser(); deltas = parser.feed(partial.content); parser.finish()
    parser.message.to_openai(); parser.finish_reason(final.finish_reason)
"""

from llamacli.core.text.tool_calls.formats import FORMATS, detect_format, native_markers
from llamacli.core.text.tool_calls.call_grammar import (
    call_schema,
    generic_schema,
    tool_call_grammar,
)
from llamacli.core.text.tool_calls.parse import RawCall, Scan, scan
from llamacli.core.text.tool_calls.setup import ChatSetup, polyfill_messages, prepare_chat
from llamacli.core.text.tool_calls.stream import (
    Delta,
    ParsedMessage,
    ToolCall,
    ToolCallParser,
    mistral_call_id,
    parse_message,
    random_call_id,
)
from llamacli.core.text.tool_calls.tokens import PreservedPieces, preserving
from llamacli.core.text.tool_calls.tools import (
    Tool,
    ToolChoice,
    parse_parallel,
    parse_tool_choice,
    parse_tools,
)

__all__ = [
    "FORMATS",
    "ChatSetup",
    "Delta",
    "ParsedMessage",
    "PreservedPieces",
    "RawCall",
    "Scan",
    "Tool",
    "ToolCall",
    "ToolCallParser",
    "ToolChoice",
    "call_schema",
    "detect_format",
    "generic_schema",
    "mistral_call_id",
    "native_markers",
    "parse_message",
    "parse_parallel",
    "parse_tool_choice",
    "parse_tools",
    "polyfill_messages",
    "prepare_chat",
    "preserving",
    "random_call_id",
    "scan",
    "tool_call_grammar",
]
