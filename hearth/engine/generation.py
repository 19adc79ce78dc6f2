"""What `Engine.generate` yields, and the stop-string matcher it uses.

Streaming with stop strings: text that could still turn out to be the start of a stop string
is held back until it cannot; the stop string itself is never emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .errors import EngineError


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids `a` and `b` share: what a prompt can reuse of the resident ones."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n]) != np.asarray(b[:n])
    i = int(np.argmax(x))
    return n if not x[i] else i


def cancel_check(cancel) -> Callable[[], bool]:
    """A generation's `cancel` argument (a threading.Event, a callable or None) as a function that
    says whether to stop; the local Engine and the remote client take the same forms."""
    if cancel is None:
        return lambda: False
    if hasattr(cancel, "is_set"):
        return cancel.is_set
    if callable(cancel):
        return lambda: bool(cancel())
    raise EngineError("cancel must be a threading.Event, a callable or None")


@dataclass
class GenerationStats:
    reused_tokens: int = 0       # prompt tokens already resident (common prefix), not recomputed
    computed_tokens: int = 0     # prompt tokens run through the model
    generated_tokens: int = 0    # tokens sampled (the end-of-generation token included)
    ttft_s: float = 0.0          # call -> first token sampled
    prefill_s: float = 0.0
    decode_s: float = 0.0
    prefill_tps: float = 0.0     # computed_tokens / prefill_s
    decode_tps: float = 0.0      # tokens decoded after the first / decode_s


@dataclass
class GenerationEvent:
    text: str = ""                       # the new text (may be empty)
    token_id: int | None = None          # the token sampled at this step, if any
    final: bool = False
    stop_reason: str | None = None       # final only: "eog", "stop", "length", "cancelled", "context_full"
    stats: GenerationStats | None = field(default=None)


class StopMatcher:
    """Feed text deltas; get back what is safe to emit and whether a stop string was reached."""

    def __init__(self, stops):
        self.stops = [s for s in (stops or ()) if s]
        self.pending = ""

    def feed(self, delta: str) -> tuple[str, bool]:
        """Returns (text to emit now, stopped). On a stop, the text before the stop string."""
        self.pending += delta
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        hits = [(self.pending.find(s), s) for s in self.stops]
        hits = [(i, s) for i, s in hits if i >= 0]
        if hits:
            i = min(i for i, _ in hits)
            out, self.pending = self.pending[:i], ""
            return out, True
        hold = self._held_suffix()
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out

    def _held_suffix(self) -> int:
        """Length of the longest suffix of pending that is a proper prefix of a stop string."""
        p = self.pending
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(p)), best, -1):
                if p.endswith(s[:n]):
                    best = n
                    break
        return best
