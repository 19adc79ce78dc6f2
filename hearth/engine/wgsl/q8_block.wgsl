// x to int8 in blocks of 32, as llama.cpp's q8 activations: scale d = max |x| / 127, codes
// round(x / d). Shared by the matvec that quantizes x in workgroup memory and the pass that writes
// it to global memory, so both give the same bits. With X8 values v{i} (8 values each) in scope:
//   q8_scale(amax): defines d and id (1 / d, 0 for an all-zero block) from the block's max |x|
//   q8_codes(i):    defines qa{i}, qb{i} (vec4<i32>: the codes of v{i}.lo, v{i}.hi) and qn{i}, their sum
//   q8_block():     a block of four X8 values v0..v3: its d and id and the codes of all four
{% macro q8_scale(amax) %}
        let d = {{amax}} / 127.0;
        let id = select(0.0, 1.0 / d, d > 0.0);
{% endmacro %}
{% macro q8_codes(i) %}
        let qa{{i}} = vec4<i32>(round(v{{i}}.lo * id));
        let qb{{i}} = vec4<i32>(round(v{{i}}.hi * id));
        let qn{{i}} = qa{{i}}.x + qa{{i}}.y + qa{{i}}.z + qa{{i}}.w + qb{{i}}.x + qb{{i}}.y + qb{{i}}.z + qb{{i}}.w;
{% endmacro %}
{% macro q8_block() %}
        var mx = vec4<f32>(0.0);
{% for i in range(4) %}
        mx = max(mx, max(abs(v{{i}}.lo), abs(v{{i}}.hi)));
{% endfor %}
        let amax = max(max(mx.x, mx.y), max(mx.z, mx.w));
{{ q8_scale("amax") }}
{% for i in range(4) %}
{{ q8_codes(i) }}
{% endfor %}
{% endmacro %}
