"""The app's settings, declared once (type, default, description), kept in a QSettings INI file.

The file lives in the data directory (`data_dir()/settings.ini`), so `HEARTH_DATA_DIR` isolates it
(tests, portable installs) like the chats and presets.

Signals:
    changed(str): the name of a setting that was set to a new value.
"""

from __future__ import annotations

import json

from PySide6.QtCore import QObject, QSettings, Signal

from hearth.engine.paths import data_dir

# name: (type, default, description)
DECLARED: dict[str, tuple[type, object, str]] = {
    "window/rect": (list, [], "main window: frame x, y and client width, height"),
    "window/state": (bytes, b"", "main window toolbars/docks (saveState)"),
    "window/splitter": (bytes, b"", "sidebar/conversation splitter state"),
    "model/path": (str, "", "the model last loaded ('' = the default model)"),
    "model/recent": (list, [], "models opened from disk, most recent first, with their info"),
    "model/backend": (str, "auto", "auto | gpu | cpu"),
    "model/n_ctx": (int, 4096, "context size in tokens"),
    "model/kv_dtype": (str, "f32", "KV cache precision: f32 | f16 (half the memory and disk)"),
    "chat/last": (int, 0, "the chat open at exit"),
    "preset/last": (str, "assistant", "preset for new chats"),
    "ui/theme": (str, "system", "system | light | dark"),
    "ui/sampling_panel": (bool, True, "sampling panel shown"),
    "ui/sidebar": (bool, True, "chat list shown"),
    "cache/cap_gib": (float, 2.0, "prefix image cache cap in GiB"),
    "tools/allow_fetch": (bool, False, "the fetch_url tool may reach the network (off unless the user turns it on)"),
    "tools/fetch_allowed_hosts": (list, [], "hosts fetch_url may reach although they are this machine or a "
                                            "private network (a local wiki): host names as written in URLs"),
    "tools/max_rounds": (int, 5, "tool rounds per reply before the calls are no longer run"),
    "remote/servers": (list, [], "remote servers used, most recent first: {url, models, key}"),
    "remote/keys": (list, [], "API keys kept here when no system keyring is usable: {url, key}"),
    "mcp/servers": (list, [], "MCP tool servers: {name, command, args, env | url, token: keyring|settings|''}"),
    "mcp/keys": (list, [], "MCP servers' tokens kept here when no system keyring is usable: {url: name, key}"),
    "mcp/approved": (list, [], "stdio MCP server command lines the user approved to run"),
    "mcp/tools": (list, [], "each MCP server's tools as last listed: {server, name, description, left_out}"),
    "server/port": (int, 8080, "port of the app's own OpenAI-compatible server (127.0.0.1 only)"),
}


class Settings(QObject):
    changed = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self._q = QSettings(str(data_dir() / "settings.ini"), QSettings.Format.IniFormat)

    def get(self, name: str):
        typ, default, _ = DECLARED[name]
        v = self._q.value(name, None)
        if v is None:
            return default
        try:
            if typ is list:
                return json.loads(v) if isinstance(v, str) else list(v)
            if typ is bytes:
                return bytes(v.data()) if hasattr(v, "data") else bytes(v)
            if typ is bool:
                return v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")
            return typ(v)
        except (TypeError, ValueError):
            return default

    def set(self, name: str, value) -> None:
        typ = DECLARED[name][0]
        if self.get(name) == value:
            return
        if typ is list:
            self._q.setValue(name, json.dumps(value))
        elif typ is bytes:
            from PySide6.QtCore import QByteArray
            self._q.setValue(name, QByteArray(bytes(value)))
        else:
            self._q.setValue(name, value)
        self.changed.emit(name)

    def sync(self) -> None:
        self._q.sync()
