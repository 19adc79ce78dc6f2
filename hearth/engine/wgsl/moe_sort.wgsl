// The (token, slot) pairs of a prefill chunk grouped by expert, for the expert products' prefill
// dispatches (moe_matvec.wgsl with ORDER): order[0 .. n SLOTS) lists pair indices j = t SLOTS + s,
// expert 0's first, then expert 1's, ... (within an expert in no fixed order: each pair writes its
// own output row, so the order changes which workgroups run together, not any result). Consecutive
// workgroups then read the same expert's rows, which stay in cache instead of coming from memory once
// per pair. One workgroup: a count per expert (workgroup atomics), their prefix sums, a scatter.
// TILE (> 0): also the tiles of moe_tile.wgsl: each expert's run of pairs cut in tiles of at most
// TILE, tiles[2 i] = expert, tiles[2 i + 1] = first position in order | pair count << 24; tiles past
// the last up to max_tiles get count 0 (their workgroups return at once).
{% set TILE = TILE | default(0) %}
const E: u32 = {{E}}u;
const SLOTS: u32 = {{SLOTS}}u;
struct Params { n: u32, max_tiles: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> route: array<u32>;          // [n, 2 SLOTS]
@group(0) @binding(2) var<storage, read_write> order: array<u32>;    // [n SLOTS]
{% if TILE %}
@group(0) @binding(3) var<storage, read_write> tiles: array<u32>;    // [max_tiles, 2]
var<workgroup> ntiles: u32;
{% endif %}

var<workgroup> cnt: array<atomic<u32>, E>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32) {
    let np = P.n * SLOTS;
    for (var e = tid; e < E; e += 256u) { atomicStore(&cnt[e], 0u); }
    workgroupBarrier();
    for (var j = tid; j < np; j += 256u) {
        atomicAdd(&cnt[route[(j / SLOTS) * 2u * SLOTS + j % SLOTS]], 1u);
    }
    workgroupBarrier();
    if (tid == 0u) {
        var run = 0u;
{% if TILE %}
        var nt = 0u;
{% endif %}
        for (var e = 0u; e < E; e++) {
            let c = atomicLoad(&cnt[e]);
            atomicStore(&cnt[e], run);
{% if TILE %}
            for (var i = 0u; i < c; i += {{TILE}}u) {
                tiles[2u * nt] = e;
                tiles[2u * nt + 1u] = (run + i) | (min({{TILE}}u, c - i) << 24u);
                nt++;
            }
{% endif %}
            run += c;
        }
{% if TILE %}
        ntiles = nt;
{% endif %}
    }
    workgroupBarrier();
{% if TILE %}
    for (var i = ntiles + tid; i < P.max_tiles; i += 256u) { tiles[2u * i + 1u] = 0u; }
{% endif %}
    for (var j = tid; j < np; j += 256u) {
        let at = atomicAdd(&cnt[route[(j / SLOTS) * 2u * SLOTS + j % SLOTS]], 1u);
        order[at] = j;
    }
}
