"""Router ties in the tiny gpt-oss (../shared/reference/tiny-next/gpt-oss): where a layer's k-th and
(k+1)-th router logits nearly tie, which experts a token gets is decided by rounding, and llama.cpp's
reference (its CPU path rounds every product's x to 8 bits) may take the other one. Measured on the
english prompt: the float path (within 3e-5 of llama.cpp's all-F32 path at every position, on the
CPU and the GPU, batch and one token at a time) has its layer-1 2nd/3rd router logits 0.00018 apart
at position 24 and takes experts {1, 3} where 8-bit x takes {3, 6}; that position lands 0.239 mean
from the reference (every other one <= 0.13), and with the 8-bit path's choices forced, 0.129.
lavapipe's defaults (f32 x in the dense products, 8-bit in the experts') flip position 6 (layer 1,
0.0023 apart) and 24. 8-bit x moves the router logits by up to 0.11 (english) and 0.19 (chat)
against float x, the K projections' f16 products by 0.05; every flip seen on these paths was at a
margin under 0.06, and TIE leaves room over that. english has 8 positions of 40 within TIE (5, 6, 9,
19, 24, 27, 30, 33), chat none (its smallest margin is 0.14)."""

from __future__ import annotations

import numpy as np

TIE = 0.1
# How far a position lands from the reference when one of its experts flips (measured 0.239-0.254
# on the float, f16 and mixed paths); the 0.15 of the README for every other position.
FLIP_MEAN = 0.3


class _Recorder:
    """Stands in for one layer's MoeFfn.route: keeps its router logits float32 [n, n_expert]."""

    def __init__(self, moe):
        self.moe, self.seen = moe, []

    def __call__(self, h):
        logits = h @ self.moe.router.T
        if self.moe.router_b is not None:
            logits += self.moe.router_b
        self.seen.append(logits)
        return type(self.moe).route(self.moe, h)


def router_margins(be, ids) -> np.ndarray:
    """float32 [n_pos]: per position, the smallest gap over the layers between the k-th and (k+1)-th
    router logits, from a CPU backend's passes over ids one token at a time (so the logits come in
    position order)."""
    recs = [_Recorder(b.moe) for b in be.model.blocks]
    for b, r in zip(be.model.blocks, recs):
        b.moe.route = r
    try:
        be.kv.clear()
        for j, t in enumerate(ids):
            be.forward([t], j)
    finally:
        for b in be.model.blocks:
            del b.moe.route
    k = be.cfg.n_expert_used
    gaps = []
    for r in recs:
        s = -np.sort(-np.concatenate(r.seen), axis=1)          # [n_pos, n_expert] descending
        gaps.append(s[:, k - 1] - s[:, k])
    return np.min(gaps, axis=0)


def assert_agrees_off_ties(got, ref, margins):
    """As tiny_next.assert_agrees (mean 0.15 at each position, max 1.5, the same top-1 where the
    reference's top-2 gap is >= 0.5) at positions whose router decisions are all TIE or more from a
    tie; those within TIE held to FLIP_MEAN and not to the top-1."""
    tied = margins < TIE
    assert tied.sum() <= len(tied) // 4, f"{tied.sum()} of {len(tied)} positions at a router tie"
    at = np.take_along_axis(got, ref["ids"].astype(np.int64), axis=1)
    diff = np.abs(at - ref["logits"])
    mean = diff.mean(axis=1)
    assert mean[~tied].max() <= 0.15, (np.flatnonzero(~tied & (mean > 0.15)), mean.max())
    assert mean[tied].max(initial=0) <= FLIP_MEAN
    assert diff.max() <= 1.5
    sure = (ref["logits"][:, 0] - ref["logits"][:, 1] >= 0.5) & ~tied
    assert sure.sum() >= 2
    assert (got.argmax(-1) == ref["ids"][:, 0])[sure].all()
