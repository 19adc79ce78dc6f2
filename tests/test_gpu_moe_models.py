"""qwen3moe and gpt-oss on the GPU backend (engine/gpu/moe.py) against llama.cpp, on the tiny
random-weight models of ../shared/reference/tiny-next (README.md there: at every position, the logits
at llama.cpp's 64 largest ids within mean 0.15 / max 1.5, the same top-1 where its top-2 gap is >= 0.5;
the last position within 0.01 / 0.05 of llama.cpp's float path for a float32 engine).

Paths: lavapipe's defaults (f32 x in the dense products, the experts' x as int8 blocks), and the
real GPU's paths forced (int8 x, f16 and int8 prefill products), which the H200 takes by default.

llama.cpp's top-64 logits come from its CPU path, which rounds every product's x to 8 bits, and the
tiny gpt-oss has router decisions within rounding of a tie (tests/moe_ties.py has the numbers). The
float path (f32 x everywhere), batch and one token at a time, is held to llama.cpp's float path at
every position (an all-F32 copy with F32 K/V, tests/data/tiny-next/gpt-oss: within 3e-5 measured)
and to its top-64 away from the ties; the 8-bit paths to the top-64 away from the ties. lavapipe's
defaults mix the two roundings (f32 x in the dense products, 8-bit in the experts'): at english
positions 17 and 21, with no router tie, rounding the dense products' x to 8 bits alone moves the
logits by 0.16-0.17 mean, so that path lands 0.17 / 0.22 from llama.cpp's top-64 there (the CPU
backend with the same mix lands on the same positions); it is held to the batch one token at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from hearth.engine.gpu import GpuBackend
from hearth.engine.gpu import moe as gmoe
from tests.gpu_fixtures import gpu_adapter
from tests.moe_ties import assert_agrees_off_ties, router_margins
from tests.tiny_next import PROMPTS, assert_agrees, batch_logits, one_token_at_a_time, prompt_of

@pytest.fixture(scope="module")
def adapter():
    return gpu_adapter()


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
    assert_agrees(batch_logits(be, ids), ref)
    assert_agrees(one_token_at_a_time(be, ids), ref)


@pytest.mark.parametrize("paths", [dict(int8=True, mm8=True), dict(f16=True)], ids=["int8-mm8", "f16"])
def test_qwen3moe_on_the_real_gpu_paths(reference_dir, adapter, paths):
    d, m, g, cfg = model(reference_dir, "qwen3moe")
    be = gpu(adapter, cfg, g, **paths)
    try:
        if (paths.get("int8") and not be.int8) or (paths.get("f16") and not be.f16):
            pytest.skip("the adapter lacks the integer dot products or shader-f16")
        for name in PROMPTS:
            ids = prompt_of(m, name)["ids"]
            assert_agrees(batch_logits(be, ids), np.load(d / f"top64_{name}.npz"))
        ids = prompt_of(m, "chat")["ids"]
        assert_agrees(one_token_at_a_time(be, ids), np.load(d / "top64_chat.npz"))
    finally:
        be.close()


@pytest.mark.parametrize("name", PROMPTS)
def test_qwen3moe_last_position_matches_the_float_path(qwen, name):
    d, m, _, _, be = qwen
    got = batch_logits(be, prompt_of(m, name)["ids"])[-1]
    f32 = np.load(d / f"logits_f32path_last_{name}.npy")
    assert np.abs(got - f32).mean() <= 0.01 and np.abs(got - f32).max() <= 0.05


# ---------------------------------------------------------------- gpt-oss

@pytest.fixture(scope="module")
def oss(reference_dir):
    d, m, g, cfg = model(reference_dir, "gpt-oss")
    return d, m, g, cfg


@pytest.fixture(scope="module")
def oss_cpu(oss):
    """The CPU backend's float path and, per prompt, its router margins (tests/moe_ties.py)."""
    _, m, g, cfg = oss
    cpu = CpuBackend(cfg, g, n_ctx=128, int8=False)
    return cpu, {name: router_margins(cpu, prompt_of(m, name)["ids"]) for name in PROMPTS}


@pytest.mark.parametrize("paths", [dict(int8=True, mm8=True), dict(int8=True, mm8=True, f16=True)],
                         ids=["int8-mm8", "int8-mm8-f16"])
