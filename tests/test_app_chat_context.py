"""Chats kept warm, on the real window and engine (default model, greedy, short replies): a chat's
context is saved as segments after each reply and restored when it is opened again, after a
restart too; edits branch; deleting removes; damage and a full disk never hurt the chat."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from app_fixtures import open_window, wait_until

from hearth.engine.chat.preset_format import Preset, check_sampling

SYSTEM = "You are a helpful assistant. Answer in one short sentence."
GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 8})


def setup_window(dirs):
    w = open_window(*dirs)
    if w.presets.get("warm-greedy") is None:
        w.presets.add(Preset("warm-greedy", "Warm greedy", SYSTEM, [], dict(GREEDY)))
        w._fill_presets()
    w.select_preset("warm-greedy")
    wait_until(lambda: not w.client.busy)
    return w


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("warm")
    return d / "data", d / "cache"


@pytest.fixture(scope="module")
def window(qapp, dirs):
    w = setup_window(dirs)
    yield w
    w.close()


class Reports:
    """The worker's chatContext reports while the block runs."""

    def __init__(self, w):
        self.w, self.got = w, []

    def __enter__(self):
        self.w.client.worker.chatContext.connect(self.got.append)
        return self

    def __exit__(self, *exc):
        self.w.client.worker.chatContext.disconnect(self.got.append)

    def of(self, action):
        return [r for r in self.got if r.get("action") == action]


def send(w, text: str) -> dict:
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    try:
        w.messageInput.setPlainText(text)
        w.send()
        wait_until(lambda: got, 120)
        wait_until(lambda: not w.client.busy, 60)  # the save after the reply
    finally:
        w.conversation.replyFinished.disconnect(got.append)
        w.conversation.replyFailed.disconnect(got.append)
    assert isinstance(got[0], dict), f"the reply failed: {got[0]}"
    return got[0]


def open_chat(w, chat_id):
    w._show_chat(chat_id)
    wait_until(lambda: not w.client.busy, 120)


def chat_images(w):
    return w.client.worker.backend.local._chat_contexts().images


def last_reply(w) -> str:
    return w.chats.messages(w.conversation.chat_id)[-1].content


def test_switch_away_and_back_restores_and_replies_as_a_recompute(window):
    w = window
    w.new_chat()
    a = w.conversation.chat_id
    send(w, "Name a colour.")
    send(w, "Name a fruit.")
    w.new_chat()
    send(w, "Name an animal.")
    with Reports(w) as r:
        open_chat(w, a)
    got = r.of("restored")
    assert got and got[0]["restored"] > 20, r.got
    assert w.statusPrefix.text().startswith("Restored chat context (") and " ms" in w.statusPrefix.text()
    send(w, "Name a city.")
    after_restore = last_reply(w)
    # the same turn from nothing: no images, nothing resident
    w.client.clear_cache()
    wait_until(lambda: not w.client.busy)
    w.client.worker.backend.local.engine.reset()
    w.regenerate()
    wait_until(lambda: not w.conversation.generating, 120)
    wait_until(lambda: not w.client.busy, 60)
    assert last_reply(w) == after_restore


def test_restart_and_reopen_restores(qapp, window, dirs):
    w = window
    w.new_chat()
    cid = w.conversation.chat_id
    send(w, "Say one word.")
    send(w, "Say two words.")
    w.settings.set("chat/last", cid)
    w.settings.sync()
    w2 = open_window(*dirs)
    try:
        assert w2.conversation.chat_id == cid
        r = w2.last_chat_context
        assert r is not None and r["action"] == "restored" and r["restored"] > 20, r
        assert "Restored chat context" in w2.statusPrefix.text()
    finally:
        w2.close()


