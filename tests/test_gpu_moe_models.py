"""qwen3moe and gpt-oss on the GPU backend (engine/gpu/moe.py) against llama.cpp, on the tiny
random-weight models of ../shared/reference/tiny-next (README.md there: at every position, the logits
at llama.cpp's 64 largest ids within mean 0.15 / max 1.5, the same top-1 where its top-2 gap is >= 0.5;
the last position within 0.01 / 0.05 of llama.cpp's float path for a float32 engine).

Paths: lavapipe's defaults (f32 x in the dense products, the experts' x as int8 blocks), and the
real GPU's paths forced (int8 x, f16 and int8 prefill products), which the H200 takes by default.

llama.cpp's top-64 logits come from its CPU path, which rounds every product's x to 8 bits. The tiny
gpt-oss is sensitive to that rounding (a few positions' expert choices flip): with f32 x in the dense
products it lands 0.24 mean from those logits at its worst position on the english prompt (as the
CPU backend does with float activations), with 8-bit x everywhere 0.06. So gpt-oss is held to the
top-64 tolerance with 8-bit x (mm8: every prefill product), and its one-token passes, whose dense
decode products keep f32 x at these widths (ops.int8_ok: K 2,048-4,096), to the float path: the CPU
backend's float activations at every position (which test_models_moe.py ties to llama.cpp's float
path) and llama.cpp's float path at the last.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from hearth.engine.gpu import GpuBackend
from hearth.engine.gpu import moe as gmoe
from tests.gpu_fixtures import make_test_device
from tests.tiny_next import assert_agrees, prompt_of

PROMPTS = ["chat", "english"]


@pytest.fixture(scope="module")
def adapter():
    dev = make_test_device()
    a = dev.adapter
    yield a
    dev.destroy()


def model(reference_dir, arch):
    d = reference_dir / "tiny-next" / arch
    m = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / m["file"])
    return d, m, g, ModelConfig.from_gguf(g)


def gpu(adapter, cfg, g, moe_int8=True, **kw):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gmoe, "MOE_INT8", moe_int8)
        kw = {"int8": False, "f16": False, "mm8": False, **kw}
        return GpuBackend(cfg, g, n_ctx=128, adapter=adapter, **kw)


def batch(be, ids):
    be.kv.clear()
    return be.forward(ids, 0, all_logits=True)


def one_at_a_time(be, ids):
    be.kv.clear()
    return np.stack([be.forward([t], j) for j, t in enumerate(ids)])


# ---------------------------------------------------------------- qwen3moe

@pytest.fixture(scope="module")
def qwen(reference_dir, adapter):
    d, m, g, cfg = model(reference_dir, "qwen3moe")
    return d, m, g, cfg, gpu(adapter, cfg, g)


@pytest.mark.parametrize("name", PROMPTS)
def test_qwen3moe_every_position_batch_and_one_token_at_a_time(qwen, name):
    d, m, _, _, be = qwen
    ids = prompt_of(m, name)["ids"]
    ref = np.load(d / f"top64_{name}.npz")
    assert_agrees(batch(be, ids), ref)
    assert_agrees(one_at_a_time(be, ids), ref)


@pytest.mark.parametrize("paths", [dict(int8=True, mm8=True), dict(f16=True)], ids=["int8-mm8", "f16"])
def test_qwen3moe_on_the_real_gpu_paths(reference_dir, adapter, paths):
    d, m, g, cfg = model(reference_dir, "qwen3moe")
    be = gpu(adapter, cfg, g, **paths)
    try:
        if (paths.get("int8") and not be.int8) or (paths.get("f16") and not be.f16):
            pytest.skip("the adapter lacks the integer dot products or shader-f16")
        for name in PROMPTS:
            ids = prompt_of(m, name)["ids"]
            assert_agrees(batch(be, ids), np.load(d / f"top64_{name}.npz"))
        ids = prompt_of(m, "chat")["ids"]
        assert_agrees(one_at_a_time(be, ids), np.load(d / "top64_chat.npz"))
    finally:
        be.close()


@pytest.mark.parametrize("name", PROMPTS)
def test_qwen3moe_last_position_matches_the_float_path(qwen, name):
    d, m, _, _, be = qwen
    got = batch(be, prompt_of(m, name)["ids"])[-1]
    f32 = np.load(d / f"logits_f32path_last_{name}.npy")
    assert np.abs(got - f32).mean() <= 0.01 and np.abs(got - f32).max() <= 0.05


# ---------------------------------------------------------------- gpt-oss

@pytest.fixture(scope="module")
def oss(reference_dir):
    d, m, g, cfg = model(reference_dir, "gpt-oss")
    return d, m, g, cfg


@pytest.mark.parametrize("paths", [dict(int8=True, mm8=True), dict(int8=True, mm8=True, f16=True)],
                         ids=["int8-mm8", "int8-mm8-f16"])
def test_gpt_oss_every_position_with_8bit_x(oss, adapter, paths):
    d, m, g, cfg = oss
    be = gpu(adapter, cfg, g, **paths)
    try:
        if not be.mm8 or (paths.get("f16") and not be.f16):
            pytest.skip("the adapter lacks the integer dot products or shader-f16")
        for name in PROMPTS:
            assert_agrees(batch(be, prompt_of(m, name)["ids"]), np.load(d / f"top64_{name}.npz"))
    finally:
        be.close()


@pytest.fixture(scope="module")
def oss_float(oss, adapter):
    """The float path: f32 x everywhere on the GPU, float activations on the CPU."""
    d, m, g, cfg = oss
    be = gpu(adapter, cfg, g, moe_int8=False)
    cpu = CpuBackend(cfg, g, n_ctx=128, int8=False)
    yield d, m, g, cfg, be, cpu
    be.close()


@pytest.mark.parametrize("name", PROMPTS)
def test_gpt_oss_float_path_every_position_batch_and_one_token_at_a_time(oss_float, name):
    """Windows, sinks, YaRN, biases, the clamped SwiGLU and the routing at every position, as one
    batch and one token at a time, against numpy's float path; the last position against llama.cpp's."""
    d, m, _, _, be, cpu = oss_float
    ids = prompt_of(m, name)["ids"]
    want = batch(cpu, ids)
    np.testing.assert_allclose(batch(be, ids), want, atol=1e-3)
    np.testing.assert_allclose(one_at_a_time(be, ids), want, atol=1e-3)
    f32 = np.load(d / f"logits_f32path_last_{name}.npy")
    got = want[-1]
    assert np.abs(got - f32).mean() <= 0.01 and np.abs(got - f32).max() <= 0.05


def test_gpt_oss_prefill_in_chunks_of_8_agrees_with_one_chunk(oss_float, adapter):
    """The sliding window and the experts' routing across chunk boundaries."""
    d, m, g, cfg, be, _ = oss_float
    ids = prompt_of(m, "english")["ids"]
    whole = batch(be, ids)
    small = gpu(adapter, cfg, g, moe_int8=False, chunk=8)
    try:
        assert small.chunk == 8
        small.kv.clear()
        np.testing.assert_allclose(small.forward(ids, 0), whole[-1], atol=1e-3)
        np.testing.assert_allclose(batch(small, ids), whole, atol=1e-3)
    finally:
        small.close()


