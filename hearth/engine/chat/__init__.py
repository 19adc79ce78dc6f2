"""How a chat becomes a prompt: chat templates, a turn's prompt, presets, thinking, context policy."""
