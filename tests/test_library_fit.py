"""hearth.engine.library.fit: fits / tight / won't fit from a memory estimate, replaceable by the engine's."""

from __future__ import annotations

from hearth.engine.library import fit
from hearth.engine.library.fit import Fit, fit_before_download, fit_for, judge, kv_cache_bytes, simple_estimate
from hearth.engine.library.model_facts import read_facts
from hub_fixtures import tiny_models  # noqa: F401


def test_kv_cache_bytes_match_the_engine_cache(tiny_models):
    from hearth.engine.kv_cache import KVCache
    f = read_facts(tiny_models["llama"])
    kv = KVCache(f.n_layer, f.n_head_kv, f.head_dim, 256)
    assert kv_cache_bytes(f, 256) == kv.nbytes


def test_judge_thresholds():
    assert judge(80, 100) is Fit.FITS
    assert judge(81, 100) is Fit.TIGHT
    assert judge(100, 100) is Fit.TIGHT
    assert judge(101, 100) is Fit.WONT_FIT
    assert judge(1, None) is Fit.UNKNOWN


def test_fit_grows_with_context(tiny_models):
    f = read_facts(tiny_models["llama"])
    small = simple_estimate(f, 512)
    assert small > f.size
    avail = int(small / 0.8) + 1  # just fits at 512 tokens; 8,192 tokens add 5.9 MB of cache
    assert fit_for(f, 512, available=avail)[0] is Fit.FITS
    assert fit_for(f, 8192, available=avail)[0] is Fit.WONT_FIT


def test_the_estimate_is_replaceable(tiny_models, monkeypatch):
    f = read_facts(tiny_models["llama"])
    monkeypatch.setattr(fit, "ESTIMATE", lambda facts, n_ctx: 10**15)
    assert fit_for(f, 512, available=10**12) == (Fit.WONT_FIT, 10**15)
    assert fit_for(f, 512, available=10**12, estimate=lambda facts, n: 1) == (Fit.FITS, 1)


def test_before_download_uses_the_size():
    assert fit_before_download(1000, available=2000) == (Fit.FITS, 1200)
    assert fit_before_download(1000, available=1100)[0] is Fit.WONT_FIT
    assert fit.available_memory() > 0
