"""Helpers shared by the GPU tests: the test device, random GGUF blocks, run-and-read."""

from __future__ import annotations

import contextlib
import os
import zlib

import numpy as np
import pytest

from hearth.engine.gpu.device import Device, select_adapter
from hearth.engine.gpu.kernels import Kernels
from hearth.engine.quants import TYPE_BY_NAME

# Kernels accumulate in float32 in another order than numpy (and lavapipe/NVIDIA may fuse multiply-adds):
# a dot product of K terms has a relative error around sqrt(K) * 2^-24 ~ 1e-6 for K in the thousands.
# RTOL = 2e-5 of the output's norm leaves margin for exp/rsqrt's few-ulp errors and still catches any
# indexing mistake (those give errors of order 1).
RTOL = 2e-5
POISON = np.float32(np.nan)

# Where each block type keeps its f16 scale fields (byte offsets in the block): random bytes there
# could be NaN or huge, so tests write sane scales into them.
_F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
               "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0],
               "MXFP4": [], "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0], "IQ3_XXS": [0], "IQ3_S": [0]}


# GpuBackend's float path (f32 x and X in every product). A real GPU's default is int8 x in decode
# matvecs and f16 / int8 X in prefill products (GpuBackend's docstring), a CPU rasterizer's this;
# tests that compare with the float path at 1e-3 pin it.
FLOAT_PATHS = dict(int8=False, f16=False, mm8=False)


@contextlib.contextmanager
def float_path_env():
    """FLOAT_PATHS for backends built inside (Engine.load(backend="gpu")): HEARTH_GPU_INT8/F16/MM8=0.
    A context, not the monkeypatch fixture, so that module-scoped fixtures can hold it."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("HEARTH_GPU_INT8", "HEARTH_GPU_F16", "HEARTH_GPU_MM8"):
            mp.setenv(name, "0")
        yield


def pick_adapter():
    """lavapipe when present (what CI runs), else HEARTH_GPU_ADAPTER's choice or the best adapter; None
    where wgpu finds none."""
    want = os.environ.get("HEARTH_GPU_ADAPTER")
    return select_adapter(want) if want else (select_adapter("llvmpipe") or select_adapter())


def make_test_device() -> Device:
    """A device on pick_adapter()'s adapter; skips where there is none."""
    a = pick_adapter()
    if a is None:
        pytest.skip("no wgpu adapter")
    return Device(a)


def subgroup_device(mode: str) -> Device:
    """A test device made with subgroup operations on ("subgroups") or off ("no-subgroups"), the two
    paths every matvec kernel has; skips "subgroups" where the adapter lacks them."""
    old = os.environ.get("HEARTH_GPU_SUBGROUPS")
    os.environ["HEARTH_GPU_SUBGROUPS"] = "1" if mode == "subgroups" else "0"
    try:
        d = make_test_device()
    finally:
        if old is None:
            os.environ.pop("HEARTH_GPU_SUBGROUPS")
        else:
            os.environ["HEARTH_GPU_SUBGROUPS"] = old
    if mode == "subgroups" and not d.subgroups:
        d.destroy()
        pytest.skip("the adapter has no subgroup operations")
    return d


# What device_needing's `need` names: the Device flag, and the skip's reason where it is off.
_LACKS = {"int8": "the adapter has no 4-way int8 dot products", "f16": "the adapter has no shader-f16"}


def device_needing(need: str | None = None, mode: str | None = None) -> Device:
    """The test device (subgroup_device(mode) where a mode is given); skips where it lacks `need`
    ("int8": the 4-way int8 dot products, "f16": shader-f16)."""
    d = subgroup_device(mode) if mode else make_test_device()
    if need and not getattr(d, need):
        d.destroy()
        pytest.skip(_LACKS[need])
    return d


def gpu_adapter(need: str | None = None):
    """device_needing(need)'s adapter, the device released: for a backend that opens its own."""
    d = device_needing(need)
    a = d.adapter
    d.destroy()
    return a


def float_backend(cls, g, n_ctx: int, **kw):
    """Backend class `cls` on GGUF g over gpu_adapter(), on FLOAT_PATHS unless kw says otherwise."""
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    return cls(ModelConfig.from_gguf(g), g, n_ctx, adapter=gpu_adapter(), **{**FLOAT_PATHS, **kw})


def check_greedy_steps(be, ids, n: int) -> None:
    """greedy_steps after prompt ids (step k+1 submitted before step k's id is read back, as
    Engine.generate runs greedy decode) gives the n ids forward_argmax gives step by step."""
    ids = np.asarray(ids, np.int32)
    be.kv.clear()
    tok = be.forward_argmax(ids, 0)
    chained = list(be.greedy_steps(tok, len(ids), n))
    be.kv.clear()
    be.forward_argmax(ids, 0)
    stepped, t = [], tok
    for j in range(n):
        t = be.forward_argmax(np.array([t], np.int32), len(ids) + j)
        stepped.append(t)
    assert chained == stepped


