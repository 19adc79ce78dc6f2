"""Presets: which preset the open chat uses, the preset manager, the sampling panel and the prefix
cache panel.

Owns: `preset_choice.PresetChoice` (the top bar's preset box, the sampling panel showing the
chosen preset, the prefix made resident on the worker, MCP approval), `preset_manager`
(create, edit, duplicate, delete, reorder, import, export), `sampling_panel`, `cache_panel`.

Signals: PresetChoice.changed(), loadRequested(str), problem(str, str);
PresetManager.presetsChanged(str); SamplingPanel.samplingEdited(dict).

May import: `store/` (the presets file, item models), `tools/mcp_panel` (a preset's MCP
servers), the top-level `chat_source`; from the engine the presets format and context policies
(`engine/chat/`). Never `chat/` or `library/`.
"""
