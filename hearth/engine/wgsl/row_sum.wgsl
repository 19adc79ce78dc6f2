// The sum over a row group's LANES threads, as macros (matvec.wgsl, moe_matvec.wgsl, moe_tile.wgsl).
// In scope: tid (local_invocation_index), lane (tid % LANES), LANES, red (workgroup array<f32>, 256 a
// value) and, with SUBGROUPS, the subgroup_size builtin sg. names: the f32 variables to sum, in a
// fixed order (unrolled: no indexed arrays).
// row_sum: afterwards each row group's lane 0 holds the sums in those variables. SUBGROUPS: sums
// within a subgroup by shuffles, then one barrier to add the subgroups of a row group (a barrier is
// costly on CPU rasterizers like lavapipe, which run invocations as coroutines); without it, a
// shared-memory tree.
// tree_sum: the tree alone; each row group's sums stay in red[256 i + tid] of its lane 0 (value i)
{% macro tree_sum(names) %}
{% for n in names %}
    red[{{loop.index0 * 256}}u + tid] = {{n}};
{% endfor %}
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
{% for n in names %}
            red[{{loop.index0 * 256}}u + tid] += red[{{loop.index0 * 256}}u + tid + s];
{% endfor %}
        }
        workgroupBarrier();
    }
{% endmacro %}

{% macro row_sum(names, SUBGROUPS) %}
{% if SUBGROUPS %}
    let w = min(sg, LANES);
    for (var o = 1u; o < w; o <<= 1u) {
{% for n in names %}
        {{n}} += subgroupShuffleXor({{n}}, o);
{% endfor %}
    }
    if (tid % w == 0u) {
{% for n in names %}
        red[{{loop.index0 * 256}}u + tid / w] = {{n}};
{% endfor %}
    }
    workgroupBarrier();
    if (lane == 0u) {
        let q0 = tid / w;
{% for n in names %}
        {{n}} = 0.0;
{% endfor %}
        for (var q = q0; q < q0 + LANES / w; q++) {
{% for n in names %}
            {{n}} += red[{{loop.index0 * 256}}u + q];
{% endfor %}
        }
    }
{% else %}
{{ tree_sum(names) }}
{% for n in names %}
    {{n}} = red[{{loop.index0 * 256}}u + tid];
{% endfor %}
{% endif %}
{% endmacro %}
