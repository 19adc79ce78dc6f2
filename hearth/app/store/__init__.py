"""The stores and settings: chats and presets on disk, Qt item models over them, the app's settings.

Owns: `chat_store` (chats in SQLite, Qt-free), `chat_recovery` (reading a damaged database),
`export` (chats to and from files, Qt-free), `preset_store` and `preset_merge` (the presets file,
Qt-free), `item_models` (the Qt models the views show; changed on the GUI thread only),
`settings.Settings` (declared once, a QSettings INI file).

Signals: Settings.changed(str).

May import: the engine's Qt-free helpers (`engine/system/`, `engine/chat/preset_format`,
`engine/paths`). Nothing else of the app: every subsystem may import the stores.
"""
