"""The context-full policies (engine/chat/context_policy.py): on counted messages, then on the real
default model's template and tokenizer."""

from __future__ import annotations

import pytest

from hearth.engine import ContextFullError, Engine
from hearth.engine.chat.chat_turn import ChatTurn, prefix_text
from hearth.engine.chat.context_policy import exchanges, fit_messages, fit_turn, room_for_reply


def chat(n: int, system: bool = True) -> list[dict]:
    msgs = [{"role": "system", "content": "sys"}] if system else []
    for i in range(n):
        msgs += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    return msgs + [{"role": "user", "content": "last"}]


def count(msgs):   # ten tokens a message
    return 10 * len(msgs)


def test_a_chat_that_fits_is_untouched_under_every_policy():
    for policy in ("stop", "truncate_middle", "rolling_window"):
        f = fit_messages(chat(3), count, 100, 10, policy)
        assert f.messages == chat(3) and f.dropped == 0 and f.n_tokens == 80


def test_stop_refuses_with_what_to_do():
    with pytest.raises(ContextFullError, match=r"needs 120 tokens .* 10 more .* holds 100.*truncate the middle"):
        fit_messages(chat(5), count, 100, 10, "stop")


def test_rolling_window_keeps_the_system_prompt_and_the_latest_exchanges():
    f = fit_messages(chat(8), count, 100, 20, "rolling_window")   # 180 tokens, 80 may stay
    assert f.messages[0]["role"] == "system" and f.messages[-1]["content"] == "last"
    assert [m["content"] for m in f.messages] == ["sys", "q5", "a5", "q6", "a6", "q7", "a7", "last"]
    assert f.n_tokens == 80 <= 100 - 20 and f.dropped == 10


def test_truncate_middle_keeps_the_first_exchange_too():
    f = fit_messages(chat(8), count, 100, 20, "truncate_middle")
    assert [m["content"] for m in f.messages] == ["sys", "q0", "a0", "q6", "a6", "q7", "a7", "last"]


def test_truncate_middle_gives_up_the_first_exchange_before_refusing():
    f = fit_messages(chat(3), count, 50, 10, "truncate_middle")   # sys, the first exchange and the last
    assert [m["content"] for m in f.messages] == ["sys", "q0", "a0", "last"]
    f = fit_messages(chat(3), count, 40, 10, "truncate_middle")   # sys and the last only
    assert [m["content"] for m in f.messages] == ["sys", "last"]


def test_a_last_message_too_long_for_any_policy_is_refused():
    def big_last(msgs):
        return count(msgs) + (500 if msgs[-1]["content"] == "last" else 0)
    with pytest.raises(ContextFullError, match="the last message needs"):
        fit_messages(chat(4), big_last, 100, 10, "rolling_window")


def test_a_tool_round_stays_with_its_exchange():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
            {"role": "tool", "content": "42"}, {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"}]
    head, groups = exchanges(msgs)
    assert len(head) == 1 and [len(g) for g in groups] == [4, 1]


def test_an_unknown_policy_is_an_error():
    with pytest.raises(Exception, match="not one of"):
        fit_messages(chat(1), count, 100, 10, "forget_everything")


def test_room_for_reply_is_max_tokens_at_most_half_the_context():
    assert room_for_reply(4096, 512) == 512 and room_for_reply(512, 1024) == 256


@pytest.fixture(scope="module")
def engine(default_model_path):
    e = Engine.load(default_model_path, backend="cpu", n_ctx=256)
    yield e
    e.close()


def long_chat(n: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n):
        msgs += [{"role": "user", "content": f"Tell me fact number {i} about the moon, please."},
                 {"role": "assistant", "content": f"Fact {i}: the moon is about 384,400 km from the Earth."}]
    return msgs + [{"role": "user", "content": "And one more?"}]


@pytest.mark.parametrize("policy", ["truncate_middle", "rolling_window"])
def test_on_the_real_template_the_trimmed_prompt_fits_and_starts_with_the_preset_prefix(engine, policy):
    turn = ChatTurn(long_chat(12))
    full = engine.tokenize(engine.render_chat(turn.messages))
    assert len(full) > engine.n_ctx
    prompt, ids, head, dropped = fit_turn(engine, turn, "generic", policy, max_tokens=32)
    assert len(ids) + 32 <= engine.n_ctx and dropped > 0 and dropped % 2 == 0
    assert ids == engine.tokenize(prompt) and head == ""
    prefix = engine.prefix_ids(prefix_text(engine, turn.messages[:1], []))
    assert ids[:len(prefix)] == prefix, "the preset's prefix image must stay valid"
    assert prompt.rstrip().endswith("assistant") and "And one more?" in prompt
    assert ("fact number 0" in prompt) == (policy == "truncate_middle")


def test_on_the_real_template_stop_refuses(engine):
    with pytest.raises(ContextFullError, match="context is full"):
        fit_turn(engine, ChatTurn(long_chat(12)), "generic", "stop", max_tokens=32)


def test_draft_verdicts_under_each_policy():
    from hearth.engine.chat.context_policy import draft_verdict
    assert draft_verdict(100, 50, 1000, 100, "stop") == ("fits", "")
    kind, text = draft_verdict(950, 50, 1000, 100, "stop")
    assert kind == "too_long" and "950 tokens" in text and "rolling window" in text
    kind, text = draft_verdict(950, 50, 1000, 100, "rolling_window")
    assert kind == "trimmed" and "older messages will be left out (rolling window)" in text
    kind, text = draft_verdict(1200, 980, 1000, 100, "truncate_middle")
    assert kind == "too_long" and "This message does not fit" in text and "980" in text
