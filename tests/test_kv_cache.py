"""KVCache: one allocation, views without copies, ContextFullError before writing."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.errors import ContextFullError, EngineError
from hearth.engine.kv_cache import KVCache


@pytest.fixture
def kv():
    return KVCache(n_layers=3, n_kv_heads=2, head_dim=4, max_ctx=16)


def test_layout_and_nbytes(kv):
    assert kv.k[0].shape == (2, 16, 4) and kv.k[0].dtype == np.float32
    assert all(a.flags.c_contiguous for a in kv.k + kv.v)
    assert kv.nbytes == 2 * 3 * 2 * 16 * 4 * 4


def test_read_prefix_is_a_view(kv):
    k, v = kv.read_prefix(1, 5)
    assert k.shape == v.shape == (2, 5, 4)
    assert np.shares_memory(k, kv.k[1]) and np.shares_memory(v, kv.v[1])
    kv.k[1][1, 4, 2] = 7.0
    assert k[1, 4, 2] == 7.0


def test_write_then_read_round_trip(kv):
    rng = np.random.default_rng(0)
    k = rng.standard_normal((2, 6, 4)).astype(np.float32)
    v = rng.standard_normal((2, 6, 4)).astype(np.float32)
    kv.write_prefix(2, 6, k, v)
    rk, rv = kv.read_prefix(2, 6)
    assert np.array_equal(rk, k) and np.array_equal(rv, v)
    assert not kv.k[1].any()  # other layers untouched


def test_write_at_fills_a_span_and_nothing_else(kv):
    rng = np.random.default_rng(1)
    k0, v0 = (rng.standard_normal((2, 9, 4)).astype(np.float32) for _ in range(2))
    kv.write_prefix(1, 9, k0, v0)
    wide = rng.standard_normal((2, 12, 4)).astype(np.float32)
    k, v = wide[:, 2:7], -wide[:, 2:7]            # non-contiguous spans of 5 positions
    kv.write_at(1, 3, k, v)
    rk, rv = kv.read_prefix(1, 9)
    assert np.array_equal(rk[:, 3:8], k) and np.array_equal(rv[:, 3:8], v)
    assert np.array_equal(rk[:, :3], k0[:, :3]) and np.array_equal(rk[:, 8:], k0[:, 8:])
    assert np.array_equal(rv[:, :3], v0[:, :3]) and np.array_equal(rv[:, 8:], v0[:, 8:])
    before = kv.k[1].copy()
    with pytest.raises(ContextFullError):
        kv.write_at(1, 14, k, v)                  # 14 + 5 > 16: refused before writing
    with pytest.raises(EngineError):
        kv.write_at(1, 0, k, v[:, :4])            # K and V of other shapes
    assert np.array_equal(kv.k[1], before)


def test_write_prefix_checks_shape(kv):
    with pytest.raises(EngineError, match="shape"):
        kv.write_prefix(0, 3, np.zeros((2, 4, 4), np.float32), np.zeros((2, 3, 4), np.float32))


def test_context_full_is_raised_before_writing(kv):
    kv.check_fits(10, 6)
    with pytest.raises(ContextFullError):
        kv.check_fits(10, 7)
    assert issubclass(ContextFullError, EngineError)
    with pytest.raises(ContextFullError):
        kv.write_prefix(0, 17, np.zeros((2, 17, 4), np.float32), np.zeros((2, 17, 4), np.float32))
    assert not kv.k[0].any()


def test_truncate_and_clear_keep_the_allocation(kv):
    buf_k, buf_v = kv.k[0], kv.v[0]
    kv.n_tokens = 9
    kv.truncate(4)
    assert kv.n_tokens == 4
    kv.truncate(8)  # truncate never grows
    assert kv.n_tokens == 4
    kv.clear()
    assert kv.n_tokens == 0
    assert kv.k[0] is buf_k and kv.v[0] is buf_v and kv.nbytes == 2 * 3 * 2 * 16 * 4 * 4


def test_prefault_maps_the_pages_and_keeps_what_is_written():
    import numpy as np

    from hearth.engine.kv_cache import KVCache
    kv = KVCache(2, 2, 64, 4096)
    k = np.random.default_rng(0).standard_normal((2, 10, 64)).astype(np.float32)
    kv.store(1, 0, k, -k)
    assert kv.prefault()  # Linux 5.14+ (CI's and this machine's kernels)
    assert np.array_equal(kv.k[1][:, :10], k) and np.array_equal(kv.v[1][:, :10], -k)
    assert not kv.k[0].any()
