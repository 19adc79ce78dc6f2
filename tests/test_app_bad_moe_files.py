"""The window asked to open damaged MoE files (File > Open model file…): an MXFP4 block with a NaN
scale, a top-k above the expert count, an expert tensor of the wrong shape. Each gives a banner
naming the file and the tensor or key, the previous model stays loaded and still replies."""

from __future__ import annotations

import pytest
from app_fixtures import open_window, wait_until
from gguf_patch import patch_metadata
from gguf_rewrite import replaced, rewrite
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

pytestmark = pytest.mark.slow


def bad_files(tmp_path, good):
    """(file, words the banner must show) for each damage."""
    return [
        (rewrite(good, tmp_path / "nan-scale.gguf", tensors=replaced("blk.0.ffn_up_exps.weight", poke=[17 * 40])),
         "tensor blk.0.ffn_up_exps.weight (MXFP4) has a bad block scale"),
        (patch_metadata(good, tmp_path / "top-k.gguf", "gpt-oss.expert_used_count", 9),
         "gpt-oss.expert_used_count is 9, more than gpt-oss.expert_count (8)"),
        (rewrite(good, tmp_path / "shape.gguf", tensors=replaced("blk.1.ffn_down_exps.weight", ne=(32, 128, 8))),
         "tensor blk.1.ffn_down_exps.weight has shape [32, 128, 8]"),
    ]


def test_damaged_moe_files_are_named_and_the_previous_model_stays(qtbot, tmp_path, reference_dir, monkeypatch):
    good = reference_dir / "tiny-next" / "gpt-oss" / "tiny-gpt-oss.gguf"
    w = open_window(tmp_path / "data", tmp_path / "cache")
    try:
        before = dict(w.model_info)
        opening = next(a for a in w.menuBar().actions()[0].menu().actions() if a.text() == "Open model file…")
        for path, words in bad_files(tmp_path, good):
            monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, p=path, **k: (str(p), ""))
            with qtbot.waitSignal(w.client.worker.modelFailed, timeout=60_000):
                opening.trigger()
            wait_until(w.banner.isVisible, 10)
            text = w.bannerLabel.text()
            assert text.startswith(f"Could not load the model: {path.name}: ") and words in text, text
            assert f"{before['name']} is still loaded" in text
            wait_until(lambda: not w.client.busy)
            assert w.model_info["name"] == before["name"]
            assert w.modelPicker.currentData() == before["path_setting"]
            w.banner.hide()
        w.new_chat()                                     # the previous model replies
        w.messageInput.setPlainText("Hello?")
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
        wait_until(lambda: not w.conversation.generating, 120)
        assert w.conversation.model.message(1).content.strip()
    finally:
        w.close()
