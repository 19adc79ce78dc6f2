"""The GPU's float16 KV cache (wgsl/f16_kv.wgsl and the kernels that read and write it) against numpy:
stored bits equal to numpy's astype(float16) (round to nearest, ties to even), attention over a float16
cache equal (to float32 rounding) to the numpy attention over the same values widened, and the cache's
host copies (read_prefix, write_prefix) holding the bytes numpy's float16 arrays hold. On lavapipe."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.config import RopeScaling  # noqa: E402
from hearth.engine.gpu import ops  # noqa: E402
from hearth.engine.gpu.kernels import dispatch_once  # noqa: E402
from hearth.engine.gpu.kv import GpuKVCache  # noqa: E402
from hearth.engine.models.layers import Rope, attention  # noqa: E402
from gpu_fixtures import RTOL, device_and_kernels_fixtures, poisoned, read_f32, rel_err  # noqa: E402

pytestmark = pytest.mark.gpu


dev, ks = device_and_kernels_fixtures()


@pytest.fixture
def rng():
    return np.random.default_rng()


def _rope_table(rope: Rope, max_ctx: int) -> np.ndarray:
    c, s = rope.cos_sin(0, max_ctx)
    return np.stack([c[:, 0, :], s[:, 0, :]], axis=-1).astype(np.float32)


def _hard_values(rng, n: int) -> np.ndarray:
    """float32 values where rounding to float16 is easy to get wrong: exact ties between two float16
    values (normal and subnormal; round to even), one float32 ulp either side of them, the edges of
    the float16 range (65504, the 65520 tie that rounds to inf), subnormals down to 2^-25, signed zeros,
    infinities, a NaN, and random values over every float16 exponent."""
    h = np.arange(0, 0x7c00, 7, dtype=np.uint16).view(np.float16)          # float16 values, normal and subnormal
    lo, hi = h[:-1].astype(np.float64), h[1:].astype(np.float64)
    ties = ((lo + hi) / 2).astype(np.float32)                               # exact in float32
    near = np.concatenate([np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(0))])
    edges = np.array([65504, 65519.996, 65520, 65536, 1e6, np.inf, -np.inf, 0.0, -0.0, 2**-24, 2**-25,
                      2**-25 * 1.0001, 1.5 * 2**-24, 2.5 * 2**-24, 2**-14, 2**-14 * (1 - 2**-11), np.nan],
                     np.float32)
    rand = (rng.standard_normal(4096) * np.exp2(rng.uniform(-26, 16, 4096))).astype(np.float32)
    vals = np.concatenate([ties, near, edges, rand])
    vals = np.concatenate([vals, -vals])
    return np.resize(vals, n)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_rope_store_rounds_to_float16_as_numpy_does(dev, ks, rng, qk_norm):
    """V is stored as it comes (no arithmetic), so its float16 bits must equal numpy's astype(float16)
    exactly, for every hard value; K is rotated first (float32 rounding may differ from numpy's in the
    last bit), so it is compared against numpy's rotation rounded to float16 within RTOL."""
    nh, nkv, hd, max_ctx = 2, 2, 64, 64
    n = 48
    rope = Rope(hd, 10000.0, True, RopeScaling())
    qkv = (rng.standard_normal((n, (nh + 2 * nkv) * hd)) * 0.5).astype(np.float32)
    hard = _hard_values(rng, n * nkv * hd)
    qkv[:, (nh + nkv) * hd:] = hard.reshape(n, nkv * hd)
    k = qkv[:, nh * hd:(nh + nkv) * hd].reshape(n, nkv, hd).copy()
    v = qkv[:, (nh + nkv) * hd:].reshape(n, nkv, hd)
    qn, kn = np.ones(hd, np.float32), np.ones(hd, np.float32)
    if qk_norm:
        from hearth.engine.models.layers import rms_norm  # noqa: PLC0415
        k = rms_norm(k, kn, 1e-6)
    rope.apply(k, rope.cos_sin(0, n))
    kc0 = rng.standard_normal((nkv, max_ctx, hd)).astype(np.float16)
    vc0 = rng.standard_normal((nkv, max_ctx, hd)).astype(np.float16)
    kc, vc = dev.upload(kc0), dev.upload(vc0)
    bufs = [dev.upload(qkv), poisoned(dev, n * nh * hd), kc, vc, dev.upload(_rope_table(rope, max_ctx)),
            dev.upload(np.array([0, n], np.uint32))] + ([dev.upload(qn), dev.upload(kn)] if qk_norm else [])
    dispatch_once(dev, ops.rope_store(ks, hd, qk_norm, kv_f16=True), bufs, ops.rope_groups(n, nh, nkv),
                  n_head=nh, n_kv=nkv, n_rot=hd, max_ctx=max_ctx, neox=1, eps=1e-6)
    kg = dev.read([(kc, 0, kc0.nbytes)]).view(np.float16).reshape(kc0.shape)
    vg = dev.read([(vc, 0, vc0.nbytes)]).view(np.float16).reshape(vc0.shape)
    want_v = v.transpose(1, 0, 2).astype(np.float16)
    got_bits, want_bits = vg[:, :n].view(np.uint16), want_v.view(np.uint16)
    wrong = np.flatnonzero(got_bits != want_bits)
    assert wrong.size == 0, (f"{wrong.size} values rounded unlike numpy, e.g. {v.transpose(1, 0, 2).reshape(-1)[wrong[:5]]} "
                             f"-> {got_bits.reshape(-1)[wrong[:5]]} instead of {want_bits.reshape(-1)[wrong[:5]]}")
    assert rel_err(kg[:, :n].astype(np.float32), k.transpose(1, 0, 2).astype(np.float16).astype(np.float32)) < RTOL
    assert np.array_equal(kg[:, n:].view(np.uint16), kc0[:, n:].view(np.uint16))    # other positions untouched
    assert np.array_equal(vg[:, n:].view(np.uint16), vc0[:, n:].view(np.uint16))


