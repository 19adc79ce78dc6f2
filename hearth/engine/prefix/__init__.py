"""Prefix images: the K/V cache of a prompt prefix written to a file, restored instead of recomputed.

The Engine's `prefix_key`, `save_prefix` and `restore_prefix` are the API; this package is the rest:

- format.py: the byte layout and `ImageHeader` (why CRC-32, what the header holds);
- key.py: `model_digest` and `key_digest`, the 256-bit key of an image;
- io.py: `write_image` and `read_image` (commit-then-verify, with rollback);
- store.py: `PrefixStore`, images on disk under their key, atomic writes, a size cap, `ensure()`.
"""

from .store import EnsureResult, PrefixStore

__all__ = ["EnsureResult", "PrefixStore"]
