"""What the GPU expert-product tests share (test_gpu_moe_kernels.py, test_gpu_moe_grouped.py): random
experts dequantized by gguf-py, routes, moe_sort.wgsl's tiles checked, and numpy's gate/up and
down-and-sum references over a route."""

from __future__ import annotations

import numpy as np

from hearth.engine.gpu import moe as gmoe
from hearth.engine.gpu.kernels import dispatch_once
from hearth.engine.models.layers import gelu_tanh_mul
from hearth.engine.models.moe import swiglu_oai
from tests.gpu_fixtures import dequant_reference, random_rows


def experts(rng, qtype, E, m, k):
    """uint8 [E, m, row bytes] and float64 [E, m, k] from gguf-py."""
    raw = np.stack([random_rows(rng, qtype, m, k) for _ in range(E)])
    return raw, dequant_reference(raw.reshape(E * m, -1), qtype, k).reshape(E, m, k)


def routes(rng, n, E, k, kind="random"):
    """ids u32 [n, k], weights f32 [n, k] summing to 1, and the route u32 [n, 2k] (ids, then weights as
    bits): "random" over all E experts, "empty" leaving experts 1 and E - 1 without a pair, "all"
    giving expert 2 every token (slot 0)."""
    pool = {"random": np.arange(E), "empty": np.array([e for e in range(E) if e not in (1, E - 1)]),
            "all": np.array([e for e in range(E) if e != 2])}[kind]
    ids = np.stack([rng.permutation(pool)[:k] for _ in range(n)]).astype(np.uint32)
    if kind == "all":
        ids[:, 0] = 2
    w = rng.random((n, k)).astype(np.float32)
    w /= w.sum(1, keepdims=True)
    return ids, w, np.concatenate([ids, w.view(np.uint32)], axis=1)


def checked_tiles(ks, route, n, E, k, tn: int, max_tiles: int):
    """moe_sort.wgsl's order and tiles buffers for route [n, 2k], the tiles checked: each covers up to
    tn consecutive pairs of one expert, together every pair once, the rest count 0."""
    dev = ks.dev
    order = dev.upload(np.full(n * k, 0xFFFFFFFF, np.uint32))
    tiles = dev.upload(np.full(max_tiles * 2, 0xFFFFFFFF, np.uint32))
    dispatch_once(dev, gmoe.sort_kernel(ks, E, k, tn), [dev.upload(route), order, tiles], (1, 1, 1),
                  n=n, max_tiles=max_tiles)
    o = dev.read([(order, 0, n * k * 4)]).view(np.uint32).astype(np.int64)
    t = dev.read([(tiles, 0, max_tiles * 8)]).view(np.uint32).reshape(max_tiles, 2).astype(np.int64)
    experts_of = route[:, :k].reshape(-1).astype(np.int64)
    covered = []
    for e, info in t:
        start, cnt = info & 0xFFFFFF, info >> 24
        assert cnt <= tn
        covered += o[start:start + cnt].tolist()
        assert (experts_of[o[start:start + cnt]] == e).all()
    assert sorted(covered) == list(range(n * k))
    return order, tiles


def act_ref(act, g, u):
    """The experts' activation of gate g times up u (float64 products; swiglu_oai and gelu in float32)."""
    if act == "swiglu_oai":
        return swiglu_oai(g.astype(np.float32), u.astype(np.float32))
    if act == "gelu":
        return gelu_tanh_mul(g.astype(np.float32), u.astype(np.float32))
    return g / (1 + np.exp(-g)) * u


def glu_ref(ids, xr, wg, wu, act, bg=None, bu=None):
    """float64 [n, k, ff]: act(gate) * up of token t's expert ids[t, s] on its row xr[t]; wg, wu
    [E, ff, d], biases [E, ff] or None."""
    n, k = ids.shape
    ref = np.zeros((n, k, wg.shape[1]))
    for t in range(n):
        for s in range(k):
            e = ids[t, s]
            g = wg[e] @ xr[t] + (0 if bg is None else bg[e])
            u = wu[e] @ xr[t] + (0 if bu is None else bu[e])
            with np.errstate(over="ignore"):        # exp(-g) of a large negative g: silu(g) = 0
                ref[t, s] = act_ref(act, g, u)
    return ref


def down_ref(ids, w, hr, wd, bd=None):
    """float64 [n, d]: token t's sum over its slots s of w[t, s] times expert ids[t, s]'s down product
    of row hr[t k + s]; wd [E, d, ff], bias bd [E, d] or None."""
    n, k = ids.shape
    ref = np.zeros((n, wd.shape[1]))
    for t in range(n):
        for s in range(k):
            e = ids[t, s]
            ref[t] += w[t, s] * (wd[e] @ hr[t * k + s] + (0 if bd is None else bd[e]))
    return ref
