"""Token sampling: `Sampling` (the settings) and `Sampler` (one generation's state).

The chain follows llama.cpp's default order, so the same settings behave the same way:
    penalties (repetition, presence, frequency over the last `repeat_last_n` tokens)
    -> top-k -> top-p -> min-p   (on the softmax of the penalized logits)
    -> temperature -> draw with the seeded generator.
Temperature 0 (or below) is greedy: the argmax of the penalized logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Sampling:
    temperature: float = 0.7
    top_k: int = 40            # 0: off
    top_p: float = 0.95        # 1.0: off
    min_p: float = 0.05        # 0.0: off
    repeat_penalty: float = 1.0    # 1.0: off; > 1 discourages tokens seen in the window
    presence_penalty: float = 0.0  # subtracted once from every token seen in the window
    frequency_penalty: float = 0.0  # subtracted per occurrence in the window
    repeat_last_n: int = 64    # the window the penalties look at (0: off, -1: everything)
    seed: int | None = None    # None: a fresh random seed per generation

    @classmethod
    def greedy(cls) -> "Sampling":
        return cls(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)


def penalties_off(s: Sampling) -> bool:
    return s.repeat_last_n == 0 or (s.repeat_penalty == 1.0 and s.presence_penalty == 0.0
                                    and s.frequency_penalty == 0.0)


def is_plain_greedy(s: Sampling) -> bool:
    """Temperature 0 and no penalties: every token is the argmax of the raw logits, which a
    backend may take on its device (GpuBackend.greedy_steps)."""
    return s.temperature <= 0.0 and penalties_off(s)


def apply_penalties(logits: np.ndarray, history, s: Sampling) -> np.ndarray:
    """A copy of logits with llama.cpp's penalties applied for the tokens in `history`'s window:
    repetition (positive logits divided by the penalty, negative ones multiplied), then
    minus count * frequency_penalty and minus presence_penalty once per seen token."""
    if not len(history) or penalties_off(s):
        return logits
    window = history if s.repeat_last_n < 0 else history[-s.repeat_last_n:]
    ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
    keep = (ids >= 0) & (ids < len(logits))
    ids, counts = ids[keep], counts[keep]
    out = logits.astype(np.float32, copy=True)
    v = out[ids]
    if s.repeat_penalty != 1.0:
        v = np.where(v > 0, v / s.repeat_penalty, v * s.repeat_penalty)
    v = v - counts * s.frequency_penalty - s.presence_penalty
    out[ids] = v
    return out


def candidates(logits: np.ndarray, s: Sampling) -> tuple[np.ndarray, np.ndarray]:
    """The tokens that survive top-k, top-p and min-p, and their (unnormalized) logits,
    sorted from most to least likely. At least one token always survives."""
    n = len(logits)
    k = s.top_k if 0 < s.top_k < n else n
    if k < n:
        ids = np.argpartition(-logits, k - 1)[:k]
    else:
        ids = np.arange(n)
    order = np.argsort(-logits[ids], kind="stable")
    ids = ids[order]
    lg = logits[ids].astype(np.float64)
    p = np.exp(lg - lg[0])
    p /= p.sum()
    keep = len(ids)
    if s.top_p < 1.0:
        # The smallest prefix whose probability reaches top_p.
        keep = min(keep, int(np.searchsorted(np.cumsum(p), s.top_p)) + 1)
    if s.min_p > 0.0:
        keep = min(keep, max(1, int((p >= s.min_p * p[0]).sum())))
    return ids[:keep], lg[:keep]


class Sampler:
    """Draws tokens for one generation; the same seed and logits give the same tokens."""

    def __init__(self, sampling: Sampling | None = None):
        self.s = sampling or Sampling()
        self.rng = np.random.default_rng(self.s.seed)

    def __call__(self, logits: np.ndarray, history=()) -> int:
        s = self.s
        logits = apply_penalties(logits, history, s)
        if s.temperature <= 0.0:
            return int(np.argmax(logits))
        ids, lg = candidates(logits, s)
        if len(ids) == 1:
            return int(ids[0])
        p = np.exp((lg - lg[0]) / s.temperature)
        c = np.cumsum(p)
        r = self.rng.random() * c[-1]
        return int(ids[min(int(np.searchsorted(c, r, side="right")), len(ids) - 1)])
