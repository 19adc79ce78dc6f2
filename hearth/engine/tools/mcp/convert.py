"""Between MCP and Hearth's tools: an MCP tool list becomes tool definitions (what the chat
template and the prefix image key see), an MCP call result becomes a ToolResult.

A tool keeps its own name unless another tool of the preset already has it; then it is named
`<server>_<name>`. A tool whose input schema Hearth cannot check is left out, with a note; a
description longer than MAX_DESCRIPTION_CHARS is cut, with a note.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..registry import ToolResult
from ..schema import NAME_RE, ToolSchemaError, normalize_tool_definition

MAX_RESULT_CHARS = 16 * 1024
MAX_DESCRIPTION_CHARS = 4096   # a server's description goes into every prompt of the preset: a page at most


@dataclass(frozen=True)
class McpTool:
    server: str
    mcp_name: str          # the name the server knows it by
    definition: dict       # the Hearth definition; its function name may carry the server prefix

    @property
    def name(self) -> str:
        return self.definition["function"]["name"]


def hearth_tools(server: str, listed: list, taken: set[str]) -> tuple[list[McpTool], list[str]]:
    """Definitions for a server's listed tools (mcp_types.Tool or plain dicts with name,
    description, inputSchema), none of them named like one in `taken` (which grows).
    Returns (tools, notes about the ones left out)."""
    out, notes = [], []
    for t in listed:
        d = t if isinstance(t, dict) else t.model_dump(by_alias=True, exclude_none=True)
        mcp_name = d.get("name", "")
        name = mcp_name if mcp_name not in taken else f"{server}_{mcp_name}"
        if name in taken or not NAME_RE.match(name):
            notes.append(f"{server}: tool {mcp_name!r} left out (its name collides or is not usable)")
            continue
        description = d.get("description") or d.get("title") or ""
        if isinstance(description, str) and len(description) > MAX_DESCRIPTION_CHARS:
            notes.append(f"{server}: tool {mcp_name!r}: its description of {len(description):,} characters was "
                         f"cut to {MAX_DESCRIPTION_CHARS:,}")
            description = description[:MAX_DESCRIPTION_CHARS] + "…"
        fn = {"name": name, "description": description,
              "parameters": d.get("inputSchema") or {"type": "object", "properties": {}}}
        try:
            definition = normalize_tool_definition({"type": "function", "function": fn}, f"{server}.{mcp_name}")
        except ToolSchemaError as e:
            notes.append(f"{server}: tool {mcp_name!r} left out ({e})")
            continue
        taken.add(name)
        out.append(McpTool(server, mcp_name, definition))
    return out, notes


def tool_result(result, max_chars: int = MAX_RESULT_CHARS) -> ToolResult:
    """A CallToolResult as the model reads it: text blocks joined; an image, audio or binary
    resource as a placeholder naming its type and size; an error flagged; cut at `max_chars`."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(block.data) * 3 // 4
            parts.append(f"[{kind}: {block.mime_type}, {size} bytes, not shown to the model]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if text is not None else f"[resource {res.uri}: {res.mime_type or 'binary'}, "
                                                       "not shown to the model]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content, not shown to the model]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n[... {len(text) - max_chars} more characters cut: the result was too long]"
    if result.is_error:
        return ToolResult(text if text.startswith("Error") else f"Error: {text or 'the tool failed'}", True)
    return ToolResult(text)


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\w*)(?:: (.*))?$")


def with_crash_text(result: ToolResult, server_log: str) -> ToolResult:
    """An error result that says only "Error executing tool X" (the SDK keeps a crashed tool's
    exception on the server's side) gets that exception's own text back from the traceback the
    server wrote to its stderr log during the call."""
    text = result.content
    if not re.fullmatch(r"(Error: )?Error executing tool [\w.-]+", text):
        return result
    found = ""
    for line in server_log.splitlines():
        m = _EXCEPTION_LINE.match(line.strip())
        if m and "Error executing tool" not in line and not line.startswith(" "):
            found = line.strip()
            if m.group(1).rsplit(".", 1)[-1] not in ("UnexpectedToolError", "ToolError"):
                break           # the first exception raised is the tool's own
    return ToolResult(f"{text}: {found}", True) if found else result
