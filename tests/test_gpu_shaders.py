"""The WGSL templates render without a GPU: every kernel for every block type, strict variables,
clear errors for unsupported types, and caching."""

from __future__ import annotations

import re

import pytest

from hearth.engine.gpu import ops
from hearth.engine.gpu.shaders import ShaderTemplateError, render, source


def _balanced(code: str) -> bool:
    code = re.sub(r"//[^\n]*", "", code)     # comments may hold half-open ranges like [0, n)
    return code.count("{") == code.count("}") and code.count("(") == code.count(")")


@pytest.mark.parametrize("qtype", ops.GPU_TYPES)
def test_matvec_renders_for_every_type(qtype):
    code = render("matvec.wgsl", QTYPES=(qtype,), MODE="concat", ACT="silu", NORM=True, BIAS=False, SUBGROUPS=True,
                  RESIDUAL=False, ROWS=8, ATTN_X=0, ATTN_WS=1, ATTN_CHUNK=64, ROPE="")
    assert "fn w0_deq8" in code and "@compute" in code and _balanced(code)
    assert "{{" not in code and "{%" not in code


def test_three_matrices_get_three_dequantizers_and_bindings():
    code = render("matvec.wgsl", QTYPES=("Q4_1", "Q8_0", "Q6_K"), MODE="concat", ACT="silu", NORM=True, SUBGROUPS=False,
                  BIAS=True, RESIDUAL=False, ROWS=8, ATTN_X=0, ATTN_WS=1, ATTN_CHUNK=64, ROPE="")
    for i in range(3):
        assert f"fn w{i}_deq8" in code
    bindings = [int(b) for b in re.findall(r"@binding\((\d+)\)", code)]
    assert bindings == list(range(len(bindings)))          # consecutive, as kernels.Kernels lays them out
    assert len(bindings) == 1 + 2 + 3 + 1 + 1               # params, x, y, w0..w2, g, b


def test_grid_types_declare_the_table_binding_after_their_own():
    """IQ2 / IQ3 kernels read gpu/iq_grids.py's table at TABLE_BINDING (Kernels adds it to the layout);
    their own bindings stay consecutive from 0."""
    from hearth.engine.gpu.iq_grids import DECLARATION, TABLE_BINDING
    code = render("matvec.wgsl", QTYPES=("Q4_K", "IQ2_XS"), MODE="concat", ACT="silu", NORM=True, SUBGROUPS=False,
                  BIAS=False, RESIDUAL=False, ROWS=8, ATTN_X=0, ATTN_WS=1, ATTN_CHUNK=64, ROPE="")
    assert DECLARATION in code and "iq_tab[IQ2XS_GRID + g]" in code
    bindings = sorted(int(b) for b in re.findall(r"@binding\((\d+)\)", code))
    assert bindings == list(range(len(bindings) - 1)) + [TABLE_BINDING] and TABLE_BINDING > len(bindings)


def test_unknown_type_is_a_clear_error():
    with pytest.raises(ShaderTemplateError, match="IQ1_S"):
        render("matvec.wgsl", QTYPES=("IQ1_S",), MODE="concat", ACT="silu", NORM=False, BIAS=False, SUBGROUPS=True,
               RESIDUAL=False, ROWS=8, ATTN_X=0, ATTN_WS=1, ATTN_CHUNK=64, ROPE="")


def test_missing_variable_is_an_error_not_an_empty_string():
    with pytest.raises(ShaderTemplateError, match="missing"):
        render("matvec.wgsl", QTYPES=("Q4_0",), MODE="concat")


def test_rendering_is_cached():
    a = render("rope_store.wgsl", HD=64, QK_NORM=False)
    b = render("rope_store.wgsl", HD=64, QK_NORM=False)
    assert a is b
    assert render("rope_store.wgsl", HD=128, QK_NORM=False) != a


def test_sources_come_from_the_package():
    assert "struct Deq8" in source("quant.wgsl")
    with pytest.raises(ShaderTemplateError):
        source("nope.wgsl")


@pytest.mark.parametrize("name,tpl", [
    ("matmul.wgsl", dict(QTYPES=("Q4_K",), ACT="gelu", BIAS=True, RESIDUAL=False, EPI_GLU=False)),
    ("matmul.wgsl", dict(QTYPES=("Q4_0",), ACT="gelu", BIAS=False, RESIDUAL=True, EPI_GLU=True)),
    ("attn_decode.wgsl", dict(HD=64, CHUNK=64, PASS="split")),
    ("attn_decode.wgsl", dict(HD=256, CHUNK=64, PASS="combine")),
    ("attn_prefill.wgsl", dict(HD=128, BQ=64, KT=16, PASS="split")),
    ("attn_prefill.wgsl", dict(HD=64, BQ=64, KT=4, PASS="combine")),
    ("embed.wgsl", dict(QTYPE="Q5_K", PARTS=1)),
    ("embed.wgsl", dict(QTYPE="Q8_0", PARTS=3)),
    ("rmsnorm.wgsl", dict(ADD=True)),
    ("rope_store.wgsl", dict(HD=256, QK_NORM=True)),
    ("argmax.wgsl", dict(WG=1024)),
    ("matmul8.wgsl", dict(QTYPE="Q6_K", ACT="silu", BIAS=True, RESIDUAL=True, EPI_GLU=False, RM=4, RN=8, Q8X=1, C64=True)),
    ("quantize_rows.wgsl", dict()),
    ("q_temperature.wgsl", dict()),
])
def test_every_kernel_renders(name, tpl):
    code = render(name, SUBGROUPS=True, **tpl)
    assert "@compute" in code and _balanced(code)
