"""Engine.generate: greedy equals llama.cpp, prefix reuse counts, stops, cancel, UTF-8, limits."""

from __future__ import annotations

import threading

import pytest

from hearth.engine import ContextFullError, Engine, Sampling

from test_tokenizer import _is_utf8

EMOJI = "<|im_start|>user\nWrite three emoji.<|im_end|>\n<|im_start|>assistant\n"
CHAT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def eng():
    return Engine.load(n_ctx=512)


def run(eng, prompt, **kw):
    kw.setdefault("sampling", Sampling.greedy())
    events = list(eng.generate(prompt, **kw))
    assert events[-1].final and all(not e.final for e in events[:-1])
    return "".join(e.text for e in events), events[-1], [e.token_id for e in events if e.token_id is not None]


def test_greedy_matches_llama_cpp(eng, smollm2_reference):
    for p in smollm2_reference["prompts"]:
        eng.reset()
        text, final, ids = run(eng, p["text"], max_tokens=len(p["greedy"]["ids"]))
        want = p["greedy"]["ids"]
        n = next((i + 1 for i, s in enumerate(p["greedy"]["steps"]) if s["margin_to_top2"] < 1.0), len(want))
        assert ids[:n] == want[:n], p["name"]
        if ids == want:
            assert text == p["greedy"]["text"]


def test_stats_and_incremental_chat(eng):
    eng.reset()
    text, final, ids = run(eng, CHAT, max_tokens=30)
    n = len(eng.tokenize(CHAT))
    s = final.stats
    assert final.stop_reason == "eog" and "Paris" in text
    assert (s.reused_tokens, s.computed_tokens, s.generated_tokens) == (0, n, len(ids) + 1)
    assert s.ttft_s > 0 and s.prefill_tps > 0 and s.decode_tps > 0
    follow = CHAT + text + "<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n"
    text2, final2, _ = run(eng, follow, max_tokens=30)
    total = len(eng.tokenize(follow))
    assert final2.stats.reused_tokens >= n + len(ids) - 1
    assert final2.stats.reused_tokens + final2.stats.computed_tokens == total
    assert "Rome" in text2


def test_max_tokens_stops_with_length(eng):
    text, final, ids = run(eng, "Once upon a time", max_tokens=5)
    assert final.stop_reason == "length" and len(ids) == 5 == final.stats.generated_tokens
    assert text == eng.detokenize(ids)


def test_stop_string_is_not_emitted(eng):
    text, final, _ = run(eng, CHAT, max_tokens=30, stop=["Paris"])
    assert final.stop_reason == "stop" and text == "The capital of France is "
    # a stop string spanning several tokens
    text, final, _ = run(eng, CHAT, max_tokens=30, stop=["of Fr"])
    assert final.stop_reason == "stop" and text == "The capital "


def test_text_that_might_start_a_stop_string_is_held_back_then_released(eng):
    full, _, _ = run(eng, CHAT, max_tokens=30)
    events = list(eng.generate(CHAT, max_tokens=30, sampling=Sampling.greedy(), stop=["capital city"]))
    assert "".join(e.text for e in events) == full
    # " capital" is withheld until the next token shows it is not " capital city"
    seen = ""
    for e in events:
        seen += e.text
        assert not seen.endswith(" capital") or e.final


def test_cancel_between_tokens(eng):
    ev = threading.Event()
    ev.set()
    text, final, ids = run(eng, CHAT, max_tokens=30, cancel=ev)
    assert final.stop_reason == "cancelled" and ids == [] and text == ""
    count = {"n": 0}

    def cancel():
        count["n"] += 1
        return count["n"] > 3
    text, final, ids = run(eng, "Once upon a time", max_tokens=30, cancel=cancel)
    assert final.stop_reason == "cancelled" and len(ids) == 3


def test_never_half_a_utf8_character(eng):
    # The greedy reply writes emoji of three tokens each (b'\xf0\x9f' + b'\x8c' + b'\x9f'). A budget
    # that ends inside a character is flushed as U+FFFD (as detokenize shows it), so the budget is
    # the longest that ends between characters, found from the reply itself (which tokens a reply of
    # this small model takes moves with the rounding of its products).
    full = [e.token_id for e in eng.generate(EMOJI, max_tokens=16, sampling=Sampling.greedy()) if e.token_id is not None]
    pieces = [eng.tokenizer.token_bytes(t) for t in full]
    split = [i for i, p in enumerate(pieces) if len(p) < 4 and p[:1] == b"\xf0"]
    assert split, "the reply must split a character across tokens"
    whole = [n for n in range(split[0] + 2, len(full) + 1) if _is_utf8(b"".join(pieces[:n]))]
    assert whole
    eng.reset()
    events = list(eng.generate(EMOJI, max_tokens=whole[-1], sampling=Sampling.greedy()))
    ids = [e.token_id for e in events if e.token_id is not None]
    assert ids == full[:whole[-1]] and split[0] < len(ids)
    for e in events:
        assert "\ufffd" not in e.text
        e.text.encode("utf-8")
    assert "".join(e.text for e in events) == eng.detokenize(ids)


def test_same_seed_same_output(eng):
    s = Sampling(temperature=1.0, seed=1234)
    a, _, ia = run(eng, "Once upon a time", max_tokens=20, sampling=s)
    eng.reset()
    b, _, ib = run(eng, "Once upon a time", max_tokens=20, sampling=s)
    c, _, ic = run(eng, "Once upon a time", max_tokens=20, sampling=Sampling(temperature=1.0, seed=99))
    assert ia == ib and a == b and ic != ia


def test_prompt_longer_than_context_raises_before_writing():
    e = Engine.load(n_ctx=16)
    e.feed([1, 2, 3])
    with pytest.raises(ContextFullError):
        e.generate(list(range(100, 120)), max_tokens=4)
    assert e.tokens == [1, 2, 3]
    text, final, ids = run(e, list(range(100, 112)), max_tokens=10)
    assert final.stop_reason == "context_full" and len(e.tokens) == 16
