{#
The inverse RMS of a workgroup's partial sums of squares, with one owner for rmsnorm, gemma4,
gemma4_moe, moe_route and moe_router: each thread's sum `sum` into `red` (the calling kernel's
workgroup array of `width` floats, thread index `t`), a tree, then `let inv` over `n` values.
Emits WGSL only.
#}
{% macro inv_rms(sum, red, t, width, n) %}
    {{red}}[{{t}}] = {{sum}};
    workgroupBarrier();
    for (var s = {{width // 2}}u; s > 0u; s >>= 1u) {
        if ({{t}} < s) { {{red}}[{{t}}] += {{red}}[{{t}} + s]; }
        workgroupBarrier();
    }
    let inv = inverseSqrt({{red}}[0] / f32({{n}}) + P.eps);
{% endmacro %}
