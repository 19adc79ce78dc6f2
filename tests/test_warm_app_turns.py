"""Every turn reuses everything resident, through the app's own path (#29): LocalBackend (the calls
the window's worker makes: prepare the preset prefix, stream, save the chat) on every architecture's
tiny model, over a five-turn chat. A turn computes exactly the tokens its prompt does not share with
what the last reply left resident; where the prompt renders the reply otherwise than it was
generated (random weights write text that tokenizes back otherwise; a reasoning template drops the
thinking), the turn reports from where and how much, and a hybrid model goes back no further than
the previous prompt's end (its snapshot)."""

from __future__ import annotations

import pytest

from hearth.app.chat_source import LocalBackend
from hearth.engine.generation import common_prefix
from tests.tiny_archs import ALL, tiny_path

GREEDY = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "max_tokens": 4}
USER = ["Hello, who are you?", "Tell me about the sea.", "And the mountains?", "Why is that so?", "Thanks!"]


def turn(src, messages):
    src.prepare_prefix("Be brief.", [], lambda *a: None)
    prefix = src.engine.tokens          # the preset's prefix, before the first turn
    text, stats = "", None
    for ev in src.stream(messages, [], dict(GREEDY), lambda: False):
        text += ev.text
        if ev.final:
            stats = ev.stats
    src.save_chat()
    return text, stats, prefix


@pytest.mark.parametrize("name", ALL)
def test_each_turn_computes_only_what_is_not_resident(name, reference_dir, tmp_path, tmp_path_factory):
    src = LocalBackend(tmp_path / "cache", 1 << 30)
    src.load(str(tiny_path(name, reference_dir, tmp_path_factory)), "cpu", 512, lambda *a: None)
    try:
        src.switch_chat({"id": "1", "title": "t"})
        eng = src.engine
        messages, after, prompt_end = [{"role": "system", "content": "Be brief."}], None, 0
        for k, user in enumerate(USER):
            messages.append({"role": "user", "content": user})
            reply, st, prefix = turn(src, messages)
            after = prefix if after is None else after
            n = st["prompt_tokens"]
            common = common_prefix(after, eng.tokens[:n])
            where = (name, k, st)
            if common >= len(after) - 1:       # the prompt extends what was resident
                assert st["computed_tokens"] == n - common, where
                assert "rerendered" not in st, where
            else:
                assert st["rerendered"]["from"] == common and st["rerendered"]["dropped"] == len(after) - common
                low = prompt_end if getattr(eng.kv, "recurrent", False) else common
                assert n - common <= st["computed_tokens"] <= n - low, where
            after, prompt_end = eng.tokens, n
            messages.append({"role": "assistant", "content": reply})
    finally:
        src.engine.close()
