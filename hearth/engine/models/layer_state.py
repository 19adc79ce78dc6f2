"""A hybrid model's state: K/V rows for its attention layers and a fixed-size recurrent state for
its linear-attention layers, all allocated once.

    kv            KVCache over the attention layers only: kv.k[slot], kv.v[slot]
                  [n_kv_heads, max_ctx, head_dim]; `attn_slot[layer]` says which slot a layer owns
    conv[r]       float32 [d_conv - 1, conv_channels]: the last d_conv - 1 inputs of the r-th
                  recurrent layer's causal convolution (zeros before the first token)
    delta[r]      float32 [H_v, S_v, S_k]: its delta-rule state matrix per value head
                  (engine/models/delta_net.py says why rows are value dims)
conv and delta are views into one array each ([n_recurrent, ...], contiguous per layer).

Rolling K/V back is a slice (positions past n are ignored); rolling a recurrent state back is not:
the state after n tokens is not recoverable from the state after more. So `truncate(n)` below n
tokens refuses, and the Engine goes back by restoring a `Snapshot` taken at or before n and
recomputing the tokens after it (engine.py: `_rewind`). Nothing here ever pretends to hold a
state it does not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import EngineError
from ..kv_cache import KVCache


@dataclass(frozen=True)
class Snapshot:
    """The recurrent state after `n_tokens` tokens (K/V need no copy: positions below n stay)."""
    n_tokens: int
    conv: np.ndarray      # copy of HybridState._conv
    delta: np.ndarray     # copy of HybridState._delta
    logits: np.ndarray | None = None   # float32 [n_vocab] after the n_tokens-th token, when known

    @property
    def nbytes(self) -> int:
        return self.conv.nbytes + self.delta.nbytes


class RecurrentState:
    """What a hybrid model's state shares on either backend (this module's HybridState,
    gpu/delta_state.GpuHybridState): KVCache-like reads through `kv` (the attention layers' K/V,
    by slot), truncation rules, prefix images (those K/V plus the recurrent state) and chat
    segments (a segment's K/V plus the state at its end). A subclass sets `kv`, `n_layers`,
    `attn_slot` and provides `recurrent_nbytes`, `clear`, `snapshot`, `restore`, `state_layout`,
    `state_size`, `read_state` and `write_state`. `recurrent = True` tells the Engine that
    truncation costs a snapshot and a recompute."""

    recurrent = True

    @property
    def n_tokens(self) -> int:
        return self.kv.n_tokens

    @n_tokens.setter
    def n_tokens(self, n: int) -> None:
        self.kv.n_tokens = n

    @property
    def max_ctx(self) -> int:
        return self.kv.max_ctx

    @property
    def dtype(self):
        return self.kv.dtype

    @property
    def n_kv_heads(self) -> int:
        return self.kv.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.kv.head_dim

    @property
    def nbytes(self) -> int:
        """K/V of the attention layers plus the recurrent state."""
        return self.kv.nbytes + self.recurrent_nbytes

    def check_fits(self, pos: int, n: int) -> None:
        self.kv.check_fits(pos, n)

    def truncate(self, n: int) -> None:
        """Keep n tokens: only n >= n_tokens (nothing to forget) or n == 0 (clear) is possible here;
        going back further needs a snapshot and a recompute (Engine.truncate does it)."""
        if n >= self.n_tokens:
            return
        if n <= 0:
            self.clear()
            return
        raise EngineError(f"a recurrent state cannot be truncated from {self.n_tokens} to {n} tokens "
                          "in place; restore a snapshot and recompute")

    # -- prefix images: the attention layers' K/V (by slot) plus the recurrent state ------------

    @property
    def image_layers(self) -> int:
        """The K/V tensors pairs an image holds: one per attention layer (slot order)."""
        return self.kv.n_layers

    def read_prefix(self, slot: int, n: int):
        return self.kv.read_prefix(slot, n)

    def write_prefix(self, slot: int, n: int, k, v) -> None:
        self.kv.write_prefix(slot, n, k, v)

    def write_at(self, slot: int, start: int, k, v) -> None:
        self.kv.write_at(slot, start, k, v)

    def layer_pattern(self) -> str:
        return "".join("a" if i in self.attn_slot else "r" for i in range(self.n_layers))

    # -- chat segments: the attention layers' K/V of the segment's positions plus the state at its end

    @property
    def image_cache(self):
        return self.kv

    def segment_state_size(self, start: int, n: int) -> int:
        return self.state_size(start + n)

    def read_segment_state(self, start: int, end: int) -> np.ndarray:
        """The state after `end` tokens: only while it is the current one."""
        if end != self.n_tokens:
            raise EngineError(f"the recurrent state is the one after {self.n_tokens} tokens, not {end}")
        return self.read_state(end)

    def write_segment_state(self, start: int, use: int, n: int, flat: np.ndarray) -> None:
        """The state at the end of a segment of n tokens: valid only when all n are used."""
        if use != n:
            raise EngineError("a recurrent state at a segment's end cannot serve a branch inside it")
        self.write_state(start + n, flat)


class HybridState(RecurrentState):
    """The recurrent state in numpy arrays beside a KVCache of the attention layers (CPU backend)."""

    def __init__(self, n_layers: int, attn_layers: list[int], n_kv_heads: int, head_dim: int,
                 max_ctx: int, conv_shape: tuple[int, int], delta_shape: tuple[int, int, int],
                 kv_dtype="f32"):
        self.n_layers = n_layers
        self.attn_slot = {layer: s for s, layer in enumerate(attn_layers)}
        self.recurrent_slot = {layer: r for r, layer in enumerate(
            i for i in range(n_layers) if i not in self.attn_slot)}
        n_rec = len(self.recurrent_slot)
        self.kv = KVCache(max(1, len(attn_layers)), n_kv_heads, head_dim, max_ctx, kv_dtype)
        self._conv = np.zeros((n_rec, *conv_shape), np.float32)      # [n_rec, d_conv - 1, channels]
        self._delta = np.zeros((n_rec, *delta_shape), np.float32)    # [n_rec, H_v, S_v, S_k]
        self.conv = [self._conv[r] for r in range(n_rec)]
        self.delta = [self._delta[r] for r in range(n_rec)]

    @property
    def recurrent_nbytes(self) -> int:
        return self._conv.nbytes + self._delta.nbytes

    def prefault(self) -> bool:
        return self.kv.prefault()

    def clear(self) -> None:
        """No tokens: K/V forgotten, the recurrent state back to zeros (its value before token 0)."""
        self.kv.clear()
        self._conv.fill(0.0)
        self._delta.fill(0.0)

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(self.n_tokens, self._conv.copy(), self._delta.copy())

    def restore(self, snap: Snapshot) -> None:
        """The state after snap.n_tokens tokens; K/V positions below it are the ones computed
        before (the Engine restores only snapshots of the token list it still holds)."""
        if snap.conv.shape != self._conv.shape or snap.delta.shape != self._delta.shape:
            raise EngineError("snapshot of another model's state")
        self._conv[:] = snap.conv
        self._delta[:] = snap.delta
        self.kv.n_tokens = snap.n_tokens

    def state_layout(self) -> str:
        """What an image's snapshot is, for its key: layer pattern and the state's shapes/dtype."""
        return f"{self.layer_pattern()};conv{self._conv.shape};delta{self._delta.shape};float32"

    def state_size(self, n: int) -> int:
        """float32 values of read_state(n) (the same after any number of tokens)."""
        return self._conv.size + self._delta.size

    def read_state(self, n: int) -> np.ndarray:
        """float32 [state_size]: every conv window, then every delta-rule state (a copy)."""
        return np.concatenate([self._conv.ravel(), self._delta.ravel()])

    def write_state(self, n: int, flat: np.ndarray) -> None:
        if flat.shape != (self.state_size(n),):
            raise EngineError(f"write_state: {flat.shape} values for a state of {self.state_size(n)}")
        c = self._conv.size
        self._conv.ravel()[:] = flat[:c]   # contiguous arrays: ravel() is a view
        self._delta.ravel()[:] = flat[c:]


class Snapshots:
    """The Engine's in-memory snapshots of a recurrent state (nothing for other states): one at every
    prompt's and every reply's end, so an edit or a regenerate recomputes at most one turn. Each is
    the whole recurrent state (~50 MB on a Qwen3.5-4B shape): past `budget` bytes (and `keep`
    snapshots) the second oldest goes, keeping the oldest (a chat's system prompt or preset prefix,
    where a new chat goes back to) and the newest turns; older turn ends are in the chat's segments
    on disk (engine/prefix/chat_images.py)."""

    def __init__(self, state, keep: int = 4, budget: int = 512 << 20):
        self.state = state
        self.on = bool(getattr(state, "recurrent", False))
        self.keep = keep
        self.budget = budget
        self.items: list[Snapshot] = []
        self.recomputed = 0    # tokens the last rewind computed again (a reply's stats count them)

    def clear(self) -> None:
        self.items.clear()

    def take(self, n_tokens: int, logits: np.ndarray | None = None) -> None:
        """Keep the state after n_tokens (the state's current one) and the logits after it."""
        if not self.on or n_tokens <= 0:
            return
        if self.items and self.items[-1].n_tokens == n_tokens:
            if self.items[-1].logits is None and logits is not None:
                self.items[-1] = replace(self.items[-1], logits=np.array(logits, np.float32))
            return
        snap = self.state.snapshot()
        self.items = [s for s in self.items if s.n_tokens < n_tokens]
        self.items.append(snap if logits is None else replace(snap, logits=np.array(logits, np.float32)))
        while len(self.items) > self.keep and sum(_bytes(s) for s in self.items) > self.budget:
            del self.items[1]

    def reach(self, n: int) -> int:
        """The newest snapshot's position at or before n (0: none, the state of no tokens)."""
        return max((s.n_tokens for s in self.items if s.n_tokens <= n), default=0)

    def logits_at(self, n: int) -> np.ndarray | None:
        """The logits kept with a snapshot after exactly n tokens, if any."""
        return next((s.logits for s in self.items if s.n_tokens == n), None)

    def rewind(self, n: int, tokens: list[int], forward) -> np.ndarray | None:
        """Make the state the one after tokens[:n]: restore the newest snapshot at or before n (or
        zeros) and recompute the tokens after it with `forward(ids, pos)`. K/V positions below the
        snapshot are kept (a slice). Returns the logits after token n when known. On failure the
        state is cleared and the error raised."""
        self.items = [s for s in self.items if s.n_tokens <= n]
        logits = None
        try:
            if self.items:
                self.state.restore(self.items[-1])
                logits = self.items[-1].logits
            else:
                self.state.clear()
            start = self.state.n_tokens
            self.recomputed = max(0, n - start)
            if start < n:
                logits = forward(np.asarray(tokens[start:n], np.int32), start)
        except BaseException:
            self.items.clear()
            self.state.clear()
            raise
        self.take(n, logits)
        return logits if n > 0 else None


def _bytes(s: Snapshot) -> int:
    return s.nbytes + (s.logits.nbytes if s.logits is not None else 0)


class SplitKV:
    """K/V of a model whose layers differ in head size (Gemma 4: sliding layers of one head dim, full
    layers of another): one KVCache per kind, `slot[layer] = (cache, index)`; KV-sharing layers map
    to the layer whose K/V they read. Truncation is a slice, as for a KVCache. A prefix image holds
    the first cache's layers as its K/V tensors (one shape) and every other cache's K/V as its
    extra state section (float32, exact for float16 caches too), written only once its checksum
    holds."""

    recurrent = False

    def __init__(self, caches: list[KVCache], slot: dict[int, tuple[int, int]]):
        self.caches = caches
        self.slot = {layer: (caches[c], i) for layer, (c, i) in slot.items()}
        self.n_layers = len(slot)

    def kv_of(self, layer: int) -> tuple[KVCache, int]:
        return self.slot[layer]

    @property
    def n_tokens(self) -> int:
        return self.caches[0].n_tokens

    @n_tokens.setter
    def n_tokens(self, n: int) -> None:
        for c in self.caches:
            c.n_tokens = n

    @property
    def max_ctx(self) -> int:
        return self.caches[0].max_ctx

    @property
    def dtype(self):
        return self.caches[0].dtype

    @property
    def n_kv_heads(self) -> int:
        return self.caches[0].n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.caches[0].head_dim

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.caches)

    def check_fits(self, pos: int, n: int) -> None:
        self.caches[0].check_fits(pos, n)

    def prefault(self) -> bool:
        return all([c.prefault() for c in self.caches])

    def clear(self) -> None:
        for c in self.caches:
            c.clear()

    def truncate(self, n: int) -> None:
        for c in self.caches:
            c.truncate(n)

    # -- prefix images: caches[0]'s layers as the image's K/V, the other caches as its state ---------

    @property
    def image_layers(self) -> int:
        return self.caches[0].n_layers

    def read_prefix(self, layer: int, n: int):
        return self.caches[0].read_prefix(layer, n)

    def write_prefix(self, layer: int, n: int, k, v) -> None:
        self.caches[0].write_prefix(layer, n, k, v)

    def write_at(self, layer: int, start: int, k, v) -> None:
        self.caches[0].write_at(layer, start, k, v)

    def state_layout(self) -> str:
        return "splitkv;" + ";".join(f"{c.n_layers}x{c.n_kv_heads}x{c.head_dim}" for c in self.caches)

    def state_size(self, n: int) -> int:
        """float32 values of read_state(n): K and V [H, n, D] of every layer of caches[1:]."""
        return sum(2 * c.n_layers * c.n_kv_heads * n * c.head_dim for c in self.caches[1:])

    def read_state(self, n: int) -> np.ndarray:
        parts = [np.asarray(t, np.float32).ravel() for c in self.caches[1:] for layer in range(c.n_layers)
                 for t in c.read_prefix(layer, n)]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    # -- chat segments: caches[0]'s K/V as the segment's tensors, the others' K/V of its positions
    #    as its state section (float32)

    @property
    def image_cache(self) -> KVCache:
        return self.caches[0]

    def segment_state_size(self, start: int, n: int) -> int:
        return self.state_size(n)

    def read_segment_state(self, start: int, end: int) -> np.ndarray:
        parts = [np.asarray(t[:, start:end], np.float32).ravel() for c in self.caches[1:]
                 for layer in range(c.n_layers) for t in c.read_prefix(layer, end)]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def write_segment_state(self, start: int, use: int, n: int, flat: np.ndarray) -> None:
        """Positions [start, start + use) of the other caches from a segment of n positions."""
        if flat.shape != (self.state_size(n),):
            raise EngineError(f"write_segment_state: {flat.shape} values for {self.state_size(n)}")
        at = 0
        for c in self.caches[1:]:
            size = c.n_kv_heads * n * c.head_dim
            for layer in range(c.n_layers):
                k, v = (flat[at + j * size: at + (j + 1) * size].reshape(c.n_kv_heads, n, c.head_dim)[:, :use]
                        .astype(c.dtype) for j in range(2))
                c.write_at(layer, start, k, v)
                at += 2 * size

    def write_state(self, n: int, flat: np.ndarray) -> None:
        if flat.shape != (self.state_size(n),):
            raise EngineError(f"write_state: {flat.shape} values for {self.state_size(n)}")
        at = 0
        for c in self.caches[1:]:
            size = c.n_kv_heads * n * c.head_dim
            for layer in range(c.n_layers):
                k, v = (flat[at + j * size: at + (j + 1) * size].reshape(c.n_kv_heads, n, c.head_dim)
                        .astype(c.dtype) for j in range(2))
                c.write_prefix(layer, n, k, v)
                at += 2 * size
