"""GpuBackend.greedy_steps (greedy decode with one step in flight, the token id kept on the GPU)
against the same backend's forward_argmax loop: the same ids and the same K/V, bit for bit (the same
kernels run in the same order; only who writes the next token id differs), on the tiny llama model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.config import ModelConfig  # noqa: E402
from hearth.engine.gguf import GGUFFile  # noqa: E402
from hearth.engine.gpu import GpuBackend  # noqa: E402

from gpu_fixtures import pick_adapter  # noqa: E402

pytestmark = [pytest.mark.gpu]
N_STEPS = 6


@pytest.fixture(autouse=True, params=["ahead", "pre", "pre2"])
def pipeline(request, monkeypatch):
    """Every test once for each way greedy_steps keeps a step in flight (gpu/greedy.py, HEARTH_GPU_PIPELINE)."""
    monkeypatch.setenv("HEARTH_GPU_PIPELINE", request.param)
    return request.param


@pytest.fixture(scope="module")
def tiny(reference_dir):
    d = reference_dir / "tiny" / "llama"
    m = json.loads((d / "manifest.json").read_text())
    ids = next(p for p in m["prompts"] if p["name"] == "english")["ids"][:12]
    g = GGUFFile.open(d / m["file"])
    gpu = GpuBackend(ModelConfig.from_gguf(g), g, 32, adapter=pick_adapter())
    yield gpu, np.asarray(ids, np.int32)
    gpu.close()


def kv_rows(gpu, n):
    return [np.concatenate([a.ravel(), b.ravel()]) for a, b in (gpu.kv.read_prefix(i, n) for i in range(gpu.kv.n_layers))]


def argmax_loop(gpu, ids, n):
    tok = gpu.forward_argmax(ids, 0)
    out = [tok]
    for i in range(n - 1):
        tok = gpu.forward_argmax(np.array([tok], np.int32), len(ids) + i)
        out.append(tok)
    return out


def test_greedy_steps_give_the_argmax_loops_ids_and_kv(tiny):
    gpu, ids = tiny
    want = argmax_loop(gpu, ids, N_STEPS + 1)
    kv_want = kv_rows(gpu, len(ids) + N_STEPS)
    gpu.forward(ids, 0)
    got = list(gpu.greedy_steps(want[0], len(ids), N_STEPS))
    assert got == want[1:]
    assert gpu.kv.n_tokens == len(ids) + N_STEPS
    for a, b in zip(kv_rows(gpu, len(ids) + N_STEPS), kv_want):
        assert np.array_equal(a, b)


def test_a_consumer_that_stops_early_leaves_only_what_it_took(tiny):
    gpu, ids = tiny
    want = argmax_loop(gpu, ids, 4)
    gpu.forward(ids, 0)
    steps = gpu.greedy_steps(want[0], len(ids), 50)
    assert [next(steps), next(steps)] == want[1:3]
    steps.close()                      # one more step was in flight: computed, never made resident
    assert gpu.kv.n_tokens == len(ids) + 2
    # the next forward at the resident end overwrites the speculative position and agrees
    assert gpu.forward_argmax(np.array([want[2]], np.int32), len(ids) + 2) == want[3]


def test_greedy_steps_stop_at_the_context_end(tiny):
    gpu, ids = tiny
    gpu.forward(ids, 0)
    n = gpu.kv.max_ctx - len(ids)
    got = list(gpu.greedy_steps(1, len(ids), 100))
    assert len(got) == n and gpu.kv.n_tokens == gpu.kv.max_ctx


def test_engine_greedy_generation_is_the_same_pipelined_or_step_by_step(reference_dir, monkeypatch):
    """Engine.generate with plain greedy sampling takes greedy_steps on the GPU: the same tokens, the
    same resident sequence and the same stop reasons as reading the logits back each step; sampling
    with a temperature keeps the logits path (its draws are seeded and repeat)."""
    from hearth.engine import Engine, Sampling  # noqa: PLC0415
    d = reference_dir / "tiny" / "llama"
    m = json.loads((d / "manifest.json").read_text())
    ids = next(p for p in m["prompts"] if p["name"] == "english")["ids"][:10]

    def run(max_tokens, sampling, n_ctx=64):
        e = Engine.load(d / m["file"], backend="gpu", n_ctx=n_ctx)
        try:
            ev = list(e.generate(ids, max_tokens=max_tokens, sampling=sampling))
            again = None                   # a second turn reusing the resident prefix, where it fits
            if len(e.tokens) + 4 <= n_ctx:
                again = [x.token_id for x in e.generate(list(e.tokens) + [7], max_tokens=3, sampling=sampling)]
            return [x.token_id for x in ev[:-1]], ev[-1].stop_reason, list(e.tokens), again
        finally:
            e.close()
    calls = []
    steps = GpuBackend.greedy_steps
    monkeypatch.setattr(GpuBackend, "greedy_steps", lambda self, *a: calls.append(a) or steps(self, *a))
    fast = run(8, Sampling.greedy())
    full = run(14, Sampling.greedy(), n_ctx=len(ids) + 4)     # stops at the context end
    assert len(calls) == 3               # every greedy generate took the pipelined path (the full run has no second turn)
    warm = run(5, Sampling(temperature=0.8, seed=3))
    assert len(calls) == 3
    monkeypatch.delattr(GpuBackend, "greedy_steps")
    assert run(8, Sampling.greedy()) == fast
    assert run(14, Sampling.greedy(), n_ctx=len(ids) + 4) == full
    assert run(5, Sampling(temperature=0.8, seed=3)) == warm
    assert fast[1] == "length" and len(fast[0]) == 8 and full[1] == "context_full"