def test_edit_an_early_message_branches_from_the_common_prefix(window):
    w = window
    w.new_chat()
    send(w, "Say yes.")
    send(w, "Say no.")
    send(w, "Say maybe.")
    images = chat_images(w)
    before = {e.name for e in images.root.glob("*.hps")}
    with Reports(w) as r:
        assert w.conversation.send("Say perhaps.", w.current_preset().id, edit_row=2)  # the 2nd user message
        wait_until(lambda: not w.conversation.generating, 120)
        wait_until(lambda: not w.client.busy, 60)
    saved = [x for x in r.of("saved") if x.get("bytes")]
    assert saved, r.got
    after = {e.name for e in images.root.glob("*.hps")}
    assert before <= after  # the old branch stays; only the edited part was written
    new = after - before
    assert len(new) == 1
    per_token = 2 * 30 * 3 * 64 * 4
    assert saved[-1]["bytes"] < (saved[-1]["tokens"] - 20) * per_token  # not the whole chat again


def test_delete_a_chat_removes_its_segments_not_the_preset(window):
    w = window
    w.new_chat()
    cid = w.conversation.chat_id
    send(w, "Say hi.")
    images = chat_images(w)
    rows = {c["owner"]: c for c in images.chats()}
    assert str(cid) in rows and rows[str(cid)]["size"] > 0
    panel = w.open_cache_panel()
    wait_until(lambda: any(panel.table.item(r, 0).text() == "Chat: Say hi."
                           for r in range(panel.table.rowCount())), 30)
    row = next(r for r in range(panel.table.rowCount()) if panel.table.item(r, 0).text() == "Chat: Say hi.")
    # Tokens: those its segments hold (the preset's prefix has its own row); the chat's length in the tooltip
    assert panel.table.item(row, 1).text() == "SmolLM2-135M-Instruct" and int(panel.table.item(row, 2).text()) > 5
    assert int(panel.table.item(row, 2).toolTip().split("the chat is ")[1].split()[0].replace(",", "")) > 20
    panel.close()
    presets_before = list(images.root.glob("*.hpx"))
    w.delete_chat(cid)
    wait_until(lambda: str(cid) not in {c["owner"] for c in images.chats()}, 30)
    assert list(images.root.glob("*.hpx")) == presets_before and presets_before


def test_corrupt_middle_segment_is_recomputed_from_there(qapp, window, dirs):
    w = window
    w.new_chat()
    cid = w.conversation.chat_id
    images = chat_images(w)
    # A chain of three segments needs two exchanges in a row whose reply, cut by the token budget,
    # tokenizes back to the ids the model generated; where one does not (the model's split of a
    # word is not the tokenizer's), the next save starts a new chain from the prefix, as it should.
    # So the chat goes on until it has three, within six exchanges.
    chain = []
    for q in ("Say A.", "Say B.", "Say C.", "Say D.", "Say E.", "Say F."):
        send(w, q)
        chain = json.loads((images.root / "chats" / f"{cid}.json").read_text())["chain"]
        if len(chain) >= 3:
            break
    assert len(chain) >= 3
    middle = images.segment_path(chain[1])
    raw = bytearray(middle.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    middle.write_bytes(bytes(raw))
    w.new_chat()
    send(w, "Something else.")
    with Reports(w) as r:
        open_chat(w, cid)
    got = r.of("restored")
    assert got and got[0]["computed"] > 0 and got[0]["restored"] > 0, r.got
    assert not w.banner.isVisible() or "context" not in w.bannerLabel.text()
    send(w, "Say G.")   # the chat goes on


@pytest.fixture
def tiny_disk(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_while_saving_leaves_the_chat_and_says_not_saved(qapp, tmp_path, tiny_disk):
    w = setup_window((tmp_path / "data", tiny_disk))
    try:
        w.new_chat()
        send(w, "Say hi.")
        free = os.statvfs(tiny_disk)
        filler = tiny_disk / "filler"
        filler.write_bytes(b"\0" * max(0, free.f_bavail * free.f_frsize - 64 * 1024))
        with Reports(w) as r:
            stats = send(w, "Say bye.")
        failed = [x for x in r.of("saved") if not x["saved"]]
        assert failed and "space" in failed[0]["error"].lower(), r.got
        assert "Chat context not saved" in w.statusPrefix.text()
        assert stats.get("stop_reason") and last_reply(w)
        assert not [p for p in tiny_disk.iterdir() if p.name.endswith(".tmp")]
        filler.unlink()
        send(w, "Say again.")   # space again: saved
        assert "not saved" not in w.statusPrefix.text()
    finally:
        w.close()