def _kv16(rng, nkv, max_ctx, hd):
    return (rng.standard_normal((nkv, max_ctx, hd)).astype(np.float16),
            rng.standard_normal((nkv, max_ctx, hd)).astype(np.float16))


@pytest.mark.parametrize("kv_len,window,hd", [(1, 0, 64), (150, 0, 64), (200, 70, 64), (130, 0, 256)])
def test_attention_decode_reads_a_float16_cache(dev, ks, rng, kv_len, window, hd):
    nh, nkv, max_ctx = 6, 2, 256
    scale = 1.0 / np.sqrt(hd)
    k16, v16 = _kv16(rng, nkv, max_ctx, hd)
    q = rng.standard_normal((1, nh, hd)).astype(np.float32)
    ref = attention(q * np.float32(scale), k16.astype(np.float32), v16.astype(np.float32), kv_len - 1, window)[0]
    splits = ops.attn_splits(max_ctx)
    part, out = poisoned(dev, nh * splits * (hd + 2)), poisoned(dev, nh * hd)
    step = dev.upload(np.array([kv_len - 1, 1], np.uint32))
    p = dict(n_head=nh, n_kv=nkv, max_ctx=max_ctx, max_splits=splits, scale=scale, window=window)
    dispatch_once(dev, ops.attn_split(ks, hd, kv_f16=True), [dev.upload(q), dev.upload(k16), dev.upload(v16), part, step],
                  (ops.attn_splits(kv_len), nh, 1), **p)
    dispatch_once(dev, ops.attn_combine(ks, hd), [part, out, step], (nh, 1, 1), **p)
    assert rel_err(read_f32(dev, out, nh * hd), ref) < RTOL


@pytest.mark.parametrize("pos,n,window,hd,splits", [(0, 70, 0, 64, 1), (33, 100, 0, 64, 3), (10, 90, 24, 64, 2),
                                                   (5, 20, 0, 256, 1)])
@pytest.mark.parametrize("kernel", ["rows", "wide"])
def test_attention_prefill_reads_a_float16_cache(dev, ks, rng, pos, n, window, hd, splits, kernel, monkeypatch):
    """Both prefill kernels: a thread a query row (attn_prefill.wgsl), a row shared by threads
    (attn_prefill_wide.wgsl; at hd 64 here too, its smallest slice)."""
    monkeypatch.setenv("HEARTH_GPU_ATTN_WIDE_HD", "64" if kernel == "wide" else "off")
    nh, nkv, max_ctx = 4, 2, 288
    scale = 1.0 / np.sqrt(hd)
    k16, v16 = _kv16(rng, nkv, max_ctx, hd)
    q = rng.standard_normal((n, nh, hd)).astype(np.float32)
    ref = attention(q * np.float32(scale), k16.astype(np.float32), v16.astype(np.float32), pos, window)
    part, out = poisoned(dev, n * nh * splits * (hd + 2)), poisoned(dev, n * nh * hd)
    p = dict(n_head=nh, n_kv=nkv, max_ctx=max_ctx, scale=scale, window=window, n_splits=splits)
    dispatch_once(dev, ops.attn_prefill(ks, hd, kv_f16=True),
                  [dev.upload(q), dev.upload(k16), dev.upload(v16), part, dev.upload(np.array([pos, n], np.uint32))],
                  ops.attn_prefill_groups(n, nh, splits, hd), **p)
    dispatch_once(dev, ops.attn_prefill_combine(ks, hd), [part, out], ops.rows_groups(n * nh), **p)
    assert rel_err(read_f32(dev, out, n * nh * hd).reshape(n, -1), ref) < RTOL


