"""The Models window driven with pytest-qt against a local Hub on 127.0.0.1: search, a repository's
files, download with progress, a dropped connection, pause and resume after the window is gone,
a checksum mismatch, cancel, a full disk, a gated model without and with a token, the local list
(use, remove, delete with confirmation, reveal)."""

from __future__ import annotations

import hashlib

import pytest
from PySide6.QtGui import QDesktopServices

from hearth.app.library.models_window import ModelsWindow
from hearth.app.servers.remote_servers import KeyStore
from hearth.app.store.settings import Settings
from hearth.engine.library.registry import ModelRegistry
from hub_fixtures import _no_hf_login, local_hub, split_llama, tiny_models  # noqa: F401
from hub_server import Fault
from test_hub_download import small_disk  # noqa: F401

BIG = 10**12  # "available memory" for the fit column: everything fits


@pytest.fixture
def registry(tmp_path):
    r = ModelRegistry()
    r.set_models_dir(tmp_path / "models")
    return r


@pytest.fixture
def make_window(qtbot, local_hub, registry):
    made = []

    def make(keys=None):
        w = ModelsWindow(registry, keys=keys, endpoint=local_hub.endpoint, available=BIG)
        qtbot.addWidget(w)
        w.show()
        made.append(w)
        return w

    yield make
    for w in made:
        w.shutdown()


def _cell(table, row, col):
    return table.item(row, col).text()


def _open_repo(qtbot, w, query, repo_name):
    w.hub.query.setText(query)
    w.hub.search_button.click()
    qtbot.waitUntil(lambda: w.hub.repos.rowCount() > 0, timeout=20_000)
    row = next(i for i in range(w.hub.repos.rowCount()) if _cell(w.hub.repos, i, 0).startswith(repo_name))
    w.hub.repos.selectRow(row)
    qtbot.waitUntil(lambda: w.hub.files.rowCount() > 0, timeout=20_000)


def _select_file(w, name):
    row = next(i for i in range(w.hub.files.rowCount()) if _cell(w.hub.files, i, 0) == name)
    w.hub.files.selectRow(row)
    return row


def _row(w):
    [r] = w.downloads.rows.values()
    return r


def _download_llama(qtbot, w):
    """Search, open the tiny Llama's repository, download its model; the download's row."""
    _open_repo(qtbot, w, "llama", "Tiny-Llama-GGUF")
    _select_file(w, "tiny-llama-Q8_0.gguf")
    w.hub.download_button.click()
    return _row(w)


def test_search_open_and_files(qtbot, make_window):
    w = make_window()
    w.hub.query.setText("tiny")
    w.hub.search_button.click()
    qtbot.waitUntil(lambda: w.hub.repos.rowCount() == 5, timeout=20_000)
    assert [_cell(w.hub.repos, 0, c) for c in range(5)] == ["Tiny-Llama-GGUF", "alice", "500", "12", "2025-10-09"]
    assert _cell(w.hub.repos, 2, 0) == "Tiny-Gated-GGUF  (gated)"
    _open_repo(qtbot, w, "qwen3", "Tiny-Qwen3-GGUF")
    assert [_cell(w.hub.files, i, 0) for i in range(2)] == ["tiny-qwen3-Q4_K_M.gguf", "tiny-qwen3-IQ1_S.gguf"]
    assert [_cell(w.hub.files, 0, c) for c in (1, 2, 3, 4)] == ["12.4 MB", "Q4_K_M", "fits", "yes"]
    assert _cell(w.hub.files, 1, 4).startswith("no: its weights are IQ1_S")
    # at 760 px the long reason is cut (whole in the tooltip); the file names keep their room
    w.resize(760, 520)
    qtbot.wait(50)
    reason = w.hub.files.item(1, 4)
    assert reason.toolTip() and reason.toolTip() in reason.text()
    metrics = w.hub.files.fontMetrics()
    assert w.hub.files.columnWidth(4) < metrics.horizontalAdvance(reason.text())
    assert w.hub.files.columnWidth(0) > metrics.horizontalAdvance("tiny-qwen3-Q4_K_M.gguf")
    assert _cell(w.hub.files, 1, 3) == "—"
    row = _select_file(w, "tiny-qwen3-Q4_K_M.gguf")
    assert "reading its header…" in w.hub.files.item(row, 3).toolTip()     # its answer is on its way
    assert "reading its header…" in w.hub.need.text() and w.hub.cancel_button.isVisible()
    # The header is read from the Hub: the fit now counts the KV cache at the context length.
    qtbot.waitUntil(lambda: "tokens" in w.hub.files.item(row, 3).toolTip(), timeout=20_000)
    assert w.hub.download_button.isEnabled()
    _select_file(w, "tiny-qwen3-IQ1_S.gguf")
    assert not w.hub.download_button.isEnabled()


