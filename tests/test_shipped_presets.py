"""The presets Hearth ships, run on the default model as a new user would first run them."""

from __future__ import annotations

from collections import Counter

import pytest

from hearth.app.store.preset_store import RESOURCES
from hearth.engine import Engine, Sampling
from hearth.engine.chat.preset_format import parse

# A prompt on which the default model, greedy and without a repetition penalty, tells the same
# sentence again and again until max tokens.
STORY = "Write a short story about a cat."


@pytest.fixture(scope="module")
def eng():
    return Engine.load(n_ctx=1024)


def shipped(pid: str):
    presets, _ = parse((RESOURCES / "presets.json").read_text(encoding="utf-8"), "presets.json")
    return next(p for p in presets if p.id == pid)


def test_precise_greedy_preset_does_not_repeat_a_sentence_on_the_default_model(eng):
    p = shipped("precise")
    s = {k: v for k, v in p.sampling.items() if k in Sampling.__dataclass_fields__ and k != "seed"}
    assert s["temperature"] == 0.0                       # still greedy: the same answer every time
    prompt = eng.render_chat([{"role": "system", "content": p.system_prompt}, {"role": "user", "content": STORY}])
    eng.reset()
    text = "".join(e.text for e in eng.generate(prompt, max_tokens=160, sampling=Sampling(**s)))
    sentences = [x.strip() for x in text.replace("\n", ".").replace("!", ".").split(".") if len(x.split()) >= 4]
    repeated = [(x, n) for x, n in Counter(sentences).items() if n > 1]
    assert not repeated, (repeated, text)
