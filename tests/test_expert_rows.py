"""The chosen experts' rows in one launch (engine/cpu/expert_rows.py) give, bit for bit, each
expert's own matrix-vector product with 8-bit x (engine/cpu/kernels_int8.py, kernels_iq.py: each
checked against its numpy reference in test_cpu_kernels*.py), for gate and up sharing x and for down
with one x per slot; and a qwen35moe layer's one-token pass through it agrees with the layer's
generic path (the same products, summed in slot order instead of expert order)."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu import expert_rows as ER
from hearth.engine.cpu.linear import Activations, Linear
from hearth.engine.quants import TYPE_BY_NAME

# byte offsets of each type's float16 scales (random bits there could be inf or NaN)
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
              "IQ4_XS": [0]}


def tensor(rng, qtype, E, R, n):
    """uint8 [E, R, bytes per row] of random blocks with sane scales."""
    t = TYPE_BY_NAME[qtype]
    nb = n // t.block_size
    raw = rng.integers(0, 256, (E * R, nb, t.type_size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, :, off:off + 2] = (rng.random((E * R, nb)) * 0.02 + 0.001).astype(np.float16).view(np.uint8).reshape(
            E * R, nb, 2)
    return raw.reshape(E, R, nb * t.type_size)


@pytest.mark.parametrize("ta,tb", [("Q4_K", "Q6_K"), ("Q8_0", "Q4_1"), ("Q4_0", "Q5_K"), ("IQ4_XS", "Q4_K")])
def test_rows_equal_each_experts_own_product(ta, tb):
    rng = np.random.default_rng(len(ta + tb))
    E, f, d, chosen = 6, 64, 512, np.array([4, 0, 5], np.int64)
    gate, up = tensor(rng, ta, E, f, d), tensor(rng, tb, E, f, d)
    shared = tensor(rng, tb, 1, 32, d)                      # another expert count and width
    down = tensor(rng, ta, E, d, 256)
    codes = np.array([ER.QUANT_CODES[ta], ER.QUANT_CODES[tb], ER.QUANT_CODES[tb]], np.int64)
    x = rng.standard_normal((1, d)).astype(np.float32)
    # gate of each slot, the shared expert, up of each slot (outputs out of job order)
    jobs = [(0, e, 0, 200 + 64 * s) for s, e in enumerate(chosen)] + [(2, 0, 0, 0)] + \
           [(1, e, 0, 400 + 64 * s) for s, e in enumerate(chosen)]
    gu = ER.multiply((gate, up, shared), codes, np.array(jobs), ER.quantized(x, codes), np.full(600, np.nan, np.float32))
    a = rng.standard_normal((3, 256)).astype(np.float32)
    jobs = [(0, e, s, d * s) for s, e in enumerate(chosen)]
    y = ER.multiply((down,), codes[:1], np.array(jobs), ER.quantized(a, codes[:1]), np.full(3 * d, np.nan, np.float32))
    lin = lambda w, t, n, x: Linear(w, TYPE_BY_NAME[t], n)(Activations(x, True))[0]   # noqa: E731
    assert np.array_equal(gu[:32], lin(shared[0], tb, d, x)) and np.isnan(gu[32:200]).all()
    for s, e in enumerate(chosen):
        assert np.array_equal(gu[200 + 64 * s:264 + 64 * s], lin(gate[e], ta, d, x)), (ta, s)
        assert np.array_equal(gu[400 + 64 * s:464 + 64 * s], lin(up[e], tb, d, x)), (tb, s)
        assert np.array_equal(y[d * s:d * (s + 1)], lin(down[e], ta, 256, a[s:s + 1])), (ta, s)


def test_which_x_each_type_reads():
    assert ER.wants([ER.QUANT_CODES["Q4_K"]]) == (False, True)
    assert ER.wants([ER.QUANT_CODES["Q8_0"]]) == (True, False)
    assert ER.wants([ER.QUANT_CODES["Q6_K"], ER.QUANT_CODES["IQ4_NL"]]) == (True, True)


def q8_0(a: np.ndarray) -> bytes:
    """float32 rows (a multiple of 32 wide) as Q8_0 blocks: an f16 scale, 32 int8 codes."""
    b = a.reshape(-1, 32).astype(np.float32)
    d = (np.abs(b).max(1) / 127).astype(np.float16)
    inv = 1 / np.maximum(d.astype(np.float32), np.float32(1e-30))
    q = np.rint(b * inv[:, None]).astype(np.int8)
    return b"".join(d[i:i + 1].tobytes() + q[i].tobytes() for i in range(len(b)))


@pytest.mark.parametrize("shared_q8", [False, True])
def test_a_layer_one_token_at_a_time_equals_the_generic_path(reference_dir, tmp_path, monkeypatch, shared_q8):
    """The tiny qwen35moe with its expert tensors in Q8_0 (the shared expert's too, 64 wide against
    the routed experts' 32, or left F16: its own products): one-token passes through the experts'
    launches (slot order) against the same model's per-expert path."""
    from hearth.engine.config import ModelConfig
    from hearth.engine.cpu_backend import CpuBackend
    from hearth.engine.gguf import GGUFFile
    from tests import gguf_rewrite as R
    from tests import tiny_qwen35moe
    if shared_q8:
        monkeypatch.setattr(tiny_qwen35moe, "N_FF_SHEXP", 64)   # rows a multiple of Q8_0's 32
    f16 = tiny_qwen35moe.make(reference_dir / "tiny-next" / "qwen35" / "tiny-qwen35.gguf", tmp_path / "f16.gguf")
    q8 = TYPE_BY_NAME["Q8_0"].id

    def quantize(name, t):
        if not (name.endswith("_exps.weight") or (shared_q8 and "_shexp.weight" in name and "inp" not in name)):
            return None
        w = np.frombuffer(bytes(t.data), {"F16": np.float16, "F32": np.float32}[t.type.name]).astype(np.float32)
        return [(name, tuple(t.shape), q8, q8_0(w))]
    path = R.rewrite(f16, tmp_path / "q8.gguf", tensors=quantize)
    g = GGUFFile.open(path)
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=64, int8=True)
    assert all(b.ffn.rows3 is not None and (b.ffn.shared3 is not None) == shared_q8 for b in be.model.blocks)
    ids = [5, 17, 300, 9, 44, 1000, 3, 71]
    fast = np.stack([be.forward([t], i) for i, t in enumerate(ids)])
    for b in be.model.blocks:
        b.ffn.rows3 = None
    be.kv.clear()
    generic = np.stack([be.forward([t], i) for i, t in enumerate(ids)])
    assert np.abs(fast - generic).max() <= 1e-4 * np.abs(generic).max()
    assert not np.array_equal(fast, np.zeros_like(fast))