def test_gpt_oss_every_position_with_8bit_x(oss, oss_cpu, adapter, paths):
    """The f16 products here are only the K projections' (the F16 weights; the experts' products
    stay int8): on the CPU, those products done as matmul16 does them (x and w in f16, summed in
    f16) move layer 1's router logits by up to 0.05 against the 8-bit path, enough to flip
    english's near-ties (tests/moe_ties.py), so ties are held to the flip bound."""
    d, m, g, cfg = oss
    be = gpu(adapter, cfg, g, **paths)
    try:
        if not be.mm8 or (paths.get("f16") and not be.f16):
            pytest.skip("the adapter lacks the integer dot products or shader-f16")
        for name in PROMPTS:
            assert_agrees_off_ties(batch_logits(be, prompt_of(m, name)["ids"]), np.load(d / f"top64_{name}.npz"),
                                   oss_cpu[1][name])
    finally:
        be.close()


@pytest.fixture(scope="module")
def oss_float(oss, oss_cpu, adapter):
    """The float path: f32 x everywhere on the GPU, float activations on the CPU."""
    d, m, g, cfg = oss
    be = gpu(adapter, cfg, g, moe_int8=False)
    yield d, m, g, cfg, be, oss_cpu[0], oss_cpu[1]
    be.close()


@pytest.fixture(scope="module")
def f32path(oss):
    """llama.cpp's float path's top-64 at every position (tests/data/tiny-next/gpt-oss/make_f32path.py)."""
    _, m, _, _ = oss
    f32 = np.load(Path(__file__).parent / "data" / "tiny-next" / "gpt-oss" / "f32path_top64.npz")
    assert str(f32["sha256"]) == m["sha256"]
    return f32


def at_f32path(got, f32, name):
    """got's logits at llama.cpp's float path's 64 largest ids per position, and that path's."""
    ids = f32[f"{name}_ids"].astype(np.int64)
    return np.take_along_axis(got, ids, axis=1), f32[f"{name}_logits"]


@pytest.mark.parametrize("name", PROMPTS)
def test_gpt_oss_float_path_every_position_batch_and_one_token_at_a_time(oss_float, f32path, name):
    """Windows, sinks, YaRN, biases, the clamped SwiGLU and the routing at every position, as one
    batch and one token at a time, on the GPU and the CPU: against llama.cpp's float path (an
    all-F32 copy, F32 K/V) at every position, and its 8-bit reference away from router ties."""
    d, m, _, _, be, cpu, margins = oss_float
    ids = prompt_of(m, name)["ids"]
    ref = np.load(d / f"top64_{name}.npz")
    for got in (batch_logits(be, ids), one_token_at_a_time(be, ids),
                batch_logits(cpu, ids), one_token_at_a_time(cpu, ids)):
        np.testing.assert_allclose(*at_f32path(got, f32path, name), atol=1e-3)
        assert_agrees_off_ties(got, ref, margins[name])


def test_gpt_oss_prefill_in_chunks_of_8_agrees_with_one_chunk(oss_float, adapter):
    """The sliding window and the experts' routing across chunk boundaries."""
    d, m, g, cfg, be, _, _ = oss_float
    ids = prompt_of(m, "english")["ids"]
    whole = batch_logits(be, ids)
    small = gpu(adapter, cfg, g, moe_int8=False, chunk=8)
    try:
        assert small.chunk == 8
        small.kv.clear()
        np.testing.assert_allclose(small.forward(ids, 0), whole[-1], atol=1e-3)
        np.testing.assert_allclose(batch_logits(small, ids), whole, atol=1e-3)
    finally:
        small.close()


def test_gpt_oss_greedy_steps_follow_the_logits(oss_float):
    """The pipelined greedy decode (argmax on the GPU, fed to the next step there) over MoE layers."""
    _, m, _, _, be, _, _ = oss_float
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
        want = batch_logits(cpu, ids)
        np.testing.assert_allclose(batch_logits(be, ids), want, atol=1e-3)
        np.testing.assert_allclose(one_token_at_a_time(be, ids)[-8:], want[-8:], atol=1e-3)
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
        np.testing.assert_allclose(one_token_at_a_time(be, ids), batch_logits(be, ids), atol=1e-3)
    finally:
        be.close()
