"""The memory check before loading: estimates by part, the verdict, and the refusal message."""

from __future__ import annotations

import pytest

from hearth.engine import Engine, memory
from hearth.engine.config import ModelConfig
from hearth.engine.errors import EngineError
from hearth.engine.gguf import GGUFFile


@pytest.fixture(scope="module")
def smollm2(default_model_path):
    g = GGUFFile.open(default_model_path)
    return g, ModelConfig.from_gguf(g)


def test_estimate_parts(smollm2):
    g, cfg = smollm2
    parts = memory.estimate(g, cfg, 4096)
    assert set(parts) == {"weights", "kv", "scratch", "runtime"}
    # every tensor of the default model is used from the file: its weights are the file's tensors
    assert parts["weights"] == sum(t.n_bytes for t in g.tensors.values())
    assert parts["kv"] == 2 * 4 * 30 * 3 * 64 * 4096
    assert memory.estimate(g, cfg, 8192)["kv"] == 2 * parts["kv"]
    assert 0 < parts["scratch"] < 200e6


def test_verdict():
    assert memory.verdict(5, 10) == "fits"
    assert memory.verdict(9, 10) == "tight"
    assert memory.verdict(11, 10) == "won't fit"
    assert memory.verdict(11, None) == "fits"  # cannot be asked: do not refuse


def test_available_bytes_is_plausible():
    a = memory.available_bytes()
    assert a is None or 0 < a < 2**50


def test_check_refuses_with_both_figures(smollm2):
    g, cfg = smollm2
    needed = sum(memory.estimate(g, cfg, 4096).values())
    with pytest.raises(memory.NotEnoughMemoryError) as e:
        memory.check(g, cfg, 4096, available=needed // 2)
    msg = str(e.value)
    assert f"needs {needed / 1e9:.1f} GB" in msg and f"{needed // 2 / 1e9:.1f} GB available" in msg
    assert "smaller quantization" in msg
    assert e.value.needed == needed and e.value.available == needed // 2
    assert memory.check(g, cfg, 4096, available=needed * 2)["kv"] > 0


def test_large_context_suggests_a_smaller_one(smollm2):
    g, cfg = smollm2
    with pytest.raises(memory.NotEnoughMemoryError, match=r"smaller context \(n_ctx 65536 takes 3\.0 GB"):
        memory.check(g, cfg, 65536, available=10**9)


def test_engine_load_refuses_before_loading(default_model_path, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 50 * 2**20)
    with pytest.raises(EngineError, match=r"needs \d+\.\d GB, 0\.1 GB available"):
        Engine.load(default_model_path, n_ctx=512)


def test_engine_load_reports_progress(default_model_path):
    seen = []
    eng = Engine.load(default_model_path, n_ctx=256, progress=lambda f, what: seen.append((f, what)))
    try:
        fractions = [f for f, _ in seen]
        assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) > 10
        assert all(isinstance(w, str) and w for _, w in seen)
    finally:
        eng.close()


def test_repacked_experts_count_one_tensor_twice(reference_dir, monkeypatch):
    """gpt-oss's experts repacked at load (models/moe.py): the copy replaces the mapped pages, both
    resident for the largest expert tensor while it is repacked; nothing extra with the switch off
    or on the GPU."""
    from hearth.engine.cpu import simd_vnni
    from hearth.engine.models import moe
    g = GGUFFile.open(reference_dir / "tiny-next" / "gpt-oss" / "tiny-gpt-oss.gguf")
    cfg = ModelConfig.from_gguf(g)
    monkeypatch.setattr(simd_vnni, "LANES", 16)
    largest = max(t.n_bytes for t in g.tensors.values() if t.name.endswith("_exps.weight") and t.type.name == "MXFP4")
    base = memory.estimate(g, cfg, 64, "gpu")["weights"]
    assert moe.x8_extra_bytes(g, cfg) == largest
    assert memory.estimate(g, cfg, 64)["weights"] == base + largest
    monkeypatch.setenv("HEARTH_CPU_MXFP4_X8", "0")
    assert memory.estimate(g, cfg, 64)["weights"] == base
