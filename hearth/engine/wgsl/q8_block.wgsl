// x to int8 in blocks of 32, as llama.cpp's q8 activations: scale d = max |x| / 127, codes
// round(x / d). Shared by the matvec that quantizes x in workgroup memory and the pass that writes
// it to global memory, so both give the same bits. With X8 values v{i} (8 values each) in scope:
//   q8_scale(amax): defines d and id (1 / d, 0 for an all-zero block) from the block's max |x|
//   q8_codes(i):    defines qa{i}, qb{i} (vec4<i32>: the codes of v{i}.lo, v{i}.hi) and qn{i}, their sum
{% macro q8_scale(amax) %}
        let d = {{amax}} / 127.0;
        let id = select(0.0, 1.0 / d, d > 0.0);
{% endmacro %}
{% macro q8_codes(i) %}
        let qa{{i}} = vec4<i32>(round(v{{i}}.lo * id));
        let qb{{i}} = vec4<i32>(round(v{{i}}.hi * id));
        let qn{{i}} = qa{{i}}.x + qa{{i}}.y + qa{{i}}.z + qa{{i}}.w + qb{{i}}.x + qb{{i}}.y + qb{{i}}.z + qb{{i}}.w;
{% endmacro %}
