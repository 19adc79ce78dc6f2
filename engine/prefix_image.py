"""Prefix images: the K/V cache of a prompt prefix written to a file, restored instead of recomputed.

This module is the engine's side: `prefix_key`, `save_prefix` and `restore_prefix` (what
`Engine.prefix_key` / `save_prefix` / `restore_prefix` call). The parts, each in its own module and
all importable from here as before:

- engine/prefix_format.py: the byte layout and `ImageHeader` (why CRC-32, what the header holds);
- engine/prefix_key.py: `model_digest` and `key_digest`, the 256-bit key of an image;
- engine/prefix_io.py: `write_image` and `read_image` (commit-then-verify, with rollback).
"""

from __future__ import annotations

from .errors import EngineError
from .prefix_format import (CHECKSUM_SIZE, DTYPE_F32, DTYPE_NAMES, F32, FLAG_LOGITS, FORMAT_VERSION, HEADER_SIZE,
                            I32, MAGIC, ImageHeader)
from .prefix_io import RunningCrc, read_header, read_image, write_all, write_image
from .prefix_key import _model_cache as _model_cache  # tests check what is cached
from .prefix_key import key_digest, model_digest

__all__ = ["CHECKSUM_SIZE", "DTYPE_F32", "DTYPE_NAMES", "F32", "FLAG_LOGITS", "FORMAT_VERSION", "HEADER_SIZE", "I32",
           "MAGIC", "ImageHeader", "RunningCrc", "read_header", "read_image", "write_all", "write_image",
           "key_digest", "model_digest", "prefix_ids", "expected_header", "prefix_key", "save_prefix",
           "restore_prefix"]


# ------------------------------------------------------------------------------- the engine's API
# Engine.prefix_key / save_prefix / restore_prefix call these. An engine here needs: tokenize(text),
# tokens, prefill(text), reset(), config.n_vocab, gguf, backend (.describe(), .kv), _lock, _last_logits
# and _adopt_prefix(ids, last_logits).

def prefix_ids(engine, text) -> list[int]:
    """The prefix's token ids, tokenized exactly as `prefill` does."""
    ids = engine.tokenize(text) if isinstance(text, str) else [int(i) for i in text]
    if not ids:
        raise EngineError("the prefix is empty (no tokens)")
    return ids


def expected_header(engine, ids) -> ImageHeader:
    """The header this engine writes for `ids` (and accepts on restore)."""
    kv = engine.backend.kv
    key = key_digest(backend=engine.backend.describe(), model=model_digest(engine.gguf), ids=ids)
    return ImageHeader(kv.n_layers, kv.n_kv_heads, kv.head_dim, len(ids), int(engine.config.n_vocab), key)


def prefix_key(engine, text) -> str:
    """The key (64 hex digits) of the image this engine would write for `text`."""
    return key_digest(backend=engine.backend.describe(), model=model_digest(engine.gguf),
                      ids=prefix_ids(engine, text)).hex()


def save_prefix(engine, text, f) -> int:
    """Make `text` resident (computing only what is not) and stream its image to `f`; returns the
    image's size. The engine is unchanged by a failing `f` (a full disk): writing only reads the cache."""
    ids = prefix_ids(engine, text)
    with engine._lock:  # noqa: SLF001  (no generate may move the cache while it is written)
        engine.prefill(ids)
        logits = engine._last_logits  # noqa: SLF001
        if logits is None:  # prefill always leaves them; keep the image whole if that ever changes
            raise EngineError("save_prefix: the engine has no logits after the prefix")
        return write_image(f, expected_header(engine, ids), ids, engine.backend.kv, logits)


def restore_prefix(engine, text, f) -> int:
    """Read an image of `text` from `f` into the cache and make it resident, with its last logits, so
    that generating right after it computes nothing. Returns its token count. Refuses with
    PrefixImageError (the engine's tokens and their K/V as before) on any mismatch or damage."""
    ids = prefix_ids(engine, text)
    with engine._lock:  # noqa: SLF001
        engine.backend.kv.check_fits(0, len(ids))
        want = expected_header(engine, ids)
        try:
            logits = read_image(f, want, ids, engine.backend.kv, resident=len(engine.tokens))
        except BaseException as e:
            if not getattr(e, "kv_restored", True):
                engine.reset()  # the rollback itself failed: forget everything rather than lie
            raise
        engine._adopt_prefix(ids, logits)  # noqa: SLF001
    return len(ids)
