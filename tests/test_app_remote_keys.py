"""API keys of remote servers: the platform keyring when one is usable, else the settings file.

The keyring path runs through the real `keyring` package (optional; skipped without it) with a
keyring backend that keeps passwords in memory, since no Secret Service / Keychain runs here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hearth.app.servers.remote_servers import SERVICE, KeyStore, RemoteServers, usable_keyring
from hearth.app.store.settings import Settings

keyring = pytest.importorskip("keyring")
from keyring.backend import KeyringBackend
from keyring.backends import fail


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self):
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.store.get((service, username))

    def set_password(self, service, username, password):
        self.store[(service, username)] = password

    def delete_password(self, service, username):
        self.store.pop((service, username))


@pytest.fixture
def memory_keyring():
    before = keyring.get_keyring()
    kr = MemoryKeyring()
    keyring.set_keyring(kr)
    yield kr
    keyring.set_keyring(before)


def test_without_a_usable_backend_keys_go_to_the_settings_file(qapp):
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        assert usable_keyring() is None
        keys = KeyStore(Settings())
    finally:
        keyring.set_keyring(before)
    assert not keys.secure and "plain text" in keys.where()
    assert keys.set("http://h:1/v1", "sk-1") == "settings"
    keys.settings.sync()
    assert "sk-1" in Path(keys.settings._q.fileName()).read_text()
    assert KeyStore(Settings(), None).get("http://h:1/v1") == "sk-1"   # read back from the file
    keys.forget("http://h:1/v1")
    assert Settings().get("remote/keys") == [] and keys.get("http://h:1/v1") is None


def test_a_usable_keyring_keeps_keys_out_of_the_settings_file(qapp, memory_keyring):
    assert usable_keyring() is keyring
    servers = RemoteServers(Settings())
    assert servers.keys.secure and "MemoryKeyring" in servers.keys.where()
    assert servers.remember("http://h:1/v1", "m1", "sk-secret") == "keyring"
    assert memory_keyring.store == {(SERVICE, "http://h:1/v1"): "sk-secret"}
    assert Settings().get("remote/keys") == []
    servers.settings.sync()
    assert "http://h:1/v1" in Path(servers.settings._q.fileName()).read_text()      # the server is remembered,
    assert "sk-secret" not in Path(servers.settings._q.fileName()).read_text()      # its key is not written there
    assert servers.get("http://h:1/v1") == {"url": "http://h:1/v1", "models": ["m1"], "key": "keyring"}
    assert KeyStore(Settings()).get("http://h:1/v1") == "sk-secret"
    servers.remember("http://h:1/v1", "m2", "sk-secret")
    assert servers.get("http://h:1/v1")["models"] == ["m2", "m1"]
    servers.forget("http://h:1/v1")
    assert memory_keyring.store == {} and servers.all() == []
