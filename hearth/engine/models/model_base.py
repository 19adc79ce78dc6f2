"""What every architecture module's model class shares with the CPU backend: the 8-bit-x setting
of its matrices, reading its pages ahead, and the one-token tail of CpuBackend.forward.

A subclass sets `self.cfg` and implements `_matrices()` (every `Matrices`, in file order) and
`_run(ids, pos, state, want)` (the pass itself, returning the final hidden rows [n, d] or None).
"""

from __future__ import annotations

import numpy as np

from ..cpu.linear import Activations, int8_batches_default, int8_default
from . import weights as W
from .layers import rms_norm


class MatrixSettings:
    """The 8-bit-x setting and page reading of a model's matrices, shared by Decoder and ModelBase:
    a subclass sets `_int8` and `int8_batches_on` and implements `_matrices()`."""

    @property
    def int8_batches(self) -> bool:
        return self._int8 and self.int8_batches_on

    @property
    def arithmetic(self) -> dict:
        """How this model's products round beyond the backend's own settings, for prefix-image keys
        (CpuBackend.describe): empty unless an architecture lays its weights out otherwise."""
        return {}

    def _matrices(self) -> list[W.Matrices]:
        """Every matrix, in file order."""
        raise NotImplementedError

    def set_int8(self, on: bool) -> None:
        """Whether one-row products of quantized matrices quantize x to 8 bits (engine/cpu/linear.py)."""
        self._int8 = bool(on)
        for m in self._matrices():
            for p in m.parts:
                if hasattr(p, "int8"):
                    p.int8 = on

    def make_resident(self, progress=None) -> None:
        """Read one byte of every page of every matrix, in file order: the first token then does
        not wait for the disk, and loading a large file can report a percentage
        (`progress(fraction, what)`)."""
        mats = self._matrices()
        total = sum(m.nbytes for m in mats) or 1
        done = 0
        for m in mats:
            m.touch()
            done += m.nbytes
            if progress is not None:
                progress(0.05 + 0.9 * done / total, "reading weights")


class ModelBase(MatrixSettings):
    cfg: object
    output: W.Matrices
    output_norm: np.ndarray
    # The compiled one-token layers are the plain decoder's; these models run per operation.
    compiled = None
    compiled_reason = "an architecture module of its own"

    def _load_ends(self, g, ld: W.Loader) -> None:
        """The token embedding, the output matrix (the embedding's where tied) and the final norm."""
        c = self.cfg
        d = c.n_embd
        self.tok_embd = W.RowLookup(g, "token_embd.weight", c.n_vocab, d)
        self.output = ld.matrix(["token_embd.weight" if c.tied_output else "output.weight"], d, [c.n_vocab])
        self.output_norm = W.tensor(g, "output_norm.weight", (d,))

    def _init_int8(self) -> None:
        self._int8 = int8_default()
        self.int8_batches_on = int8_batches_default()

    def forward(self, ids: np.ndarray, pos: int, state, all_logits: bool = False, par=None,
                logits: bool = True, tail: int | None = None) -> np.ndarray | None:
        """ids int [n] at positions [pos, pos + n): advances `state` (K/V and recurrent layers) and
        returns float32 logits [n_vocab] of the last position ([n, n_vocab] with all_logits).
        `tail`: then the one-token pass of that id at pos + n; its logits are returned (CpuBackend's
        contract; here simply the two passes one after the other)."""
        if tail is not None:
            self.forward(ids, pos, state, logits=False, par=par)
            state.n_tokens = pos + len(ids)
            return self.forward(np.array([tail], np.int64), pos + len(ids), state, par=par)
        # The products' weight tiles and attention's KV heads spread over the backend's threads (the
        # pieces are fixed by the shapes, so the bits do not depend on the thread count); rows stay
        # together, the delta rule being sequential in them.
        work = getattr(par, "work", None) or (par if hasattr(par, "map") else None)
        # Sigmoids and SiLUs as x / (1 + exp(-x)): exp overflows to inf for x < -88, which gives the
        # right limit (0, -0); numpy's warning about it says nothing.
        with np.errstate(over="ignore"):
            x = self._run(np.asarray(ids, np.int64), pos, state, work)
        if not logits:
            return None
        rows = x if all_logits else x[-1:]
        out = self.logits(rows, len(ids) == 1 or self.int8_batches)
        return out if all_logits else out[0]

    def _run(self, ids, pos, state, work) -> np.ndarray:
        raise NotImplementedError

    def logits(self, rows: np.ndarray, i8: bool) -> np.ndarray:
        h = rms_norm(rows, self.output_norm, self.cfg.rms_eps)
        out = np.empty((len(rows), self.cfg.n_vocab), np.float32)
        self.output.parts[0](Activations(h, i8), out)
        return out
