"""The tools a chat can call: built-in ones with implementations, and a preset's custom ones.

    registry = ToolRegistry.builtin()                       # every built-in tool
    registry = ToolRegistry.for_tool_set(preset_tools)      # a preset's tool set (JSON definitions)
    registry = ToolRegistry.for_tool_set(tools, {"add": run})  # ... with runs for some (MCP tools)
    registry.definitions()                                  # what render_chat(tools=...) gets
    result = registry.execute(call, ToolContext(...))       # ToolResult(content, is_error), never raises

A tool in a preset's tool set whose name is a built-in's gets the built-in implementation (with
the built-in's definition, so the schema the model sees is the one the code accepts). Any other
tool has no implementation: `needs_user_result(name)` is True and the app asks the user to type
the result (through `ToolContext.ask_user` when it gives one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from .builtins import BUILTIN_TOOLS, ToolContext, ToolError
from .parser import MalformedToolCall, ToolCall
from .schema import normalize_tool_definition, validate_arguments, validate_tool_set

# Built-ins that reach outside the chat are left out unless asked for by name.
DEFAULT_BUILTINS = ("calculator", "current_datetime", "convert_units")


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class Tool:
    definition: dict                                         # the wrapped JSON-Schema definition
    run: Callable[[dict, ToolContext], str] | None = None    # None: the user supplies the result

    @property
    def name(self) -> str:
        return self.definition["function"]["name"]

    @property
    def needs_user_result(self) -> bool:
        return self.run is None


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t

    @classmethod
    def builtin(cls, names: Iterable[str] = DEFAULT_BUILTINS) -> ToolRegistry:
        """The built-in tools named (default: calculator, current_datetime, convert_units;
        read_file and fetch_url only when named, and fetch_url still needs ToolContext.allow_fetch)."""
        tools = []
        for n in names:
            if n not in BUILTIN_TOOLS:
                raise ValueError(f"no built-in tool {n!r}; the built-ins are {', '.join(BUILTIN_TOOLS)}")
            definition, run = BUILTIN_TOOLS[n]
            tools.append(Tool(normalize_tool_definition(definition), run))
        return cls(tools)

    @classmethod
    def for_tool_set(cls, definitions: list, runs: dict | None = None) -> ToolRegistry:
        """A preset's tool set: names in `runs` get that implementation (with the definition as
        given), built-in names the built-in's, the rest need the user.
        Raises ToolSchemaError for an invalid definition."""
        tools = []
        runs = runs or {}
        for d in validate_tool_set(definitions):
            name = d["function"]["name"]
            if name in runs:
                tools.append(Tool(d, runs[name]))
            elif name in BUILTIN_TOOLS:
                definition, run = BUILTIN_TOOLS[name]
                tools.append(Tool(normalize_tool_definition(definition), run))
            else:
                tools.append(Tool(d, None))
        return cls(tools)

    def definitions(self) -> list[dict]:
        return [t.definition for t in self._tools.values()]

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def needs_user_result(self, name: str) -> bool:
        t = self._tools.get(name)
        return t is not None and t.needs_user_result

    def execute(self, call: ToolCall | MalformedToolCall, context: ToolContext | None = None) -> ToolResult:
        """Run one call. Every failure (a malformed call, an unknown tool, arguments failing the
        schema, the tool's own error, even a bug in a tool) is an error result for the model."""
        context = context or ToolContext()
        if isinstance(call, MalformedToolCall):
            return error_result(call)
        tool = self._tools.get(call.name)
        if tool is None:
            return ToolResult(f"Error: there is no tool named {call.name!r}; the tools are: "
                              f"{', '.join(self._tools) or 'none'}", True)
        errors = validate_arguments(call.arguments, tool.definition["function"]["parameters"])
        if errors:
            return ToolResult(f"Error: wrong arguments for {call.name}: " + "; ".join(errors), True)
        if tool.run is None:
            if context.ask_user is None:
                return ToolResult(f"Error: {call.name} has no implementation and no one gave its "
                                  "result", True)
            answer = context.ask_user(call)
            if answer is None:
                return ToolResult(f"Error: the user declined to give a result for {call.name}", True)
            return ToolResult(str(answer))
        try:
            return ToolResult(tool.run(call.arguments, context))
        except ToolError as e:
            return ToolResult(f"Error: {e}", True)
        except Exception as e:      # a bug in a tool must not take the chat down
            return ToolResult(f"Error: {call.name} failed unexpectedly ({type(e).__name__}: {e})", True)


def error_result(call: MalformedToolCall) -> ToolResult:
    """The result sent back to the model for a malformed call, so it can try again."""
    return ToolResult(f"Error: your tool call could not be used: {call.error}. Write a tool call "
                      'as a JSON object {"name": <tool name>, "arguments": {<argument>: <value>}}.',
                      True)
