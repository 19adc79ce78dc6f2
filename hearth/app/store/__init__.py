"""The stores and settings: chats and presets on disk, Qt item models over them, settings."""
