"""The KV cache precision setting (Settings > KV cache precision) on the real window and engine: switching
it reloads the model with a cache of that dtype, the chat stays and goes on, its context is never
restored from images of the other dtype, float16 segments take half the bytes a token, and the choice
is remembered across a restart."""

from __future__ import annotations

import pytest
from app_fixtures import open_window, wait_until
from test_app_chat_context import Reports, last_reply, send, setup_window

from hearth.engine.prefix.format import DTYPE_F16, DTYPE_F32
from hearth.engine.prefix.segments import read_segment_header


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("kvdtype")
    return d / "data", d / "cache"


def segments(w) -> list:
    out = []
    for p in w.client.worker.backend.local._chat_contexts().images.root.glob("*.hps"):
        with open(p, "rb") as f:
            out.append(read_segment_header(f))
    return out


def switch(w, name: str) -> Reports:
    loaded = []
    w.modelReady.connect(loaded.append)
    try:
        with Reports(w) as r:
            w.kvDtypeActions[name].trigger()
            wait_until(lambda: loaded and not w.client.busy, 120)
    finally:
        w.modelReady.disconnect(loaded.append)
    assert loaded[0]["kv_dtype"] == name
    return r


def test_switching_the_kv_precision_reloads_keeps_the_chat_and_is_remembered(qapp, dirs):
    w = setup_window(dirs)
    try:
        eng = w.client.worker.backend.local.engine
        assert eng.kv_dtype == "f32" and w.kvDtypeActions["f32"].isChecked()
        kv32 = eng.kv.nbytes
        w.new_chat()
        cid = w.conversation.chat_id
        send(w, "Name a colour.")
        send(w, "Name a fruit.")
        assert {h.dtype for h in segments(w)} == {DTYPE_F32}

        r = switch(w, "f16")
        eng = w.client.worker.backend.local.engine
        assert eng.kv_dtype == "f16" and eng.kv.nbytes * 2 == kv32
        assert w.kvDtypeActions["f16"].isChecked() and w.settings.get("model/kv_dtype") == "f16"
        assert not r.of("restored"), r.got         # no float16 images yet: computed, never the float32 ones
        assert w.conversation.chat_id == cid and len(w.chats.messages(cid)) == 4
        st = send(w, "Name a city.")                # the chat goes on, on the float16 cache
        assert st.get("stop_reason") and last_reply(w).strip() and len(w.chats.messages(cid)) == 6
        f16 = [h for h in segments(w) if h.dtype == DTYPE_F16]
        f32 = [h for h in segments(w) if h.dtype == DTYPE_F32]
        assert f16 and f32
        per_token = lambda h: h.tensor_bytes / h.n_tokens  # noqa: E731
        assert per_token(f16[0]) * 2 == per_token(f32[0])

        w.settings.sync()
        w2 = open_window(*dirs)                      # remembered: the next start loads a float16 cache
        try:
            assert w2.model_info["kv_dtype"] == "f16" and w2.kvDtypeActions["f16"].isChecked()
            assert w2.client.worker.backend.local.engine.kv_dtype == "f16"
        finally:
            w2.close()

        r = switch(w, "f32")                         # back: the chat's float32 segments are used again
        got = r.of("restored")
        assert got and got[0]["restored"] > 20, r.got
        assert w.client.worker.backend.local.engine.kv.nbytes == kv32
        send(w, "Name a river.")
        assert len(w.chats.messages(cid)) == 8
    finally:
        w.close()
