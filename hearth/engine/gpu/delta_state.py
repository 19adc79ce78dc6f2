"""A hybrid model's state on the GPU (the GPU twin of models/layer_state.py's HybridState, with the
same interface, so Engine's snapshots, truncation and prefix images work unchanged):

    kv            GpuKVCache over the attention layers only: kv.k[slot], kv.v[slot]
                  [n_kv_heads, max_ctx, head_dim]; `attn_slot[layer]` says which slot a layer owns
    conv[r]       float32 [d_conv - 1, conv_channels]: the r-th recurrent layer's last conv inputs
    delta[r]      float32 [H_v, S_v, S_k]: its delta-rule state matrix per value head
one storage buffer per recurrent layer and kind, allocated once.

A snapshot is read back to the host (layer_state.Snapshot: the same arrays a CPU HybridState
keeps, ~50 MB on a Qwen3.5-4B shape) and a restore writes it back: a recurrent state cannot be
rolled back by a slice (layer_state.py says why).
"""

from __future__ import annotations

import numpy as np

from ..errors import EngineError
from ..models.layer_state import RecurrentState, Snapshot
from .kv import GpuKVCache


class GpuHybridState(RecurrentState):
    def __init__(self, dev, n_layers: int, attn_layers: list[int], n_kv_heads: int, head_dim: int,
                 max_ctx: int, conv_shape: tuple[int, int], delta_shape: tuple[int, int, int], kv_dtype="f32"):
        self.dev = dev
        self.n_layers = n_layers
        self.attn_slot = {layer: s for s, layer in enumerate(attn_layers)}
        self.recurrent_slot = {layer: r for r, layer in enumerate(
            i for i in range(n_layers) if i not in self.attn_slot)}
        n_rec = len(self.recurrent_slot)
        self.kv = GpuKVCache(dev, max(1, len(attn_layers)), n_kv_heads, head_dim, max_ctx, kv_dtype)
        self.conv_shape = (n_rec, *conv_shape)           # of a snapshot's conv array
        self.delta_shape = (n_rec, *delta_shape)
        self._conv_bytes = int(np.prod(conv_shape)) * 4
        self._delta_bytes = int(np.prod(delta_shape)) * 4
        self.conv = [dev.buffer(self._conv_bytes, f"conv{r}") for r in range(n_rec)]     # [d_conv - 1, ch] f32
        self.delta = [dev.buffer(self._delta_bytes, f"delta{r}") for r in range(n_rec)]  # [H_v, S, S] f32
        self.clear()

    @property
    def recurrent_nbytes(self) -> int:
        return len(self.conv) * (self._conv_bytes + self._delta_bytes)

    def touched(self) -> None:
        self.kv.touched()

    def clear(self) -> None:
        """No tokens: K/V forgotten, the recurrent state back to zeros (its value before token 0)."""
        self.kv.clear()
        if self.conv:
            enc = self.dev.device.create_command_encoder()
            for b in self.conv + self.delta:
                enc.clear_buffer(b)
            self.dev.submit(enc)

    # -- snapshots: read back and written again ------------------------------------------------

    def _read(self) -> tuple[np.ndarray, np.ndarray]:
        copies = [(b, 0, self._conv_bytes) for b in self.conv] + [(b, 0, self._delta_bytes) for b in self.delta]
        raw = self.dev.read(copies).view(np.float32)
        c = int(np.prod(self.conv_shape))
        return raw[:c].reshape(self.conv_shape), raw[c:].reshape(self.delta_shape)

    def snapshot(self) -> Snapshot:
        conv, delta = self._read()
        return Snapshot(self.n_tokens, conv, delta)

    def _write(self, conv: np.ndarray, delta: np.ndarray) -> None:
        q = self.dev.queue
        for r, b in enumerate(self.conv):
            q.write_buffer(b, 0, np.ascontiguousarray(conv[r], np.float32))
        for r, b in enumerate(self.delta):
            q.write_buffer(b, 0, np.ascontiguousarray(delta[r], np.float32))
        q.submit([])

    def restore(self, snap: Snapshot) -> None:
        if snap.conv.shape != self.conv_shape or snap.delta.shape != self.delta_shape:
            raise EngineError("snapshot of another model's state")
        self._write(snap.conv, snap.delta)
        self.kv.n_tokens = snap.n_tokens

    # -- prefix images: as HybridState (the same layout string and flat state) -----------------

    def state_layout(self) -> str:
        return f"{self.layer_pattern()};conv{self.conv_shape};delta{self.delta_shape};float32"

    def state_size(self, n: int) -> int:
        return int(np.prod(self.conv_shape)) + int(np.prod(self.delta_shape))

    def read_state(self, n: int) -> np.ndarray:
        conv, delta = self._read()
        return np.concatenate([conv.ravel(), delta.ravel()])

    def write_state(self, n: int, flat: np.ndarray) -> None:
        if flat.shape != (self.state_size(n),):
            raise EngineError(f"write_state: {flat.shape} values for a state of {self.state_size(n)}")
        c = int(np.prod(self.conv_shape))
        self._write(flat[:c].reshape(self.conv_shape), flat[c:].reshape(self.delta_shape))

    def destroy(self) -> None:
        self.kv.destroy()
        for b in self.conv + self.delta:
            b.destroy()
        self.conv, self.delta = [], []
