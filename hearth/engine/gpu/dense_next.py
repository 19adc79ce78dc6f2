"""What the newer dense families (smollm3, phi3, mistral3: engine/models/dense_config.py) need of
the GPU plan beyond llama's layers. GpuBackend calls these hooks; for every other architecture they
change nothing.

- `tensor_view(g, cfg, n_ctx)`: the file as the plan reads it, in llama's tensor names. phi3's fused
  `attn_qkv` (rows: q, k, v) and `ffn_up` (rows: gate, up) become row ranges named attn_q / attn_k /
  attn_v and ffn_gate / ffn_up (views of the same mapped bytes, uploaded once each), and its
  `rope_factors_long` or `_short` (long when the context is longer than
  rope.scaling.original_context_length, as llama.cpp chooses) become `rope_freqs`, the same
  per-frequency divisors of the angle.
- `DenseHooks.rope(i, table)`: smollm3's layers without RoPE take the identity table (cos 1, sin 0),
  exact in float32 as on the numpy backend (engine/models/smollm3.py).
- `DenseHooks.after_rope(plan, i, q, step)`: mistral3's temperature tuning, q at position p times
  1 + s ln(floor(p / n) + 1) (wgsl/q_temperature.wgsl), one dispatch a layer, dispatched only by
  calls that reach position n (below it the factor is exactly 1).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import UnsupportedModelError
from .kernels import grid

Q_TEMPERATURE_FIELDS = (("width", "u"),)


class TensorView:
    """A GGUFFile with some tensors added or renamed: `tensors` is its own dict; everything else
    (path, metadata, ...) is the file's."""

    def __init__(self, g, tensors: dict):
        self._g, self.tensors = g, tensors

    def __getattr__(self, name):
        return getattr(self._g, name)


def _row_views(g, name: str, k: int, parts: list[tuple[str, int]]) -> dict:
    """Tensor `name` [k, sum(rows)] (GGUF order) cut into consecutive row blocks: {new name: TensorInfo}."""
    t = g.tensors[name]
    total = sum(r for _, r in parts)
    if tuple(t.shape) != (k, total) or t.n_bytes % total:
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} has shape {list(t.shape)}, expected [{k}, {total}]")
    rb = t.n_bytes // total
    out, r0 = {}, 0
    for new, rows in parts:
        a, b = r0 * rb, (r0 + rows) * rb
        out[new] = dataclasses.replace(t, name=new, shape=(k, rows), offset=t.offset + a, n_bytes=b - a,
                                       data=t.data[a:b])
        r0 += rows
    return out


def tensor_view(g, cfg, n_ctx: int):
    """`g` itself, or for phi3 a TensorView in llama's names (see the module's docstring)."""
    if cfg.arch != "phi3":
        return g
    c, tensors = cfg, dict(g.tensors)
    d, q, kv = c.n_embd, c.n_head * c.head_dim, c.n_head_kv * c.head_dim
    for i in range(c.n_layer):
        p = f"blk.{i}."
        for b in ("attn_qkv.bias", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "ffn_up.bias"):
            if p + b in g.tensors:
                raise UnsupportedModelError(f"{g.path.name}: tensor {p + b}: phi3 with biases is not supported by Hearth")
        if p + "attn_qkv.weight" in g.tensors:
            tensors.update(_row_views(g, p + "attn_qkv.weight", d,
                                      [(p + "attn_q.weight", q), (p + "attn_k.weight", kv), (p + "attn_v.weight", kv)]))
        if p + "ffn_gate.weight" not in g.tensors and p + "ffn_up.weight" in g.tensors:
            tensors.update(_row_views(g, p + "ffn_up.weight", d,
                                      [(p + "ffn_gate.weight", c.n_ff), (p + "ffn_up.weight", c.n_ff)]))
    factors = f"rope_factors_{'long' if n_ctx > c.rope_orig_ctx else 'short'}.weight"
    if factors in g.tensors:
        tensors["rope_freqs.weight"] = g.tensors[factors]
    return TensorView(g, tensors)


def q_temperature(ks):
    """q [n, width] *= tq[pos + r]. Bindings: q, tq, step."""
    return ks.get("q_temperature.wgsl", ["rw", "r", "r"], Q_TEMPERATURE_FIELDS)


class DenseHooks:
    """The per-layer parts: built once per backend, after the weights (W: GpuWeights)."""

    def __init__(self, W, cfg, n_ctx: int, ks):
        self.cfg, self.ks = cfg, ks
        self.no_rope = None          # float32 [n_ctx, n_rot / 2, 2]: (cos 1, sin 0)
        if any(cfg.nope_layers):
            t = np.zeros((n_ctx, cfg.n_rot // 2, 2), np.float32)
            t[..., 0] = 1.0
            self.no_rope = W.floats(t, "rope-none")
        self.temperature = None      # float32 [n_ctx]: q's factor at each position
        if cfg.attn_temp_scale and n_ctx > cfg.attn_temp_floor:
            p = np.arange(n_ctx, dtype=np.float64)
            t = 1.0 + cfg.attn_temp_scale * np.log(np.floor(p / cfg.attn_temp_floor) + 1.0)
            self.temperature = W.floats(t.astype(np.float32), "q-temperature")

    def rope(self, i: int, table):
        """Layer i's RoPE table buffer: `table`, or the identity on a layer without RoPE."""
        return self.no_rope if self.no_rope is not None and self.cfg.nope_layers[i] else table

    def after_rope(self, P, i: int, q, step) -> None:
        """Ops between RoPE (q rotated into `q` [n, n_head, head_dim]) and attention."""
        if self.temperature is None:
            return
        c, floor = self.cfg, self.cfg.attn_temp_floor
        P.add(q_temperature(self.ks), [q, self.temperature, step],
              lambda n, kv: (*grid(n), 1) if kv > floor else (0, 0, 0), f"{i}.q-temperature",
              width=c.n_head * c.head_dim)