def kernels_fixture(need: str | None = None, subgroup_modes: bool = False):
    """A module-scoped fixture (assign it to the name tests ask for, `ks`): Kernels on
    device_needing(need), the device destroyed after the module; with subgroup_modes, once for each
    of subgroup_device's modes (params "subgroups", "no-subgroups")."""
    @pytest.fixture(scope="module", params=["subgroups", "no-subgroups"] if subgroup_modes else None)
    def ks(request):
        d = device_needing(need, getattr(request, "param", None))
        yield Kernels(d)
        d.destroy()
    return ks


def device_and_kernels_fixtures():
    """Module-scoped fixtures (dev, ks) for tests that ask for both: the test device, Kernels on it."""
    @pytest.fixture(scope="module")
    def dev():
        d = make_test_device()
        yield d
        d.destroy()

    @pytest.fixture(scope="module")
    def ks(dev):
        return Kernels(dev)
    return dev, ks


@pytest.fixture
def rng(request):
    """A generator seeded per test, so that a failure on one adapter reproduces on the next run."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def random_rows(rng, qtype: str, m: int, k: int) -> np.ndarray:
    """uint8 [m, row_bytes]: m rows of k weights in GGUF type `qtype`, with fresh random bits."""
    t = TYPE_BY_NAME[qtype]
    if qtype == "F32":
        return rng.standard_normal((m, k)).astype(np.float32).view(np.uint8)
    if qtype == "F16":
        return rng.standard_normal((m, k)).astype(np.float16).view(np.uint8)
    nb = k // t.block_size
    raw = rng.integers(0, 256, (m, nb, t.type_size), dtype=np.uint8)
    for off in _F16_FIELDS[qtype]:
        scale = (rng.random((m, nb)) * 0.02 + 0.001).astype(np.float16)
        raw[:, :, off:off + 2] = scale.view(np.uint8).reshape(m, nb, 2)
    if qtype == "MXFP4":   # the e8m0 scale byte: 2^-10 .. 2^-5
        raw[:, :, 0] = rng.integers(118, 124, (m, nb))
    return raw.reshape(m, nb * t.type_size)


def dequant_reference(raw: np.ndarray, qtype: str, k: int) -> np.ndarray:
    """float64 [m, k] from gguf-py (llama.cpp's own reference dequantizers), independent of engine code."""
    import gguf  # noqa: PLC0415  (test dependency)
    t = getattr(gguf.GGMLQuantizationType, qtype)
    return gguf.quants.dequantize(np.ascontiguousarray(raw), t).reshape(raw.shape[0], k).astype(np.float64)


def read_f32(dev: Device, buf, n: int, offset: int = 0) -> np.ndarray:
    return dev.read([(buf, offset * 4, n * 4)]).view(np.float32).copy()


def poisoned(dev: Device, n: int, label="out"):
    return dev.upload(np.full(n, POISON, np.float32), label)


def rel_err(got, ref) -> float:
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert not np.isnan(got).any(), "unwritten (poisoned) or NaN outputs"
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


# x quantized to int8 as the GPU's int8 paths do (llama.cpp's q8 activations: per 32 values, scale
# max |x| / 127, codes round(x / scale)): the decode matvec (test_gpu_int8.py) and the prefill product
# (test_gpu_matmul8.py).
def q8_blocks(h: np.ndarray):
    """numpy's q8 of float32 h [k]: (codes int [k], scales float32 [k / 32]), as the kernel computes them."""
    b = h.reshape(-1, 32)
    d = (np.abs(b).max(axis=1) / np.float32(127)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    return np.round(b * inv[:, None]).astype(np.int64).reshape(-1), d


def safe_x(rng, k: int, g: np.ndarray | None = None) -> np.ndarray:
    """float32 x [k] whose q8 codes (of x * g) are unambiguous: each block's values are
    scale * (integer + u), |u| <= 0.3, one of them exactly 127 scales."""
    codes = rng.integers(-120, 121, (k // 32, 32)).astype(np.float64)
    codes += rng.uniform(-0.3, 0.3, codes.shape)
    codes[np.arange(k // 32), rng.integers(0, 32, k // 32)] = 127 * rng.choice([-1, 1], k // 32)
    h = (codes * rng.uniform(0.001, 0.05, (k // 32, 1))).reshape(-1).astype(np.float32)
    x = h if g is None else (h / g).astype(np.float32)
    hq = x if g is None else (x * g).astype(np.float32)
    q, d = q8_blocks(hq)
    assert np.array_equal(q, np.round(codes).reshape(-1))      # the construction did what it says
    return x
