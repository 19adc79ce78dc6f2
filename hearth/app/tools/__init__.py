"""Tools and MCP: tool calls in a chat, their confirmation, the MCP servers."""
