"""The window on the tiny gpt-oss model (a copy carrying a harmony chat template whose generation
prompt opens the analysis channel): the reply streams into the thinking block, and the preset's
reasoning effort reaches the prompt. The tiny model's vocabulary is llama-bpe, so the harmony
markers are text, not tokens, and its reply is random text: all of it is the analysis channel."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from app_fixtures import open_window, wait_until
from PySide6.QtCore import Qt

from hearth.engine.gguf import GGUFFile
from hearth.engine.library.split_gguf import _raw_kvs, _string, _write_gguf
from hearth.engine.chat.preset_format import check_sampling

pytestmark = pytest.mark.slow
GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 12})
GGUF_STRING = 8


def with_template(src, dst, template: str):
    """A copy of the GGUF `src` with tokenizer.chat_template set (every other byte as it was)."""
    g = GGUFFile.open(src)
    keys = [k for k in g.metadata if k != "tokenizer.chat_template"]
    kvs = _raw_kvs(g, keys) + [_string("tokenizer.chat_template") + struct.pack("<I", GGUF_STRING) + _string(template)]
    with open(dst, "wb") as out:
        _write_gguf(out, g.version, kvs, list(g.tensors.values()), g.alignment)
    g.close()
    return dst


def test_the_analysis_channel_streams_into_the_thinking_block(qtbot, tmp_path, reference_dir, monkeypatch):
    template = (Path(__file__).parent / "data" / "templates" / "gpt-oss-harmony.jinja").read_text(encoding="utf-8")
    model = with_template(reference_dir / "tiny-next" / "gpt-oss" / "tiny-gpt-oss.gguf",
                          tmp_path / "tiny-gpt-oss-harmony.gguf", template)
    monkeypatch.setenv("HEARTH_MODEL", str(model))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "settings.ini").write_text("[model]\nn_ctx=512\n", encoding="utf-8")
    w = open_window(tmp_path / "data", tmp_path / "cache")
    try:
        dlg = w.open_preset_manager()   # the preset's reasoning effort, set in the preset manager
        qtbot.addWidget(dlg)
        pid = dlg.new_preset()
        dlg.nameEdit.setText("Thinks hard")
        dlg.systemEdit.setPlainText("Be brief.")
        for key, value in GREEDY.items():
            dlg.sampling.boxes[key].setValue(value)
        picker = dlg.reasoningPicker
        picker.setCurrentIndex(picker.findData("high"))
        assert picker.currentText() == "High" and dlg.has_unsaved_edits()
        assert dlg.save(), dlg.errorLabel.text()
        assert w.presets.get(pid).reasoning_effort == "high"
        dlg.close()
        w.select_preset(pid)
        wait_until(lambda: not w.client.busy)
        w.conversation.new_chat(pid)
        got = []
        w.conversation.replyFinished.connect(got.append)
        w.conversation.replyFailed.connect(got.append)
        qtbot.keyClicks(w.messageInput, "Hi there! How are you doing today?")
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
        wait_until(lambda: got, 120)
        assert isinstance(got[0], dict), got[0]
        reply = w.conversation.model.message(w.conversation.model.rowCount() - 1)
        th = reply.stats["thinking"]
        assert len(th["text"].strip()) > 5 and "<|channel|>" not in th["text"] and "<|message|>" not in th["text"]
        assert th["tokens"] >= got[0]["generated_tokens"] and not reply.content.strip()
        block = w.messageView.bubbles()[-1].thinking
        assert block.isVisible()
        qtbot.mouseClick(block.header, Qt.MouseButton.LeftButton)
        assert block.is_open and th["text"].strip()[:10] in block.body.text()
        prompt = w.client.worker.backend.engine.tokenizer.decode(w.client.worker.backend.engine.tokens)
        assert "Reasoning: high\n" in prompt and "# Instructions\n\nBe brief." in prompt
        assert "<|start|>assistant<|channel|>analysis<|message|>" in prompt
    finally:
        w.close()
