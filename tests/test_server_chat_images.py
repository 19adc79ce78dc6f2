"""The server keeps conversations' contexts as chat segments: a client sending a conversation
again, after a server restart too, gets it restored, and /hearth/stats counts restored and computed
tokens."""

from __future__ import annotations

import httpx
from server_fixtures import hearth_server

from hearth.engine.prefix import PrefixStore
from hearth.engine.prefix.chat_images import ChatImages

MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "List three colours, comma separated, and nothing else."}]


def ask(server, messages) -> dict:
    r = httpx.post(f"{server.url}/chat/completions", timeout=120,
                   json={"messages": messages, "max_tokens": 8, "temperature": 0})
    r.raise_for_status()
    return r.json()


def stats(server) -> dict:
    return httpx.get(f"{server.url.removesuffix('/v1')}/hearth/stats", timeout=30).json()


def test_a_conversation_sent_again_after_a_restart_is_restored(tmp_path):
    store = PrefixStore(tmp_path)
    with hearth_server(chat_images=ChatImages(store)) as (server, _):
        first = ask(server, MESSAGES)
        reply = first["choices"][0]["message"]["content"]
        s = stats(server)
        assert s["counts"]["restored_tokens"] == 0 and s["counts"]["computed_tokens"] > 10
    assert list(tmp_path.glob("*.hps"))
    follow = MESSAGES + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Again."}]
    with hearth_server(chat_images=ChatImages(PrefixStore(tmp_path))) as (server, _):  # restarted
        again = ask(server, follow)
        s = stats(server)
        assert s["counts"]["restored_tokens"] > 20, s
        assert s["generations"][-1]["computed_tokens"] < 15, s
        assert again["choices"][0]["message"]["content"]
    with hearth_server() as (server, _):  # the same turn computed from nothing
        assert ask(server, follow)["choices"][0]["message"]["content"] == again["choices"][0]["message"]["content"]
