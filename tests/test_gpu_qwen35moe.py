"""qwen35moe on the GPU hybrid backend (gpu/hybrid_moe.py: MoeFfn's routed experts plus the gated
shared expert) on the tiny model of tests/tiny_qwen35moe.py, against the llama.cpp logits the CPU
test uses (tests/data/tiny_qwen35moe_ref.npz, the tiny-next tolerance) at every position, as one
batch and one token at a time, with the real-GPU paths forced too; against the CPU float path
(1e-3: the same arithmetic in another order, as tests/test_gpu_qwen35.py); and through the Engine,
where truncate(n) gives a fresh computation's next logits. The shared expert's gate kernel
(shexp_gate.wgsl) against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hearth.engine import Engine
from hearth.engine.gguf import GGUFFile
from tests.gpu_fixtures import float_backend, float_path_env, make_test_device, read_f32
from tests.tiny_next import PROMPTS, check_both_ways, checked_reference, cpu_float_logits, top64
from tests.tiny_qwen35moe import make

REF = Path(__file__).parent / "data" / "tiny_qwen35moe_ref.npz"
N_CTX = 128


@pytest.fixture(scope="module")
def tiny(reference_dir, tmp_path_factory):
    return checked_reference(make(reference_dir / "tiny-next" / "qwen35" / "tiny-qwen35.gguf",
                                  tmp_path_factory.mktemp("moe") / "m.gguf"), REF)


def gpu_backend(path, **kw):
    from hearth.engine.gpu.hybrid import GpuHybridBackend
    # the float path unless kw says otherwise (test_real_gpu_paths)
    return float_backend(GpuHybridBackend, GGUFFile.open(path), N_CTX, **kw)


@pytest.fixture(scope="module")
def gpu(tiny):
    be = gpu_backend(tiny[0])
    yield be
    be.close()


@pytest.mark.parametrize("name", PROMPTS)
def test_every_position_batch_and_one_token_at_a_time(tiny, gpu, name):
    path, ref = tiny
    ids = ref[f"{name}_ids"].tolist()
    batch, one = check_both_ways(gpu, ids, top64(ref, name))
    want = cpu_float_logits(path, ids, N_CTX)
    assert np.abs(batch - want).max() < 1e-3
    assert np.abs(one - want).max() < 1e-3


@pytest.mark.parametrize("short_int8", [False, True])
def test_real_gpu_paths(tiny, monkeypatch, short_int8):
    """int8 x in the decode matvecs, f16 and int8 X in the prefill products: what the H200 runs.
    short_int8: the decode matvecs take int8 x at the tiny width too (ops.INT8_K_MIN lowered), as
    the H200's do at a real width (the shared expert's gate/up without a fused norm among them)."""
    from hearth.engine.gpu import ops
    if short_int8:
        monkeypatch.setattr(ops, "INT8_K_MIN", 32)
    path, ref = tiny
    be = gpu_backend(path, int8=True, f16=True, mm8=True)
    try:
        if not (be.int8 or be.f16 or be.mm8):
            pytest.skip("the adapter has neither the integer dot products nor shader-f16")
        for name in PROMPTS:
            check_both_ways(be, ref[f"{name}_ids"].tolist(), top64(ref, name))
    finally:
        be.close()


def test_engine_truncate_gives_a_fresh_computation(tiny):
    ids = tiny[1]["english_ids"].tolist()[:24]
    make_test_device().destroy()          # skips where there is no adapter
    with float_path_env():                # held to a fresh computation at 1e-3
        e = Engine.load(tiny[0], backend="gpu", n_ctx=64)
    try:
        from hearth.engine.gpu.hybrid import GpuHybridBackend
        assert isinstance(e.backend, GpuHybridBackend)
        assert not (e.backend.int8 or e.backend.f16 or e.backend.mm8)
        e.reset()
        want = e.feed(ids[:15]).copy()
        e.reset()
        e.feed(ids[:10])
        e.feed(ids[10:])
        e.truncate(14)
        got = e.feed(ids[14:15])
    finally:
        e.close()
    assert np.abs(got - want).max() < 1e-3


def test_shared_expert_gate_kernel():
    """y[t, :m] *= sigmoid(xn[t] . w), the row's tail past m (ldy) untouched; d not a multiple of the
    workgroup's 64 lanes."""
    from hearth.engine.gpu.hybrid_moe import shexp_gate, shexp_gate_groups
    from hearth.engine.gpu.kernels import Kernels, dispatch_once
    dev = make_test_device()
    try:
        rng = np.random.default_rng(7)
        n, d, m, ldy = 5, 100, 48, 64
        y = rng.standard_normal((n, ldy)).astype(np.float32)
        xn = rng.standard_normal((n, d)).astype(np.float32)
        w = (rng.standard_normal(d) * 0.3).astype(np.float32)
        yb = dev.upload(y, "y")
        dispatch_once(dev, shexp_gate(Kernels(dev)), [yb, dev.upload(xn, "xn"), dev.upload(w, "w")],
                      shexp_gate_groups(n), d=d, m=m, ldy=ldy, n=n)
        got = read_f32(dev, yb, y.size).reshape(n, ldy)
    finally:
        dev.destroy()
    want = y.copy()
    want[:, :m] *= (1 / (1 + np.exp(-(xn.astype(np.float64) @ w))))[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
