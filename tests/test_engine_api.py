"""Engine: loading, backends, tokenize/detokenize, feed, reset, prefill, context limits."""

from __future__ import annotations

import numpy as np
import pytest

from hearth import engine
from hearth.engine import ContextFullError, Engine, EngineError


@pytest.fixture(scope="module")
def eng():
    return Engine.load(n_ctx=256)


def prompt(ref, name):
    return next(p for p in ref["prompts"] if p["name"] == name)


def test_exports():
    for name in ("Engine", "Sampling", "EngineError", "ContextFullError", "PrefixImageError", "GGUFError",
                 "UnsupportedModelError", "TemplateError", "GenerationEvent"):
        assert hasattr(engine, name)


def test_load_default_model_on_cpu(eng):
    assert eng.backend.name == "cpu" and eng.backend_info["backend"] == "cpu"
    assert eng.config.arch == "llama" and eng.n_ctx == 256 and eng.tokens == []
    assert eng.kv.nbytes == 2 * 30 * 3 * 256 * 64 * 4
    assert eng.gguf is not None and eng.tokenizer is not None


def test_unknown_backend_and_missing_file(tmp_path):
    with pytest.raises(EngineError, match="unknown backend"):
        Engine.load(backend="tpu")
    with pytest.raises(EngineError, match="not found"):
        Engine.load(tmp_path / "nope.gguf")


def test_auto_backend_reports_its_choice():
    e = Engine.load(backend="auto", n_ctx=32)
    info = e.backend_info
    assert info["backend"] in ("cpu", "gpu") and info["requested"] == "auto" and info["reason"]
    if info["backend"] == "cpu":
        assert e.backend.name == "cpu"


def test_gpu_backend_loads_or_fails_clearly():
    try:
        e = Engine.load(backend="gpu", n_ctx=32)
    except EngineError as err:
        assert str(err)
    else:
        assert e.backend_info["backend"] == "gpu"


@pytest.mark.parametrize("name", ["english", "code", "chat"])
def test_tokenize_matches_llama_cpp(eng, smollm2_reference, name):
    p = prompt(smollm2_reference, name)
    assert eng.tokenize(p["text"]) == p["ids"]
    want = p["ids"] if p["ids_special_false"] == "same as ids" else p["ids_special_false"]
    assert eng.tokenize(p["text"], special=False) == want
    assert eng.detokenize(p["ids"]) == p["text"]


def test_feed_returns_reference_logits_and_tracks_tokens(eng, smollm2_reference, reference_dir):
    p = prompt(smollm2_reference, "code")
    eng.reset()
    logits = eng.feed(p["ids"])
    ref = np.load(reference_dir / "smollm2" / "last_logits_code.npy")
    assert logits.shape == (49152,) and logits.argmax() == ref.argmax()
    assert eng.tokens == p["ids"] and eng.kv.n_tokens == len(p["ids"])
    both = eng.feed([28, 30], all_logits=True)
    assert both.shape == (2, 49152) and eng.tokens == p["ids"] + [28, 30]
    eng.reset()
    assert eng.tokens == [] and eng.kv.n_tokens == 0


def test_feed_past_the_context_raises_and_changes_nothing(eng):
    eng.reset()
    eng.feed(list(range(100, 300)))
    before = eng.kv.read_prefix(3, 256)[0].copy()
    with pytest.raises(ContextFullError):
        eng.feed(list(range(57)))
    assert len(eng.tokens) == 200
    assert np.array_equal(eng.kv.read_prefix(3, 256)[0], before)
    eng.feed(list(range(56)))  # still usable, and exactly full
    assert len(eng.tokens) == 256


def test_prefill_reuses_the_common_prefix(eng, smollm2_reference):
    p = prompt(smollm2_reference, "english")
    eng.reset()
    assert eng.prefill(p["text"]) == len(p["ids"])
    assert eng.tokens == p["ids"]
    kv_before = eng.kv.read_prefix(0, 10)[0].copy()
    longer = p["text"] + " drifting towards the shore."
    n = eng.prefill(longer)
    assert eng.tokens == eng.tokenize(longer) and n == len(eng.tokens)
    assert np.array_equal(eng.kv.read_prefix(0, 10)[0], kv_before)
    # a shorter text that is a prefix: truncated, not recomputed from scratch
    assert eng.prefill(p["ids"][:5]) == 5 and eng.tokens == p["ids"][:5]


def test_prefill_then_generate_computes_nothing_again(eng, smollm2_reference):
    from hearth.engine import Sampling
    p = prompt(smollm2_reference, "english")
    eng.reset()
    eng.prefill(p["text"])
    final = list(eng.generate(p["text"], max_tokens=1, sampling=Sampling.greedy()))[-1]
    assert final.stats.reused_tokens == len(p["ids"]) and final.stats.computed_tokens == 0


def test_adopt_prefix_sets_resident_tokens(eng, smollm2_reference):
    from hearth.engine import Sampling
    p = prompt(smollm2_reference, "english")
    eng.reset()
    logits = eng.feed(p["ids"])
    eng.adopt_prefix(p["ids"], logits)
    final = list(eng.generate(p["ids"], max_tokens=1, sampling=Sampling.greedy()))[-1]
    assert final.stats.computed_tokens == 0
    eng.adopt_prefix(p["ids"], None)  # no logits: only the last token is recomputed
    final = list(eng.generate(p["ids"], max_tokens=1, sampling=Sampling.greedy()))[-1]
    assert final.stats.computed_tokens == 1 and final.stats.reused_tokens == len(p["ids"]) - 1


def test_auto_never_takes_a_software_adapter(monkeypatch):
    from hearth.engine import gpu
    from hearth.engine.gpu import is_software_adapter
    lavapipe = {"vendor": "llvmpipe", "device": "llvmpipe (LLVM 15.0.6, 256 bits)", "adapter_type": "CPU"}
    assert is_software_adapter(lavapipe)
    assert not is_software_adapter({"vendor": "AMD", "device": "Radeon RX 7600", "adapter_type": "DiscreteGPU"})
    monkeypatch.setattr(gpu, "probe", lambda: {**lavapipe, "is_cpu": True, "real_gpu": False})
    e = Engine.load(backend="auto", n_ctx=32)
    assert e.backend_info["backend"] == "cpu" and "only a CPU adapter" in e.backend_info["reason"]