def test_download_use_and_the_local_list(qtbot, make_window, tiny_models, local_hub):
    local_hub.faults["tiny-llama-Q8_0.gguf"] = Fault(drop_after=4_000_000)  # dropped once, resumed
    w = make_window()
    changed, chosen, infos = [], [], []
    w.modelsChanged.connect(lambda: changed.append(1))
    w.modelChosen.connect(chosen.append)
    row = _download_llama(qtbot, w)
    row.bar.valueChanged.connect(lambda v: infos.append((v, row.info.text())))
    qtbot.waitUntil(lambda: row.state == "done", timeout=60_000)
    assert changed and infos and infos[-1][0] == 1000 and "MB of 12.1 MB" in infos[-1][1]
    assert len([r for r in local_hub.requests if r["server"] == "storage" and r["range"] != "bytes=0-"]) >= 1
    path = w.registry.models_dir / "alice" / "Tiny-Llama-GGUF" / "tiny-llama-Q8_0.gguf"
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(tiny_models["llama"].read_bytes()).digest()
    t = w.local.table
    assert t.rowCount() == 1
    assert [_cell(t, 0, c) for c in range(6)] == ["tiny-random-llama", "12.1 MB", "llama", "Q8_0", "8,192", "never"]
    assert w.local.selected().path == path  # selected after the download
    w.local.use_button.click()
    assert chosen == [str(path)]
    assert row.cancel.text() == "Dismiss"
    row.cancel.click()
    assert not w.downloads.rows and path.exists()


def test_pause_and_resume_in_a_new_window(qtbot, make_window, local_hub, tiny_models):
    local_hub.faults["tiny-llama-Q8_0.gguf"] = Fault(delay=0.01)
    w = make_window()
    row = _download_llama(qtbot, w)
    qtbot.waitUntil(lambda: row.bar.value() > 50, timeout=30_000)
    row.pause.click()
    qtbot.waitUntil(lambda: row.state == "paused", timeout=30_000)
    assert row.pause.text() == "Resume"
    w.shutdown()
    w.close()
    local_hub.faults.clear()
    w2 = make_window()  # as after a restart: the paused download is found on disk
    row2 = _row(w2)
    assert row2.state == "paused"
    # what is on disk shows: the bar where it stopped, and the bytes
    assert row2.bar.value() > 50 and row2.bar.isVisible()
    assert row2.info.text().startswith("paused at ") and " of " in row2.info.text()
    row2.pause.click()
    qtbot.waitUntil(lambda: row2.state == "done", timeout=60_000)
    ranges = [r["range"] for r in local_hub.requests if r["server"] == "storage"]
    assert ranges[-1] != "bytes=0-"
    assert w2.local.table.rowCount() == 1


def test_checksum_mismatch_is_said_and_nothing_kept(qtbot, make_window, local_hub):
    local_hub.faults["tiny-llama-Q8_0.gguf"] = Fault(corrupt=True)
    w = make_window()
    row = _download_llama(qtbot, w)
    qtbot.waitUntil(lambda: row.state == "failed", timeout=60_000)
    assert "does not match the Hub's SHA-256" in row.info.text() and "deleted" in row.info.text()
    assert not [p for p in w.registry.models_dir.rglob("*") if p.is_file()]
    assert w.local.table.rowCount() == 0


