"""Every turn reuses everything resident, on every architecture (#29): over a multi-turn chat the
engine computes only each turn's new tokens; regenerating the last reply recomputes at most its
last prompt token; truncating past a sliding window gives the state of a fresh computation."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine import Engine
from hearth.engine.sampling import Sampling
from tests.tiny_archs import ALL, tiny_path

IDS = list(range(1000, 1040))


@pytest.fixture(scope="module", params=ALL)
def engine(request, reference_dir, tmp_path_factory):
    e = Engine.load(tiny_path(request.param, reference_dir, tmp_path_factory), n_ctx=96)
    e._prefault.join()
    yield e
    e.close()


def computed(engine, prompt, max_tokens=2) -> int:
    final = None
    for ev in engine.generate(prompt, max_tokens=max_tokens, sampling=Sampling(temperature=0.0)):
        final = ev
    return final.stats.computed_tokens


def test_each_turn_computes_only_its_new_tokens(engine):
    engine.reset()
    prompt = IDS[:12]
    assert computed(engine, prompt) == 12
    for turn in range(4):
        new = [2000 + 7 * turn + j for j in range(5)]
        # the next prompt: everything resident (the prompt and the reply so far) and the new message
        prompt = engine.tokens + new
        assert computed(engine, prompt) == len(new), f"turn {turn + 1}"
    # regenerating the last reply: its prompt is resident (a hybrid model keeps a snapshot with
    # the logits at its end; the others recompute its last token for the logits)
    assert computed(engine, prompt) <= 1


@pytest.mark.parametrize("name", ["gemma4", "gpt-oss"])
def test_truncate_past_the_window_is_a_fresh_computation(reference_dir, name):
    """Window 8: positions 20..39 were in the cache and are forgotten; position 20 attends to
    12..20 (sliding layers) and 0..20 (full layers) exactly as in a fresh computation."""
    e = Engine.load(reference_dir / "tiny-next" / name / f"tiny-{name}.gguf", n_ctx=64)
    try:
        e.feed(IDS[:20])
        want = e.feed([7]).copy()
        e.reset()
        e.feed(IDS[:20])
        e.feed(IDS[20:40])
        e.truncate(20)
        np.testing.assert_array_equal(e.feed([7]), want)
    finally:
        e.close()


def test_a_template_that_drops_earlier_thinking_recomputes_only_the_rerendered_reply(engine):
    """A reasoning template renders the previous reply without its thinking: the resident tokens
    and the prompt part at the reply's start. The engine goes back there (a slice, or on a hybrid
    model the snapshot taken at the end of the previous prompt) and computes only the reply as
    re-rendered plus the new message: never the chat before it."""
    engine.reset()
    prompt = IDS[:12]
    assert computed(engine, prompt) == 12
    for turn in range(3):
        reply = [e.token_id for e in engine.generate(prompt, max_tokens=6, sampling=Sampling(temperature=0.0))
                 if not e.final]
        # the reply re-rendered without its thinking: other tokens from its first on (random
        # weights repeat one token, so the generated ones could not show the difference)
        answer = [3000 + turn, 3100 + turn]
        assert reply[0] not in answer
        new = [2000 + 7 * turn + j for j in range(5)]
        prompt = prompt + answer + new
        assert computed(engine, prompt) == len(answer) + len(new), f"turn {turn + 1}"
