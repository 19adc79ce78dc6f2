"""Block scales that no valid file holds, found at load so that a damaged file is refused with its
name and tensor instead of giving NaN logits when a token reaches the bad block.

MXFP4 (17-byte blocks: an E8M0 scale byte, then 16 bytes of codes): the OCP MX spec defines the
scale byte 0xFF as NaN. llama.cpp reads it as 2^127 (ggml_e8m0_to_fp32_half), which overflows a
weight of code 12 to inf and the token's activations to NaN, and only for tokens routed to that
expert, so a test prompt can miss it.

The scan reads one byte in 17 of every MXFP4 tensor: a strided max over the mapped file (0xFF is
the largest byte, so the max says whether it occurs), pages mapped first in one call each
(resident_pages.populate) where the kernel can, which the backends' loads then find resident.
Measured on the 4-layer gpt-oss-20b shape (1.7 GB of MXFP4 of a 3.1 GB file, page cache warm, a
busy 2-core machine): 0.05-0.2 s, 5-7% of its CPU Engine.load (1.4-2.1 s); it reads every cache
line of the MXFP4 data once (a scale byte every 17), so it costs what one pass over that memory does.
"""

from __future__ import annotations

import numpy as np

from ..errors import GGUFError
from ..system.resident_pages import populate

NAN_E8M0 = 0xFF
CHUNK_BLOCKS = 1 << 22           # blocks a step (71 MB of MXFP4): the pages mapped, then scanned


def check_scales(g) -> None:
    """Raise GGUFError naming the file, the tensor and the first bad block (with its row and, for
    a 3-D expert tensor, its expert) if an MXFP4 tensor of `g` holds the scale byte 0xFF."""
    for name, t in g.tensors.items():
        if t.type.name != "MXFP4" or t.data.nbytes == 0:
            continue
        blocks = t.data.reshape(-1, t.type.type_size)                       # uint8 [n blocks, 17]
        for s in range(0, len(blocks), CHUNK_BLOCKS):
            part = blocks[s:s + CHUNK_BLOCKS]
            populate(part, write=False)
            scales = part[:, 0]
            if scales.max() == NAN_E8M0:
                raise _bad_block(g, name, t, s + int(np.argmax(scales == NAN_E8M0)))


def _bad_block(g, name: str, t, i: int) -> GGUFError:
    per_row = t.shape[0] // t.type.block_size
    row = i // per_row
    where = f"row {row}"
    if len(t.shape) == 3:
        where = f"expert {row // t.shape[1]}, row {row % t.shape[1]}"
    return GGUFError(f"{g.path.name}: tensor {name} (MXFP4) has a bad block scale: block {i} ({where}) "
                     f"has the scale byte 0xFF, which MXFP4's E8M0 scale defines as NaN; the file is damaged")