def test_cancel(qtbot, make_window, local_hub):
    local_hub.faults["tiny-llama-Q8_0.gguf"] = Fault(delay=0.01)
    w = make_window()
    row = _download_llama(qtbot, w)
    qtbot.waitUntil(lambda: row.bar.value() > 20, timeout=30_000)
    row.cancel.click()
    qtbot.waitUntil(lambda: not w.downloads.rows, timeout=30_000)
    assert not [p for p in w.registry.models_dir.rglob("*") if p.is_file()]


def test_disk_full_is_said(qtbot, make_window, registry, small_disk):
    registry.set_models_dir(small_disk / "models")
    (small_disk / "filler").write_bytes(b"\0" * (8 << 20))
    w = make_window()
    row = _download_llama(qtbot, w)
    qtbot.waitUntil(lambda: row.state == "failed", timeout=30_000)
    assert "GB more in" in row.info.text() and "free some space" in row.info.text()


def test_gated_without_then_with_a_token(qtbot, make_window, tiny_models):
    settings = Settings()
    keys = KeyStore(settings, keyring_module=None)
    w = make_window(keys)
    assert "settings file" in w.hub.token_note.text()
    _open_repo(qtbot, w, "gated", "Tiny-Gated-GGUF")
    _select_file(w, "tiny-gemma3-Q4_0.gguf")
    w.hub.download_button.click()
    row = _row(w)
    qtbot.waitUntil(lambda: row.state == "failed", timeout=30_000)
    assert "is gated" in row.info.text() and "token" in row.info.text()
    w.hub.token.setText("hf_good")
    [b for b in w.hub.findChildren(type(w.hub.search_button)) if b.text() == "Save token"][0].click()
    assert keys.get("huggingface-hub") == "hf_good" and w.hub.token.text() == ""
    row.pause.click()  # "Resume" on a failed download tries again
    qtbot.waitUntil(lambda: row.state == "done", timeout=60_000)
    # The token was remembered: a new window uses it.
    w2 = make_window(KeyStore(Settings(), keyring_module=None))
    assert w2.tasks.client.token == "hf_good"


def test_remove_delete_and_reveal(qtbot, make_window, registry, tiny_models, monkeypatch, tmp_path):
    a = registry.models_dir / "a" / "tiny-llama.gguf"
    a.parent.mkdir(parents=True)
    a.write_bytes(tiny_models["llama"].read_bytes())
    opened = tmp_path / "elsewhere.gguf"
    opened.write_bytes(tiny_models["qwen2"].read_bytes())
    registry.add_opened(opened)
    w = make_window()
    local = w.local
    assert local.table.rowCount() == 2
    opened_urls = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened_urls.append(url.toLocalFile()))
    local.select_path(opened)
    local.reveal_button.click()
    assert opened_urls == [str(tmp_path)]
    local.remove_button.click()
    assert local.table.rowCount() == 1 and opened.exists()
    local.select_path(a)
    monkeypatch.setattr(local, "confirm_delete", lambda m: False)
    local.delete_button.click()
    assert a.exists() and local.table.rowCount() == 1
    monkeypatch.setattr(local, "confirm_delete", lambda m: True)
    local.delete_button.click()
    assert not a.exists() and local.table.rowCount() == 0


def test_a_model_hearth_cannot_run_is_marked_and_not_offered(qtbot, make_window, registry, tmp_path):
    from hub_fixtures import write_gguf
    write_gguf(registry.models_dir / "phi-Q4_0.gguf", arch="falcon")
    w = make_window()
    w.local.table.selectRow(0)
    assert "⚠" in _cell(w.local.table, 0, 0)
    assert not w.local.use_button.isEnabled()
    assert "architecture 'falcon' is not supported" in w.local.reason.text()
