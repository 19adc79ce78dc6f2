"""The prefix image format: its byte layout and its header (`ImageHeader`).

A prefix image is the K/V cache of a prompt prefix written to a file, restored instead of recomputed
(the Engine's `prefix_key`, `save_prefix` and `restore_prefix` are the API; io.py writes and reads
images, key.py computes their key).

Image layout (little-endian throughout; `n` = token count, `L`/`H`/`D` = layers, KV heads, head dim):

    offset  size                what
    0       128                 header (below)
    128     4 n                 token ids, int32 [n]
    ...     2 L x e H n D       for each layer: K then V, the cache's dtype [H, n, D] (head-major, as
                                the cache; e = 4 bytes for float32, 2 for float16)
    ...     4 S                 the state K/V tensors do not hold, float32 [S] (if FLAG_STATE): a hybrid
                                model's recurrent state after the last token (every conv window, then
                                every delta-rule state; L counts only the attention layers), or the K/V
                                of a SplitKV's caches after the first (layer_state: read_state)
    ...     4 n_vocab           logits after the last token, float32 [n_vocab]  (if FLAG_LOGITS)
    end-4   4                   CRC-32 of every byte before it (header included)

Header (128 bytes):
    0   8   magic b"\\x89HPX\\r\\n\\x1a\\n"  (a high byte, CR LF, ^Z, LF: like PNG's, so a text-mode
            transfer or a truncation to 7 bits is caught as 'magic', not as a wrong checksum)
    8   4   u32 format version          12  4  u32 header size (128)
    16  4   u32 dtype (1 = float32, 16 = float16)   20  4  u32 flags (bit 0: logits, bit 1: state)
    24  4   u32 n_layers                28  4  u32 n_kv_heads
    32  4   u32 head_dim                36  4  u32 n_tokens
    40  4   u32 n_vocab                 44  4  u32 S: recurrent state floats (0 without FLAG_STATE)
    48  8   u64 image size in bytes, header to checksum included
    56  32  key: blake2b-256 of everything the K/V values depend on (`key_digest`)
    88  36  reserved, 0
    124 4   u32 CRC-32 of bytes [0, 124): a damaged header is refused as 'header' before its sizes
            are believed, so a flipped bit cannot make the reader allocate or wait for gigabytes.

Why CRC-32 (zlib's) for the trailer: it detects every single-bit flip, every burst of up to 32 bits and
random damage with probability 1 - 2^-32, and the standard library computes it; ISA-L's (checksum.py)
gives the same values at ~10 GB/s here, so a 4,000-token SmolLM2 chat's 175 MB of float32 K/V checks in
~17 ms (zlib's own: ~2 GB/s, ~90 ms). blake2b runs at ~0.65 GB/s; crc32c is not in the standard library.
Images are a local cache, not a trust
boundary, and the 256-bit key (protected by the header CRC) is what decides an image's identity.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from ..errors import PrefixImageError

MAGIC = b"\x89HPX\r\n\x1a\n"
FORMAT_VERSION = 1
HEADER_SIZE = 128
# KV dtype codes. float16 is 16 (its bit width) rather than the next free number so that no code
# between them is ever read as a dtype: an image whose dtype field was damaged to 2..15 is refused
# as "dtype" before its sizes are believed.
DTYPE_F32 = 1
DTYPE_F16 = 16
DTYPE_NAMES = {DTYPE_F32: "float32", DTYPE_F16: "float16"}
DTYPE_NUMPY = {DTYPE_F32: np.dtype("<f4"), DTYPE_F16: np.dtype("<f2")}
FLAG_LOGITS = 1
FLAG_STATE = 2     # a recurrent state snapshot follows the K/V
CHECKSUM_SIZE = 4
U32_MAX = 0xFFFFFFFF

# magic, version, header size, dtype, flags, n_layers, n_kv_heads, head_dim, n_tokens, n_vocab,
# state floats u32, image size u64, key, 36 reserved bytes  -> 124 bytes; then the header CRC.
_HEADER = struct.Struct("<8s10IQ32s36x")
assert _HEADER.size == HEADER_SIZE - 4

F32 = np.dtype("<f4")
I32 = np.dtype("<i4")


def dtype_code(dtype) -> int:
    """The header's code of a KV cache's numpy dtype (float32 or float16)."""
    dt = np.dtype(dtype).newbyteorder("<")
    for code, known in DTYPE_NUMPY.items():
        if known == dt:
            return code
    raise ValueError(f"no prefix image dtype for {dt}")


class KVFileSizes:
    """The sizes of a file of K/V tensors (a prefix image or a chat segment): header, token ids,
    every layer's K and V, the last logits when flagged, the closing CRC."""

    @property
    def has_logits(self) -> bool:
        return bool(self.flags & FLAG_LOGITS)

    @property
    def kv_dtype(self) -> np.dtype:
        """The numpy dtype of the K and V tensors (the logits are float32 whatever it is)."""
        return DTYPE_NUMPY[self.dtype]

    @property
    def tensor_bytes(self) -> int:
        """Bytes of one K or V tensor: kv_dtype [n_kv_heads, n_tokens, head_dim]."""
        return self.kv_dtype.itemsize * self.n_kv_heads * self.n_tokens * self.head_dim

    @property
    def has_state(self) -> bool:
        return bool(self.flags & FLAG_STATE)

    def check_fields(self) -> None:
        """Refuse (ValueError, naming the field) to describe a file whose u32 header fields cannot
        hold its sizes: a SplitKV's state section grows with the tokens (2 L H n D floats), and a
        wrapped count would make a file that is refused on every read, or worse, read wrong."""
        for name in ("n_layers", "n_kv_heads", "head_dim", "n_tokens", "n_vocab", "n_state", "start"):
            v = int(getattr(self, name, 0))
            if not 0 <= v <= U32_MAX:
                raise ValueError(f"the {name} field ({v:,}) does not fit the header's 32 bits; this "
                                 f"context is too long to keep on disk")

    @property
    def image_size(self) -> int:
        logits = 4 * self.n_vocab if self.has_logits else 0
        return (HEADER_SIZE + 4 * self.n_tokens + 2 * self.n_layers * self.tensor_bytes
                + 4 * getattr(self, "n_state", 0) + logits + CHECKSUM_SIZE)


