"""The Models window from the real main window (menu and top-bar entry), against a local Hub on
127.0.0.1: a model downloaded there shows in the model picker, is loaded from "Use" and replies;
a file opened from disk joins the local models; last use is recorded."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app_fixtures import open_window, wait_until
from hub_fixtures import _no_hf_login, local_hub, split_llama, tiny_models  # noqa: F401
from test_app_models_window import _cell, _open_repo, _row, _select_file


@pytest.fixture
def window(qtbot, local_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", local_hub.endpoint)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "settings.ini").write_text("[model]\nbackend=cpu\nn_ctx=512\n")
    w = open_window(data, tmp_path / "cache")
    yield w
    w.close()


def test_menu_and_top_bar_open_the_models_window(qtbot, window):
    w = window
    assert w.library.window is None  # nothing of the Hub is made before the user asks
    [action] = [a for m in w.menuBar().actions() for a in m.menu().actions() if a.text() == "Models…"]
    action.trigger()
    mw = w.library.window
    assert mw is not None and mw.isVisible()
    mw.close()
    w.modelsButton.click()
    assert w.library.window is mw and mw.isVisible()


def test_the_default_model_is_listed_on_this_computer_and_cannot_be_deleted(qtbot, window, default_model_path):
    w = window
    w.modelsButton.click()
    mw = w.library.window
    mw.tabs.setCurrentWidget(mw.local)
    names = [_cell(mw.local.table, i, 0) for i in range(mw.local.table.rowCount())]
    [row] = [i for i, n in enumerate(names) if n.endswith("(built in)")]
    assert mw.local.table.item(row, 0).toolTip().startswith(str(default_model_path.resolve()))
    mw.local.table.selectRow(row)
    assert mw.local.use_button.isEnabled() and mw.local.reveal_button.isEnabled()
    assert not mw.local.delete_button.isEnabled() and not mw.local.remove_button.isEnabled()
    mw.close()


def test_download_then_use_and_reply(qtbot, window, local_hub):
    w = window
    w.modelsButton.click()
    mw = w.library.window
    _open_repo(qtbot, mw, "llama", "Tiny-Llama-GGUF")
    _select_file(mw, "tiny-llama-Q8_0.gguf")
    mw.hub.download_button.click()
    row = _row(mw)
    qtbot.waitUntil(lambda: row.state == "done", timeout=60_000)
    path = str(w.library.registry.models_dir / "alice" / "Tiny-Llama-GGUF" / "tiny-llama-Q8_0.gguf")
    # The picker lists the downloaded model.
    i = w.modelPicker.findData(path)
    assert i >= 0 and w.modelPicker.itemText(i) == "tiny-llama · Q8_0"
    loaded = []
    w.modelReady.connect(loaded.append)
    mw.local.use_button.click()
    wait_until(lambda: loaded, 120)
    assert loaded[0]["path_setting"] == path and loaded[0]["arch"] == "llama"
    wait_until(lambda: not w.client.busy, 120)
    assert w.modelPicker.currentData() == path
    assert _cell(mw.local.table, 0, 5) == "just now"  # last use recorded
    # The downloaded model replies.
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    qtbot.keyClicks(w.messageInput, "Hello")
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    wait_until(lambda: got, 120)
    assert isinstance(got[0], dict), f"the reply failed: {got[0]}"
    assert got[0]["generated_tokens"] >= 1 and w.model_info["path_setting"] == path


def test_a_file_opened_from_disk_joins_the_local_models(qtbot, window, tiny_models, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog
    w = window
    f = tmp_path / "elsewhere" / "tiny-qwen2.gguf"
    f.parent.mkdir()
    f.write_bytes(tiny_models["qwen2"].read_bytes())
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(f), ""))
    loaded = []
    w.modelReady.connect(loaded.append)
    w.picker.open_file()
    wait_until(lambda: loaded, 120)
    wait_until(lambda: not w.client.busy, 120)
    [m] = w.library.registry.models()
    assert (str(m.path), m.source, m.facts.architecture) == (str(f), "opened", "qwen2") and m.last_used
    w.modelsButton.click()
    w.library.window.tabs.setCurrentIndex(1)
    assert _cell(w.library.window.local.table, 0, 2) == "qwen2"


def test_the_memory_figures_follow_the_kv_cache_precision(qtbot, window, local_hub):
    """The Hub tab's "needs about" counts the KV cache of the setting: switched to float16 from the
    window's menu, the figure drops by half the cache (engine.memory's KV part), and back."""
    from hearth.engine import memory
    w = window
    w.modelsButton.click()
    mw = w.library.window
    _open_repo(qtbot, mw, "qwen3", "Tiny-Qwen3-GGUF")
    row = _select_file(mw, "tiny-qwen3-Q4_K_M.gguf")
    qtbot.waitUntil(lambda: "tokens" in mw.hub.files.item(row, 3).toolTip(), timeout=20_000)
    [facts] = mw.hub._facts.values()
    need = lambda: mw.hub.files.item(row, 3).data(Qt.ItemDataRole.UserRole)  # noqa: E731
    n = min(512, facts.context_length or 512)
    kv = {d: memory.kv_part(facts.n_layer, facts.n_head_kv, facts.head_dim, facts.head_dim_v, n, d)
          for d in ("f32", "f16")}
    assert kv["f16"] * 2 == kv["f32"] > 0
    f32 = need()
    assert "KV cache float32" in mw.hub.files.item(row, 3).toolTip()
    wait_until(lambda: not w.client.busy, 120)
    w.kvDtypeActions["f16"].trigger()
    assert w.settings.get("model/kv_dtype") == "f16"
    assert need() == f32 - (kv["f32"] - kv["f16"])
    assert "KV cache float16" in mw.hub.files.item(row, 3).toolTip()
    assert mw.hub.need.text() == "tiny-qwen3-Q4_K_M.gguf " + mw.hub.files.item(row, 3).toolTip()
    wait_until(lambda: not w.client.busy, 120)
    w.kvDtypeActions["f32"].trigger()
    assert need() == f32
    wait_until(lambda: not w.client.busy, 120)


def test_a_models_window_opened_after_the_switch_shows_float16_figures(qtbot, window, local_hub):
    w = window
    w.settings.set("model/kv_dtype", "f16")
    w.modelsButton.click()
    mw = w.library.window
    _open_repo(qtbot, mw, "qwen3", "Tiny-Qwen3-GGUF")
    row = _select_file(mw, "tiny-qwen3-Q4_K_M.gguf")
    qtbot.waitUntil(lambda: "tokens" in mw.hub.files.item(row, 3).toolTip(), timeout=20_000)
    assert "KV cache float16" in mw.hub.files.item(row, 3).toolTip()
