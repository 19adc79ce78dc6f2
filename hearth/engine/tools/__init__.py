"""Tool calling: parse calls from streamed model output, run built-in tools safely, and continue
the conversation with the results (the engine side). Never imports Qt.

    fmt = detect_format(template_source)                  # "hermes" | "llama3" | "generic"
    registry = ToolRegistry.for_tool_set(preset_tools)    # or ToolRegistry.builtin()
    parser = ToolCallParser(fmt, registry)
    for piece in streamed_text: events += parser.feed(piece)
    events += parser.finish()                             # TextDelta | ToolCall | MalformedToolCall
    # (small models invent the tool's result after a call: cancel generation at the first ToolCall)
    results = [registry.execute(c, ToolContext(...)) for c in calls]
    messages = messages_with_tool_round(messages, text, calls, results, format=fmt)
"""

from .builtins import BUILTIN_TOOLS, ToolContext, ToolError, html_to_text
from .calculator import CalculatorError, calculate, evaluate
from .conversation import messages_with_tool_round
from .parser import (FORMATS, Event, MalformedToolCall, TextDelta, ToolCall, ToolCallParser,
                     detect_format)
from .prompt import fallback_system_prompt
from .registry import DEFAULT_BUILTINS, Tool, ToolRegistry, ToolResult, error_result
from .schema import (ToolSchemaError, check_schema, normalize_tool_definition, validate_arguments,
                     validate_tool_set)
from .units import UnitError, convert, convert_units

__all__ = [
    "BUILTIN_TOOLS", "CalculatorError", "DEFAULT_BUILTINS", "Event", "FORMATS", "MalformedToolCall",
    "TextDelta", "Tool", "ToolCall", "ToolCallParser", "ToolContext", "ToolError", "ToolRegistry",
    "ToolResult", "ToolSchemaError", "UnitError", "calculate", "check_schema", "convert",
    "convert_units", "detect_format", "error_result", "evaluate", "fallback_system_prompt",
    "html_to_text", "messages_with_tool_round", "normalize_tool_definition", "validate_arguments",
    "validate_tool_set",
]