def test_gpt_oss_greedy_steps_follow_the_logits(oss_float):
    """The pipelined greedy decode (argmax on the GPU, fed to the next step there) over MoE layers."""
    _, m, _, _, be, _ = oss_float
    ids = prompt_of(m, "chat")["ids"]
    be.kv.clear()
    first = int(np.argmax(be.forward(ids, 0)))
    got = list(be.greedy_steps(first, len(ids), 4))
    be.kv.clear()
    logits = be.forward(ids, 0)
    want, tok = [], first
    for j in range(4):
        logits = be.forward([tok], len(ids) + j)
        tok = int(np.argmax(logits))
        want.append(tok)
    assert got == want


def test_gpt_oss_with_a_float16_cache(oss, adapter):
    """The sinks merge and the windowed layers over a float16 K/V cache, against numpy's float path
    with the same cache (this tiny model moves ~0.6 between f32 and f16 caches: expert choices flip)."""
    d, m, g, cfg = oss
    be = gpu(adapter, cfg, g, moe_int8=False, kv_dtype="f16")
    try:
        cpu = CpuBackend(cfg, g, n_ctx=128, int8=False, kv_dtype="f16")
        ids = prompt_of(m, "english")["ids"]
        want = batch(cpu, ids)
        np.testing.assert_allclose(batch(be, ids), want, atol=1e-3)
        np.testing.assert_allclose(one_at_a_time(be, ids)[-8:], want[-8:], atol=1e-3)
    finally:
        be.close()


@pytest.mark.parametrize("name", PROMPTS)
def test_gpt_oss_int8_experts_one_token_at_a_time_agree_with_the_batch(oss, adapter, name):
    """lavapipe's defaults (the MXFP4 experts take int8 x): the one-token passes (router matvec, top
    k, gate/up, the down product quantizing its x in workgroup memory) give the batch's logits (the
    tiled prefill products over the same int8 x) at every position."""
    d, m, g, cfg = oss
    be = gpu(adapter, cfg, g)
    try:
        if not be.dev.int8:
            pytest.skip("the adapter has no int8 dot products")
        assert "0.experts.down.q8" not in [op["label"] for op in be.decode_plan.ops]
        ids = prompt_of(m, name)["ids"]
        np.testing.assert_allclose(one_at_a_time(be, ids), batch(be, ids), atol=1e-3)
    finally:
        be.close()
