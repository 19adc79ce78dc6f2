"""The real window on remote servers (issue 9, the app side), driven like a user.

End to end against Hearth's own server started here as a user would (`python -m hearth.engine serve` on
127.0.0.1, the default model, greedy, short replies), which is also killed mid-reply; against tiny
scripted servers for what Hearth never sends (garbage, 500s, tool calls, a slow listing); and the
window's own "Serve Hearth" toggle called with the official `openai` client.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from app_fixtures import STREAMING_PROMPT, wait_until
from PySide6.QtCore import Qt, QTimer
from server_fixtures import Reply, ScriptedServer, chunk, sse

from hearth.app.main import create_window
from hearth.engine.chat.preset_format import Preset, check_sampling
from hearth.app.servers.remote_source import parse_remote_path, remote_path
from hearth.app.servers.remote_ui import REMOTE_DIALOG

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = "You are a helpful assistant. Answer in one short sentence."
GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 10})
MODELS = {"object": "list", "data": [{"id": "scripted-model", "object": "model", "owned_by": "test"}]}
TIMEOUT = 120_000


class ServeProcess:
    """`python -m hearth.engine serve --port 0` in its own process, as a user runs it."""

    def __init__(self, log: Path):
        self.log = open(log, "w")  # noqa: SIM115  closed in kill()
        self.proc = subprocess.Popen([sys.executable, "-m", "hearth.engine", "serve", "--port", "0", "--no-presets",
                                      "--ctx", "1024", "--backend", "cpu"], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        end = time.monotonic() + 120
        line = ""
        while "Hearth server on " not in line:
            assert self.proc.poll() is None, f"the server exited: {log.read_text()}"
            assert time.monotonic() < end, "the server did not start"
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                line = self.proc.stdout.readline()
        self.url = line.split("Hearth server on ", 1)[1].split()[0]      # http://127.0.0.1:PORT/v1
        self.model = httpx.get(self.url + "/models").json()["data"][0]["id"]

    def stats(self) -> dict:
        return httpx.get(self.url.removesuffix("/v1") + "/hearth/stats").json()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = ServeProcess(tmp_path_factory.mktemp("serve") / "server.log")
    yield s
    s.kill()


@pytest.fixture(scope="module")
def window(qapp, tmp_path_factory):
    d = tmp_path_factory.mktemp("hearth-remote")
    old = {k: os.environ.get(k) for k in ("HEARTH_DATA_DIR", "HEARTH_CACHE_DIR")}
    os.environ["HEARTH_DATA_DIR"], os.environ["HEARTH_CACHE_DIR"] = str(d / "data"), str(d / "cache")
    try:
        w = create_window()
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    loaded = []
    w.modelReady.connect(loaded.append)
    w.show()
    wait_until(lambda: loaded, 120)
    wait_until(lambda: not w.client.busy, 120)
    p = w.presets.add(Preset("test-greedy", "Test greedy", SYSTEM, [], dict(GREEDY)))
    w._fill_presets()
    w.select_preset(p.id)
    wait_until(lambda: not w.client.busy)
    w.remote.servers.keys.keyring = None    # the platform's keyring stays untouched: the settings file is used
    yield w
    w.close()


@pytest.fixture
def scripted():
    s = ScriptedServer()
    yield s
    s.close()


def set_max_tokens(w, n: int) -> None:
    w.samplingPanel.boxes["max_tokens"].setValue(n)
    assert w.current_preset().sampling["max_tokens"] == n


def pick_in_model_picker(w, data: str) -> None:
    i = w.modelPicker.findData(data)
    assert i >= 0, f"{data!r} is not in the model picker"
    w.modelPicker.setCurrentIndex(i)
    w.modelPicker.activated.emit(i)


def use_remote(qtbot, w, url: str, api_key: str = ""):
    """"Remote server…" in the picker, type the address (and key), list, pick the first model, use it."""
    pick_in_model_picker(w, REMOTE_DIALOG)
    dlg = w.remote.dialog
    assert dlg.isVisible()
    dlg.urlEdit.clear()
    qtbot.keyClicks(dlg.urlEdit, url)
    dlg.keyEdit.clear()
    if api_key:
        qtbot.keyClicks(dlg.keyEdit, api_key)
    qtbot.mouseClick(dlg.listButton, Qt.MouseButton.LeftButton)
    wait_until(lambda: dlg.modelList.count() or dlg.status.property("kind") == "error", 30)
    assert dlg.modelList.count(), dlg.status.text()
    with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT) as loaded:
        qtbot.mouseClick(dlg.useButton, Qt.MouseButton.LeftButton)
    wait_until(lambda: not w.client.busy)
    return loaded.args[0]


def go_local(qtbot, w) -> None:
    if w.model_info.get("backend") == "remote":
        with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT):
            pick_in_model_picker(w, "")
        wait_until(lambda: not w.client.busy)


def type_and_send(qtbot, w, text: str) -> None:
    qtbot.keyClicks(w.messageInput, text)
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)


def reply(qtbot, w, text: str, timeout_s: float = 120):
    """Send `text`; returns the stats dict, or the error message of a failed reply."""
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    try:
        type_and_send(qtbot, w, text)
        wait_until(lambda: got, timeout_s)
    finally:
        w.conversation.replyFinished.disconnect(got.append)
        w.conversation.replyFailed.disconnect(got.append)
    return got[0]


# -- the serve toggle (first: the local model is loaded) ----------------------------------------------
def test_serve_toggle_gives_other_programs_the_apps_engine(qtbot, window):
    import openai
    w = window
    w.settings.set("server/port", 0)
    toggle = w.serveToggle
    assert not toggle.action.isChecked() and not toggle.statusLabel.isVisible(), "off by default"
    settings_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Settings")
    assert toggle.action in settings_menu.actions()
    toggle.action.trigger()
    url = toggle.url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert toggle.statusLabel.isVisible() and url in toggle.statusLabel.text()
    assert toggle.action.text() == f"Serve Hearth on 127.0.0.1:{url.split(':')[2].split('/')[0]}"
    out = {}

    def call():   # another program: the official client, on its own thread
        try:
            c = openai.OpenAI(base_url=url, api_key="unused")
            model = c.models.list().data[0].id
            out["stream"] = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=6, temperature=0,
                stream=True) if ch.choices)
            out["whole"] = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hi."}],
                                                     max_tokens=6, temperature=0)
        except Exception as e:  # noqa: BLE001
            out["error"] = e

    t = threading.Thread(target=call)
    t.start()
    wait_until(lambda: not t.is_alive(), 120)
    assert "error" not in out, out.get("error")
    assert out["stream"].strip() and out["whole"].choices[0].message.content == out["stream"]
    assert out["whole"].usage.completion_tokens == 6
    toggle.action.trigger()
    assert not toggle.statusLabel.isVisible() and toggle.url == ""
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/models", timeout=2)
    # The window's own chat still works on the engine the server shared.
    w.new_chat()
    assert isinstance(reply(qtbot, w, "Say hello."), dict)


# -- a remote Hearth server ---------------------------------------------------------------------------
def test_remote_server_dialog_lists_models_and_the_chat_streams_from_it(qtbot, window, served):
    w = window
    info = use_remote(qtbot, w, served.url.removesuffix("/v1"))      # "http://host:port" is enough
    assert info["backend"] == "remote" and info["name"] == served.model
    assert w.model_info["path_setting"] == remote_path(served.url, served.model)
    assert w.modelInfo.text() == f"remote · {served.url.split('//')[1].removesuffix('/v1')}"
    assert not w.backendPicker.isVisible()
    assert not w.samplingPanel.boxes["top_k"].isEnabled() and w.samplingPanel.boxes["temperature"].isEnabled()
    assert w.modelPicker.currentData() == remote_path(served.url, served.model)   # remembered in the picker
    assert w.settings.get("remote/servers")[0]["url"] == served.url
    assert "your messages are sent there" in w.messageView.empty.text()

    w.new_chat()
    seen = []
    w.conversation.model.dataChanged.connect(lambda a, b, r: seen.append(w.conversation.model.index(a.row()).data()))
    set_max_tokens(w, 48)
    stats = reply(qtbot, w, STREAMING_PROMPT)   # many tokens: they span several of the view's flushes
    assert isinstance(stats, dict), stats
    text = w.conversation.model.message(1).content
    grown = [t for t in seen if t and t != text]
    assert text.strip() and grown and all(text.startswith(t) for t in grown), "streamed in pieces, in order"
    assert stats["remote"] and 1 < stats["generated_tokens"] <= 48 and stats["decode_tps"] > 0
    assert stats["prompt_tokens"] > 0 and "tok/s" in w.messageView.bubbles()[1].stats.text()
    assert "decode" in w.statusSpeed.text()
    # The system prompt goes with every request, and the server's prefix cache does the reuse.
    last = served.stats()["generations"][-1]
    assert last["prompt_tokens"] == stats["prompt_tokens"]
    stats2 = reply(qtbot, w, "And of Italy?")
    assert stats2["reused_tokens"] >= stats["prompt_tokens"], (stats, stats2)
    assert w.statusPrefix.text() == (f"Prefix cached by server: {stats2['reused_tokens']} tokens reused of "
                                     f"{stats2['prompt_tokens']}")
    assert [m.role for m in w.chats.messages(w.conversation.chat_id)] == ["user", "assistant"] * 2
    set_max_tokens(w, GREEDY["max_tokens"])


def test_stop_closes_the_stream_and_regenerate_and_edit_work(qtbot, window, served):
    w = window
    assert w.model_info.get("backend") == "remote"
    w.new_chat()
    set_max_tokens(w, 300)
    deltas = []
    w.client.worker.delta.connect(lambda rid, t: deltas.append(t))
    type_and_send(qtbot, w, "Write a long story about a dragon who learns to bake bread.")
    wait_until(lambda: len(deltas) >= 3)
    t0 = time.monotonic()
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT) as blocker:
        qtbot.mouseClick(w.stopButton, Qt.MouseButton.LeftButton)
    assert time.monotonic() - t0 < 3
    assert blocker.args[0]["stop_reason"] in ("cancelled", "stopped")
    assert "stopped" in w.messageView.bubbles()[1].stats.text()
    # The server saw the client leave and stopped generating.
    wait_until(lambda: served.stats()["generations"][-1]["client_left"], 30)
    assert served.stats()["generations"][-1]["generated_tokens"] < 150
    set_max_tokens(w, GREEDY["max_tokens"])

    w.new_chat()
    assert isinstance(reply(qtbot, w, "Name a color."), dict)
    first = w.conversation.model.message(1).content
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
        qtbot.mouseClick(w.messageView.bubbles()[1].regenerateButton, Qt.MouseButton.LeftButton)
    assert w.conversation.model.rowCount() == 2 and w.conversation.model.message(1).content == first   # greedy
    qtbot.mouseClick(w.messageView.bubbles()[0].editButton, Qt.MouseButton.LeftButton)
    w.messageInput.selectAll()
    qtbot.keyClicks(w.messageInput, "Name a fruit.")
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    assert w.chats.messages(w.conversation.chat_id)[0].content == "Name a fruit."
    assert w.conversation.model.rowCount() == 2


def test_a_server_killed_mid_reply_is_a_message_and_the_text_is_kept(qtbot, window, served, tmp_path):
    w = window
    doomed = ServeProcess(tmp_path / "doomed.log")
    try:
        use_remote(qtbot, w, doomed.url)
        w.new_chat()
        set_max_tokens(w, 300)
        deltas = []
        w.client.worker.delta.connect(lambda rid, t: deltas.append(t))
        failed = []
        w.conversation.replyFailed.connect(failed.append)
        typed = "Tell me a long story about a lighthouse keeper."
        type_and_send(qtbot, w, typed)
        wait_until(lambda: len(deltas) >= 2)
        doomed.kill()
        wait_until(lambda: failed, 30)
    finally:
        doomed.kill()
    msg = failed[0]
    assert doomed.url in msg and ("connection broke" in msg or "stopped in the middle" in msg), msg
    bubble = w.messageView.bubbles()[1]
    assert bubble.error.isVisible() and bubble.error.text() == msg
    assert w.conversation.model.message(1).content, "what was streamed is kept"
    assert w.messageInput.toPlainText() == typed and w.editHint.isVisible()
    # Sending again to the dead server: a readable error, and the text is still there.
    msg2 = reply(qtbot, w, "")
    assert isinstance(msg2, str) and "cannot connect" in msg2 and "is the server running" in msg2
    assert w.messageInput.toPlainText() == typed
    # The app is fine: the other server answers, and the restored text is resent in place.
    info = use_remote(qtbot, w, served.url)
    assert info["name"] == served.model
    set_max_tokens(w, GREEDY["max_tokens"])
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    assert [m.role for m in w.conversation.model.messages()] == ["user", "assistant"]
    assert w.conversation.model.message(0).content == typed and not w.editHint.isVisible()
    assert w.messageInput.toPlainText() == ""


def test_a_remembered_remote_model_is_used_again_at_start(qtbot, qapp, served):
    from hearth.app.store.settings import Settings
    s = Settings()                       # HEARTH_DATA_DIR: this test's own (conftest)
    s.set("remote/servers", [{"url": served.url, "models": [served.model], "key": ""}])
    s.set("model/path", remote_path(served.url, served.model))
    s.sync()
    w = create_window()
    try:
        with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT) as loaded:
            w.show()
        assert loaded.args[0]["backend"] == "remote" and loaded.args[0]["name"] == served.model
        assert w.client.worker.backend.local.engine is None, "no local model was loaded"
        assert w.modelPicker.currentData() == remote_path(served.url, served.model)
        w.serveToggle.action.trigger()   # nothing local to serve: said, and the toggle stays off
        assert not w.serveToggle.action.isChecked() and "no local model" in w.bannerLabel.text()
        p = w.presets.add(Preset("test-greedy", "Test greedy", SYSTEM, [], dict(GREEDY)))
        w._fill_presets()
        w.select_preset(p.id)
        assert isinstance(reply(qtbot, w, "Say hello."), dict)
    finally:
        w.close()


# -- scripted servers ---------------------------------------------------------------------------------
def test_garbage_servers_give_readable_errors(qtbot, window, scripted):
    w = window
    # Not an API at all: the dialog says so and offers no model.
    scripted.script["html"] = Reply(b"<html><title>Welcome to nginx!</title></html>", ctype="text/html")
    pick_in_model_picker(w, REMOTE_DIALOG)
    dlg = w.remote.dialog
    dlg.urlEdit.clear()
    qtbot.keyClicks(dlg.urlEdit, scripted.url("html"))
    qtbot.keyClick(dlg.urlEdit, Qt.Key.Key_Return)
    wait_until(lambda: dlg.status.property("kind") == "error", 30)
    assert "did not answer JSON" in dlg.status.text() and "OpenAI-compatible" in dlg.status.text()
    assert dlg.modelList.count() == 0 and not dlg.useButton.isEnabled()
    dlg.reject()

    # Lists models, then fails: a 500, then a stream that is not JSON.
    scripted.script["bad"] = Reply(json.dumps(MODELS), ctype="application/json")
    use_remote(qtbot, w, scripted.url("bad"))
    w.new_chat()
    scripted.script["bad"] = Reply(b'{"error": {"message": "CUDA out of memory", "type": "server_error"}}',
                                   status=500, ctype="application/json")
    msg = reply(qtbot, w, "Hello there")
    assert isinstance(msg, str) and "answered 500" in msg and "CUDA out of memory" in msg, msg
    assert w.messageInput.toPlainText() == "Hello there"
    assert w.messageView.bubbles()[-1].error.text() == msg
    scripted.script["bad"] = Reply(b"data: {this is not json\n\n")
    with qtbot.waitSignal(w.conversation.replyFailed, timeout=TIMEOUT) as failed:
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    assert "not JSON" in failed.args[0], failed.args[0]
    assert w.messageInput.toPlainText() == "Hello there"
    assert [m.role for m in w.conversation.model.messages()] == ["user", "assistant"], "resent in place"
    scripted.script["bad"] = Reply(b"no events here", ctype="text/plain")
    with qtbot.waitSignal(w.conversation.replyFailed, timeout=TIMEOUT) as failed:
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    assert "not an event stream" in failed.args[0]
    assert w.isVisible() and w.sendButton.isVisible()


def test_a_silent_server_times_out_with_a_message(qtbot, window, scripted):
    w = window
    remote = w.client.worker.backend.remote
    remote.timeout = 1.0       # read at load: the next remote model gets it
    try:
        scripted.script["silent"] = Reply(json.dumps(MODELS), ctype="application/json")
        use_remote(qtbot, w, scripted.url("silent"))
        scripted.script["silent"] = Reply(sse(chunk({"content": "late"}), chunk(finish="stop")), hang=3.0)
        w.new_chat()
        t0 = time.monotonic()
        msg = reply(qtbot, w, "Are you there?")
        assert isinstance(msg, str) and "sent nothing for 1 s" in msg, msg
        assert time.monotonic() - t0 < 2.9
        assert w.messageInput.toPlainText() == "Are you there?"
    finally:
        remote.timeout = 120.0


def test_a_slow_first_token_from_a_server_shows_the_wait(qtbot, window, scripted):
    w = window
    scripted.script["slow"] = Reply(json.dumps(MODELS), ctype="application/json")
    use_remote(qtbot, w, scripted.url("slow"))
    scripted.script["slow"] = Reply(sse(chunk({"content": "Here."}), chunk(finish="stop")), hang=2.6)
    w.new_chat()
    got = []
    w.conversation.replyFinished.connect(got.append)
    try:
        type_and_send(qtbot, w, "Are you there?")
        wait_until(lambda: w.messageView.bubbles()[-1].typing.isVisible(), 1)
        typing = w.messageView.bubbles()[-1].typing
        assert typing.text() == "…"
        wait_until(lambda: typing.text().startswith("waiting for the server… "), 2.5)
        seen = typing.text()
        wait_until(lambda: typing.text() != seen or got, 2.5)          # it counts on
        assert got or typing.text() in ("waiting for the server… 2 s", "waiting for the server… 3 s"), typing.text()
        wait_until(lambda: got, 30)
    finally:
        w.conversation.replyFinished.disconnect(got.append)
    assert not typing.isVisible() and w.messageView.bubbles()[-1].text() == "Here."


def test_listing_models_never_blocks_the_window(qtbot, window, scripted):
    w = window
    scripted.script["slow"] = Reply(json.dumps(MODELS), ctype="application/json", hang=1.5)
    pick_in_model_picker(w, REMOTE_DIALOG)
    dlg = w.remote.dialog
    dlg.urlEdit.setText(scripted.url("slow"))
    ticks = []
    timer = QTimer(interval=20)
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start()
    t0 = time.monotonic()
    dlg.list_models()
    assert time.monotonic() - t0 < 0.3
    assert "Asking" in dlg.status.text()
    wait_until(lambda: dlg.modelList.count(), 30)
    timer.stop()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) > 20 and max(gaps) < 0.5, max(gaps)
    assert dlg.modelList.item(0).text() == "scripted-model"
    dlg.reject()


def test_api_key_is_sent_and_kept_with_a_warning_and_a_tool_round_runs(qtbot, window, scripted):
    w = window
    assert not w.remote.servers.keys.secure
    scripted.script["keyed"] = Reply(json.dumps(MODELS), ctype="application/json")
    pick_in_model_picker(w, REMOTE_DIALOG)
    dlg = w.remote.dialog
    dlg.urlEdit.setText(scripted.url("keyed"))
    dlg.keyEdit.clear()
    assert not dlg.keyNote.text()
    qtbot.keyClicks(dlg.keyEdit, "sk-test-123")
    assert "plain text" in dlg.keyNote.text() and dlg.keyNote.property("kind") == "warning"
    dlg.reject()
    use_remote(qtbot, w, scripted.url("keyed"), api_key="sk-test-123")
    assert "plain text" in w.bannerLabel.text() and w.banner.isVisible()
    assert {"url": scripted.url("keyed"), "key": "sk-test-123"} in w.settings.get("remote/keys")
    assert scripted.requests[-1][3].get("Authorization") == "Bearer sk-test-123"

    # A tool round in OpenAI's format: the preset's tools are sent, the server's call goes through the
    # app's tool flow (confirm, run), and the result goes back as a `tool` message.
    tools = json.loads((ROOT / "hearth" / "resources" / "toolsets" / "everyday.json").read_text())["tools"]
    p = w.presets.add(Preset("test-tools", "Test tools", SYSTEM, tools, dict(GREEDY)))
    w._fill_presets()
    w.select_preset(p.id)
    usage = {"prompt_tokens": 50, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 40}}
    scripted.script["keyed"] = Reply(sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "calculator", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"expression": "6*7"}'}}]}),
        chunk(finish="tool_calls"),
        {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "scripted-model", "choices": [],
         "usage": usage},
        "[DONE]"))
    w.new_chat()
    try:
        stats = reply(qtbot, w, "What is 6 times 7?")
        assert isinstance(stats, dict), stats
        body = scripted.requests[-1][2]
        assert body["tools"] == tools and body["messages"][0] == {"role": "system", "content": SYSTEM}
        assert body["stream"] is True and body["temperature"] == 0.0 and body["max_tokens"] == GREEDY["max_tokens"]
        assert stats["stop_reason"] == "tool_calls"
        assert w.statusPrefix.text() == "Prefix cached by server: 40 tokens reused of 50"
        wait_until(lambda: w.toolConfirm.isVisible(), 30)
        assert "calculator" in w.toolConfirm.text.text() and "6*7" in w.toolConfirm.text.text()
        scripted.script["keyed"] = Reply(sse(chunk({"content": "It is 42."}), chunk(finish="stop"), "[DONE]"))
        with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
            qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
        wait_until(lambda: not w.conversation.generating)
    finally:
        w.select_preset("test-greedy")
    sent = scripted.requests[-1][2]["messages"]
    assert sent[-2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'}}]}
    assert sent[-1] == {"role": "tool", "content": "42", "tool_call_id": "call_1"}
    msgs = w.chats.messages(w.conversation.chat_id)
    assert [m.role for m in msgs] == ["user", "assistant", "assistant"] and msgs[2].content == "It is 42."
    call = msgs[1].tool_calls[0]
    assert call["name"] == "calculator" and call["status"] == "allowed" and call["result"] == "42"
    assert "tool_calls" not in msgs[1].stats


def test_back_to_the_local_model(qtbot, window):
    w = window
    go_local(qtbot, w)
    assert w.model_info["backend"] in ("cpu", "gpu") and w.backendPicker.isVisible()
    assert parse_remote_path(w.model_info["path_setting"]) is None and w.samplingPanel.boxes["top_k"].isEnabled()
    assert "server" not in w.statusPrefix.text() and "remote" not in w.modelInfo.text()
    assert all(not str(r.get("path", "")).startswith("remote:") for r in w.settings.get("model/recent"))
    w.new_chat()
    assert isinstance(reply(qtbot, w, "Say hello."), dict)
