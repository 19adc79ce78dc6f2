"""A hybrid (recurrent) model in the window: opened from disk, two turns of a chat, a new chat; the
preset's prefix gets a prefix image (K/V and recurrent state), and the chat its segments (each with
the recurrent state at its end), so it reopens warm after a restart."""

from __future__ import annotations

import pytest
from app_fixtures import open_window, wait_until

from hearth.engine.chat.preset_format import Preset, check_sampling

GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 5})
TIMEOUT = 120_000


@pytest.fixture(scope="module")
def window(qapp, tmp_path_factory):
    d = tmp_path_factory.mktemp("hearth-hybrid")
    w = open_window(d / "data", d / "cache")
    p = w.presets.add(Preset("hy-greedy", "Hybrid greedy", "Be brief.", [], dict(GREEDY)))
    w._fill_presets()
    w.select_preset(p.id)
    wait_until(lambda: not w.client.busy)
    yield w, d / "cache"
    w.close()


def send(w, text: str) -> dict:
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    w.messageInput.setPlainText(text)
    assert w.send()
    wait_until(lambda: got, 120)
    w.conversation.replyFinished.disconnect(got.append)
    w.conversation.replyFailed.disconnect(got.append)
    assert isinstance(got[0], dict), got[0]
    wait_until(lambda: not w.client.busy)
    return got[0]


def images(cache):
    return sorted(p.name for p in (cache / "prefixes").glob("*.hp[xs]")) if (cache / "prefixes").is_dir() else []


def test_chat_with_a_hybrid_model(qtbot, window, reference_dir):
    w, cache = window
    path = str(reference_dir / "tiny-next" / "qwen35" / "tiny-qwen35.gguf")
    pre = images(cache)
    w.picker.add_model(path)
    i = w.modelPicker.findData(path)
    assert i > 0
    with qtbot.waitSignal(w.picker.modelReady, timeout=TIMEOUT):
        w.modelPicker.activated.emit(i)
    wait_until(lambda: not w.client.busy)
    before = images(cache)
    w.new_chat()
    first = send(w, "Hello there")
    second = send(w, "And again?")            # the second turn goes back through the engine's snapshots
    w.new_chat()
    send(w, "A new chat")            # the preset's prefix: resident or restored
    assert "qwen35" in w.modelInfo.toolTip() + w.modelInfo.text()
    assert first["restored_tokens"] == second["restored_tokens"] == 0
    assert second["reused_tokens"] >= first["prompt_tokens"], "the second turn continues the resident state"
    names = images(cache)
    assert set(names) >= set(before) and any(n.endswith(".hpx") for n in set(names) - set(pre)), \
        "the preset's prefix image of the hybrid model"
    assert any(n.endswith(".hps") for n in set(names) - set(pre)), "the chat's segments, with their state"
