"""IQ4_XS and IQ4_NL in the int8-x decode matvec's 64-weight chunks (quant.wgsl `_dq64`, `iq4_codes`):
with every code lookup (selects on constants; the pair table in a storage buffer or in workgroup
memory: HEARTH_GPU_IQ4_LUT=0 / tab / the default), in the forms the
8B IQ4_XS runs (Q|K|V with RMSNorm and bias; gate/up writing the down product's int8 blocks; the down
product on pre-quantized x), against float64 references on gguf-py's weights with x quantized as
the kernel does (test_gpu_int8.py's helpers and bounds). Runs on lavapipe in CI."""

from __future__ import annotations

import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.gpu import ops  # noqa: E402
from gpu_fixtures import kernels_fixture, rng  # noqa: E402, F401 (rng: a fixture)
from test_gpu_int8 import (  # noqa: E402
    check_concat_with_norm_and_bias, check_glu_q8out, check_prequantized_x_residual)

pytestmark = pytest.mark.gpu
LOOKUPS = pytest.mark.parametrize("lut", ["", "tab", "wg"], ids=["selects", "pair-table", "workgroup-table"])


ks = kernels_fixture("int8")


@pytest.fixture
def lookup(monkeypatch, lut):
    """The lookup under test, and the IQ4 types in the 64-weight chunks whatever HEARTH_GPU_IQ4_C64 says."""
    monkeypatch.setattr(ops, "IQ4_LUT", lut)
    monkeypatch.setattr(ops, "C64_TYPES", tuple(t for t in ops.C64_TYPES if not t.startswith("IQ4"))
                        + ("IQ4_XS", "IQ4_NL"))
    return lut


def test_iq4_types_take_64_weight_chunks_unless_switched_off(monkeypatch):
    assert ("IQ4_XS" in ops.C64_TYPES) == ("IQ4_NL" in ops.C64_TYPES) == ops.IQ4_C64
    monkeypatch.setattr(ops, "C64_TYPES", ops.C64_TYPES + ("IQ4_XS", "IQ4_NL"))
    for t in ("IQ4_XS", "IQ4_NL"):
        assert ops.int8_c64([t], 4096, 64) and ops.int8_c64([t], 4096, ops.GLU_Q8OUT_LAYOUT[0])
    assert not ops.int8_c64(["MXFP4"], 4096, 64)
    monkeypatch.setattr(ops, "C64_TYPES", tuple(t for t in ops.C64_TYPES if not t.startswith("IQ4")))
    assert not ops.int8_c64(["IQ4_XS"], 4096, 64)       # what HEARTH_GPU_IQ4_C64=0 leaves


@LOOKUPS
@pytest.mark.parametrize("layout", [(32, 1), (64, 4)])
def test_concat_with_norm_and_bias(ks, rng, lookup, layout):
    """IQ4_XS and IQ4_NL chunks beside MXFP4's eight-8-weight fallback in one kernel."""
    types = ["IQ4_XS", "IQ4_NL", "MXFP4"]
    assert ops.int8_c64(types, 4096, layout[0])
    assert ops.matvec(ks, types, norm=True, bias=True, layout=layout, q8x=4096).tables == (lookup == "tab")
    rpw = ops.matvec_rows(layout)
    check_concat_with_norm_and_bias(ks, rng, layout, types, 4096, [rpw, rpw, rpw + 3])


@LOOKUPS
def test_glu_writes_the_down_products_int8_blocks(ks, rng, lookup):
    check_glu_q8out(ks, rng, ("IQ4_XS", "IQ4_XS"), 4096)


@LOOKUPS
@pytest.mark.parametrize("qtype", ["IQ4_XS", "IQ4_NL"])
def test_prequantized_x_with_residual(ks, rng, lookup, qtype):
    """The down product's path (quantize_x, matvec q8g) in its layout."""
    layout = ops.INT8_PRE_LAYOUT
    assert ops.int8_c64([qtype], 8192, layout[0])
    check_prequantized_x_residual(ks, rng, layout, qtype, 8192, ops.matvec_rows(layout) + 3)
