"""engine/cpu/attention.py: one decoded token's attention, one KV head's query heads a task, long
spans split into pieces whose softmaxes are merged (flash-decoding), against the numpy reference
(engine/models/layers.py `attend_one_numpy`, float32 products over the widened cache).

The spans sit on both sides of the split threshold and of a change in the number of pieces, start
at 0 and inside the cache (a sliding window), over float16 and float32 caches, with 1, 3 and 4
query heads per KV head. The queries are scaled so that the pieces' maxes differ by several units:
a merge that left out a piece, weighted one wrongly or skipped the rescale would be off by far more
than the float32 tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu.attention import SPLIT_FROM, attend_heads, attend_one, attend_serial, pieces
from hearth.engine.models.layers import attend_one_numpy


def _case(dtype, nkv, rep, hd, max_ctx, seed, q_scale=1.0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((nkv, max_ctx, hd)).astype(dtype)
    v = rng.standard_normal((nkv, max_ctx, hd)).astype(dtype)
    q = (rng.standard_normal((1, nkv * rep, hd)) * q_scale / np.sqrt(hd)).astype(np.float32)
    return q, k, v


def test_pieces_depend_on_the_span_alone_and_cover_it():
    assert pieces(1) == (1, 1) and pieces(SPLIT_FROM - 1) == (1, SPLIT_FROM - 1)
    for T in [SPLIT_FROM, SPLIT_FROM + 1, 700, 1024, 1025, 2000, 4097, 32768]:
        n, piece = pieces(T)
        assert n >= 2 and n % 2 == 0                  # 3 KV heads x an even count share out over 2 threads
        assert (n - 1) * piece < T <= n * piece      # every piece holds keys, together exactly T
    assert pieces(1024)[0] == 2 and pieces(1025)[0] == 4 and pieces(2000) == (4, 500)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("n_keys,start,hd,rep", [
    (SPLIT_FROM - 1, 0, 64, 3), (SPLIT_FROM, 0, 64, 3), (SPLIT_FROM + 1, 0, 64, 3),   # around the threshold
    (1025, 0, 64, 1), (2000, 0, 64, 3), (3001, 0, 64, 4),                             # long spans
    (600, 1400, 64, 3), (SPLIT_FROM, 37, 128, 4), (777, 5, 48, 3),                    # windows, other head sizes
])
def test_split_attention_against_numpy(dtype, n_keys, start, hd, rep):
    nkv = 3 if rep == 3 else 2
    q, k, v = _case(dtype, nkv, rep, hd, 4096, n_keys + start, q_scale=4.0)
    pos = start + n_keys - 1
    ref = attend_one_numpy(q, k, v, pos, n_keys if start else 0)[0]
    got = attend_one(q, k, v, start, n_keys, True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)   # float32 sums in another order
    assert np.array_equal(attend_one(q, k, v, start, n_keys, False), got)   # threads or not: the same bits


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_one_key_far_above_the_rest_dominates_across_pieces(dtype):
    # Each piece's softmax alone gives its own best key weight 1; merged, every piece but the one
    # holding the outstanding key must be scaled down to ~exp(-40).
    nkv, rep, hd, T = 2, 3, 64, 2000
    q, k, v = _case(dtype, nkv, rep, hd, T, 7)
    hot = 1234                                         # in piece 2 of 4
    for g in range(nkv):
        k[g, hot] = (q[0, g * rep] * (45.0 / float(q[0, g * rep] @ q[0, g * rep]))).astype(dtype)
    ref = attend_one_numpy(q, k, v, T - 1, 0)[0]
    got = attend_one(q, k, v, 0, T, True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    first = got[:hd]                                   # head 0 puts (almost) all its weight on `hot`
    np.testing.assert_allclose(first, v[0, hot].astype(np.float32), rtol=1e-4, atol=1e-5)


def test_the_compiled_entry_points_agree_with_attend_one():
    # decode_layer.py calls attend_heads / attend_serial on the cache's bytes, as attend_one does.
    nkv, rep, hd, T = 3, 3, 64, 1500
    q, k, v = _case(np.float16, nkv, rep, hd, 2048, 3)
    want = attend_one(q, k, v, 0, T)
    for fn in (attend_heads, attend_serial):
        out = np.full(nkv * rep * hd, np.nan, np.float32)
        scores = np.full(nkv * rep * T, np.nan, np.float32)
        fn(q.reshape(-1), k.view(np.uint8), v.view(np.uint8), True, 0, T, nkv * rep, rep, hd, scores, out)
        assert np.array_equal(out, want)