def test_the_cache_host_copies_are_numpy_float16_bytes(dev, rng):
    kv = GpuKVCache(dev, 3, 2, 64, 40, "f16")
    try:
        assert kv.dtype == np.float16 and kv.nbytes == 2 * 3 * 2 * 40 * 64 * 2
        tensors = [(rng.standard_normal((2, 17, 64)).astype(np.float16),
                    rng.standard_normal((2, 17, 64)).astype(np.float16)) for _ in range(3)]
        for layer, (k, v) in enumerate(tensors):
            kv.write_prefix(layer, 17, k, v)
        for layer, (k, v) in enumerate(tensors):
            gk, gv = kv.read_prefix(layer, 17)
            assert gk.dtype == np.float16 and gk.tobytes() == k.tobytes() and gv.tobytes() == v.tobytes()
    finally:
        kv.destroy()


# ------------------------------------------------------------------------------ the whole engine

CHAT = ("<|im_start|>system\nYou are a helpful assistant. Answer briefly.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
LOGIT_TOL = 0.1   # as tests/test_kv_f16.py: float16's 11 bits through 30 layers move logits by ~0.01


@pytest.fixture(scope="module")
def gpu_engines():
    from hearth.engine import Engine  # noqa: PLC0415
    engs = [Engine.load(n_ctx=256, backend="gpu", kv_dtype=dt) for dt in ("f32", "f16", "f16")]
    yield engs
    for e in engs:
        e.close()


def test_gpu_float16_engine_matches_float32_and_the_cpu(gpu_engines):
    from hearth.engine import Sampling  # noqa: PLC0415
    g32, g16, _ = gpu_engines
    assert g16.kv_dtype == "f16" and g16.kv.nbytes * 2 == g32.kv.nbytes
    ids = g32.tokenize(CHAT)
    for e in (g32, g16):
        e.reset()
    l32, l16 = g32.feed(ids), g16.feed(ids)
    # centered (a shift common to every logit changes no probability), as tests/test_gpu_backend.py: on a real
    # GPU the f16 prefill products (HEARTH_GPU_F16) add their own ~0.035 to float16 KV's, mostly as such a shift
    d = l16.astype(np.float64) - l32
    # (measured on the H200: max |d| 0.122, centered 0.068 with f16 products; 0.007 / 0.007 without; lavapipe ~0.01)
    assert np.abs(d - d.mean()).max() < LOGIT_TOL and not np.array_equal(l16, l32)
    reply = lambda e: [ev.token_id for ev in e.generate(ids, max_tokens=12, sampling=Sampling(temperature=0))]  # noqa: E731
    assert reply(g16) == reply(g32)


def test_gpu_float16_image_round_trip_is_bit_identical(gpu_engines, tmp_path):
    import io  # noqa: PLC0415
    from hearth.engine.errors import PrefixImageError  # noqa: PLC0415
    g32, g16, h16 = gpu_engines
    for e in gpu_engines:
        e.reset()
    ids = g16.tokenize(CHAT)
    buf = io.BytesIO()
    size = g16.save_prefix(ids, buf)
    hdr = g16.prefix_header(ids)
    assert size == len(buf.getvalue()) and 2 * hdr.tensor_bytes == g32.prefix_header(ids).tensor_bytes
    buf.seek(0)
    assert h16.restore_prefix(ids, buf) == len(ids)
    for layer in range(g16.kv.n_layers):
        for x, y in zip(g16.kv.read_prefix(layer, len(ids)), h16.kv.read_prefix(layer, len(ids))):
            assert x.dtype == np.float16 and x.tobytes() == y.tobytes()
    assert np.array_equal(h16.feed([13]), g16.feed([13]))    # the restored cache computes the same
    buf.seek(0)
    with pytest.raises(PrefixImageError):
        g32.restore_prefix(ids, buf)
