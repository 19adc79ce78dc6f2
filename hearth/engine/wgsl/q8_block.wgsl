// One block of 32 values of x to int8, as llama.cpp's q8 activations: scale d = max |x| / 127,
// codes round(x / d). `q8_block()` expects the block in X8 values v0..v3 (values 8i .. 8i + 7 in
// v{i}) and defines d, the codes qa{i} (values 8i .. 8i + 3) and qb{i} (8i + 4 .. 8i + 7) as
// vec4<i32> and qn{i}, the sum of chunk i's 8 codes; the caller's body stores them. Both the matvec
// that quantizes x in workgroup memory and the pass that writes it to global memory use it, so
// their codes are the same bits.
{% macro q8_block() %}
        var mx = vec4<f32>(0.0);
{% for i in range(4) %}
        mx = max(mx, max(abs(v{{i}}.lo), abs(v{{i}}.hi)));
{% endfor %}
        let amax = max(max(mx.x, mx.y), max(mx.z, mx.w));
        let d = amax / 127.0;
        let id = select(0.0, 1.0 / d, d > 0.0);
{% for i in range(4) %}
        let qa{{i}} = vec4<i32>(round(v{{i}}.lo * id));
        let qb{{i}} = vec4<i32>(round(v{{i}}.hi * id));
        let qn{{i}} = qa{{i}}.x + qa{{i}}.y + qa{{i}}.z + qa{{i}}.w + qb{{i}}.x + qb{{i}}.y + qb{{i}}.z + qb{{i}}.w;
{% endfor %}
{{ caller() }}
{% endmacro %}
