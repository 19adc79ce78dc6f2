"""Hearth's desktop window (PySide6). The engine (`engine/`) never imports this package."""
