"""Tools and MCP: tool calls in the open chat (parse, confirm, run, continue), the bar that asks
before a tool runs, and the MCP tool servers the user added and approved.

Owns: `tool_flow.ToolFlow`, `tool_confirm.ToolConfirmBar`, `mcp_servers` (the servers, their
tokens, approved commands), `mcp_tools.McpTools` (the chosen preset's servers: start, stop, their
tools), `mcp_dialog`, `mcp_panel` (the preset manager's MCP row).

Signals: ToolFlow.confirmRequested(dict, str), confirmCleared(), recordsChanged(list),
roundDone(list); McpTools.toolsChanged(), notice(str), approvalNeeded(str, str).

May import: `store/settings`, `servers/remote_servers` (the key store); from the engine
`engine/tools/` and `engine/tools/mcp/`. Never `chat/`, `presets/` or the window.
"""
