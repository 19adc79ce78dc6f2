"""MCP (Model Context Protocol) tool servers through the official `mcp` SDK, client side only:
configurations and the `mcpServers` import, sessions on one background loop thread, an MCP tool
list as Hearth tool definitions and MCP results as ToolResults. The app decides when a server
runs; `python -m hearth.engine serve` never runs MCP tools (it returns tool calls to its client).
"""

from .config import McpConfigError, McpServerConfig, parse_mcp_servers
from .convert import MAX_RESULT_CHARS, McpTool, hearth_tools, tool_result
from .manager import CALL_TIMEOUT_S, START_TIMEOUT_S, McpError, McpManager

__all__ = ["CALL_TIMEOUT_S", "MAX_RESULT_CHARS", "McpConfigError", "McpError", "McpManager", "McpServerConfig",
           "McpTool", "START_TIMEOUT_S", "hearth_tools", "parse_mcp_servers", "tool_result"]
