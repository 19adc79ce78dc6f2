"""Remembered remote servers and their API keys.

Servers are kept in the settings (`remote/servers`: [{"url", "models": [ids used], "key": "keyring" |
"settings" | ""}], most recent first). An API key goes to the platform keyring when the optional
`keyring` package is importable and has a usable backend (Secret Service, macOS Keychain, Windows
Credential Locker); otherwise it is written to the settings file in plain text (`remote/keys`:
[{"url", "key"}]), and the dialog says so before it is saved.

`KeyStore.get` is called from the engine worker thread when a remote model loads: it reads the
keyring (thread-safe) or an in-memory copy of the settings' keys, never QSettings itself.
"""

from __future__ import annotations

import logging
import threading

from ..store.settings import Settings

log = logging.getLogger(__name__)
SERVICE = "Hearth remote server"
MAX_SERVERS = 8


def usable_keyring():
    """The keyring module when it has a real backend, else None. `keyring` is optional: Hearth does
    not depend on it, and its 'fail' / null backends (no Secret Service running...) do not count."""
    try:
        import keyring
        from keyring.backends import fail
    except Exception:  # noqa: BLE001  not installed, or broken: the settings file is used
        return None
    try:
        kr = keyring.get_keyring()
    except Exception:  # noqa: BLE001
        return None
    name = type(kr).__module__ + "." + type(kr).__name__
    if isinstance(kr, fail.Keyring) or "null" in name.lower() or getattr(kr, "priority", 1) <= 0:
        return None
    return keyring


class KeyStore:
    """API keys per server URL: the keyring if usable, else the settings file (with a warning)."""

    def __init__(self, settings: Settings, keyring_module=..., service: str = SERVICE,
                 setting: str = "remote/keys"):
        self.settings = settings
        self.service, self.setting = service, setting
        self.keyring = usable_keyring() if keyring_module is ... else keyring_module
        self._lock = threading.Lock()
        self._plain: dict[str, str] = {e["url"]: e["key"] for e in settings.get(setting)
                                       if isinstance(e, dict) and e.get("url") and e.get("key")}

    @property
    def secure(self) -> bool:
        return self.keyring is not None

    def where(self) -> str:
        """Where a key is kept, in words (for the dialog)."""
        if self.keyring is not None:
            return f"the system keyring ({type(self.keyring.get_keyring()).__name__})"
        return "the settings file, in plain text"

    def get(self, url: str) -> str | None:
        """Any thread."""
        if self.keyring is not None:
            try:
                key = self.keyring.get_password(self.service, url)
                if key:
                    return key
            except Exception:
                log.warning("keyring read failed for %s", url, exc_info=True)
        with self._lock:
            return self._plain.get(url)

    def set(self, url: str, key: str) -> str:
        """GUI thread. Stores (or, with an empty key, forgets) the key; returns where it went:
        "keyring", "settings" or ""."""
        if not key:
            self.forget(url)
            return ""
        if self.keyring is not None:
            try:
                self.keyring.set_password(self.service, url, key)
                self._set_plain(url, None)
                return "keyring"
            except Exception:
                log.warning("keyring write failed for %s; keeping the key in the settings file", url,
                            exc_info=True)
        self._set_plain(url, key)
        return "settings"

    def forget(self, url: str) -> None:
        if self.keyring is not None:
            try:
                self.keyring.delete_password(self.service, url)
            except Exception:  # noqa: BLE001  there was none
                log.debug("no keyring entry for %s", url)
        self._set_plain(url, None)

    def _set_plain(self, url: str, key: str | None) -> None:
        with self._lock:
            if key is None:
                self._plain.pop(url, None)
            else:
                self._plain[url] = key
            entries = [{"url": u, "key": k} for u, k in self._plain.items()]
        self.settings.set(self.setting, entries)


class RemoteServers:
    """The remembered servers (GUI thread)."""

    def __init__(self, settings: Settings, keys: KeyStore | None = None):
        self.settings = settings
        self.keys = keys or KeyStore(settings)

    def all(self) -> list[dict]:
        return [s for s in self.settings.get("remote/servers") if isinstance(s, dict) and s.get("url")]

    def get(self, url: str) -> dict | None:
        return next((s for s in self.all() if s["url"] == url), None)

    def remember(self, url: str, model: str, key: str) -> str:
        """Put `url` first with `model` first among its models; store its key. Returns where the key
        went ("keyring", "settings" or "")."""
        where = self.keys.set(url, key)
        old = self.get(url) or {}
        models = [model] + [m for m in old.get("models", []) if m != model]
        entry = {"url": url, "models": models[:MAX_SERVERS], "key": where}
        rest = [s for s in self.all() if s["url"] != url]
        self.settings.set("remote/servers", [entry] + rest[:MAX_SERVERS - 1])
        return where

    def forget(self, url: str) -> None:
        self.keys.forget(url)
        self.settings.set("remote/servers", [s for s in self.all() if s["url"] != url])