@dataclass(frozen=True)
class ImageHeader(KVFileSizes):
    n_layers: int
    n_kv_heads: int
    head_dim: int
    n_tokens: int
    n_vocab: int
    key: bytes
    flags: int = FLAG_LOGITS
    dtype: int = DTYPE_F32
    version: int = FORMAT_VERSION
    n_state: int = 0      # float32 values of the recurrent state snapshot (FLAG_STATE)

    def pack(self) -> bytes:
        self.check_fields()
        body = _HEADER.pack(MAGIC, self.version, HEADER_SIZE, self.dtype, self.flags, self.n_layers,
                            self.n_kv_heads, self.head_dim, self.n_tokens, self.n_vocab, self.n_state,
                            self.image_size, self.key)
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def unpack(cls, raw: bytes) -> "ImageHeader":
        """Parse and check a header on its own (magic, version, CRC, declared size); `raw` is the first
        up-to-128 bytes of a file. Sizes are checked against a model by `check_against`."""
        if not raw:
            raise PrefixImageError("empty", "the prefix image is empty (0 bytes)")
        if raw[:len(MAGIC)] != MAGIC[:len(raw)]:
            raise PrefixImageError("magic", f"not a Hearth prefix image (starts with {raw[:8]!r})")
        if len(raw) < HEADER_SIZE:
            raise PrefixImageError("truncated", f"the prefix image ends inside its header ({len(raw)} of "
                                                f"{HEADER_SIZE} bytes)")
        (magic, version, header_size, dtype, flags, n_layers, n_kv_heads, head_dim, n_tokens, n_vocab,
         n_state, image_size, key) = _HEADER.unpack_from(raw)
        if version != FORMAT_VERSION:
            raise PrefixImageError("version", f"the prefix image has format version {version}; this engine "
                                              f"reads version {FORMAT_VERSION}")
        (crc,) = struct.unpack_from("<I", raw, HEADER_SIZE - 4)
        if crc != zlib.crc32(raw[:HEADER_SIZE - 4]):
            raise PrefixImageError("header", "the prefix image's header is damaged (header CRC mismatch)")
        if (header_size != HEADER_SIZE or any(raw[88:124]) or flags & ~(FLAG_LOGITS | FLAG_STATE)
                or bool(n_state) != bool(flags & FLAG_STATE)):
            raise PrefixImageError("header", "the prefix image's header has fields this version does not "
                                             "define (header size, flags or reserved bytes)")
        if dtype not in DTYPE_NAMES:
            raise PrefixImageError("dtype", f"the prefix image holds dtype code {dtype}; float32 (1) and "
                                            f"float16 (16) are read")
        h = cls(n_layers, n_kv_heads, head_dim, n_tokens, n_vocab, key, flags, dtype, version, n_state)
        if image_size != h.image_size:
            raise PrefixImageError("header", f"the prefix image's header declares {image_size} bytes but "
                                             f"its sizes add up to {h.image_size}")
        return h

    def check_against(self, want: "ImageHeader") -> None:
        """Refuse an image whose sizes or key differ from what this engine would write (`want`)."""
        for field, label in (("n_layers", "layers"), ("n_kv_heads", "KV heads"), ("head_dim", "head dim"),
                             ("n_vocab", "vocabulary size"), ("dtype", "dtype"),
                             ("n_state", "recurrent state values")):
            got, exp = getattr(self, field), getattr(want, field)
            if got != exp:
                raise PrefixImageError("shape", f"the prefix image has {got} {label}, this model {exp}")
        if self.key != want.key:
            raise PrefixImageError("key", "the prefix image was made for another prefix, model, tokenizer, "
                                          "backend, engine build or machine (key mismatch)")
        if self.n_tokens != want.n_tokens:
            raise PrefixImageError("shape", f"the prefix image holds {self.n_tokens} tokens under the key of "
                                            f"a {want.n_tokens}-token prefix")

