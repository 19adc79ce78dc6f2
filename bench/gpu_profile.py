"""Where the GPU backend's time goes: `python -m bench.gpu_profile [--model PATH] [--matvec-sweep]`.

Prints, for decode and for a 2,048-token prefill chunk: the Python time to encode a token's plan,
the empty submit+readback round trip, and per kernel label the GPU time of one dispatch (each op
repeated R times in one pass, the round trip subtracted), summed over layers.
`--dispatch-floor` (no model needed) times a dispatch that does nothing, with and without a
barrier before it. `--split-only`: only the decode token's split (GPU alone, host, pipelined).
`--coop-probe` (no model needed) says whether this wgpu exposes cooperative-matrix (tensor-core)
operations in WGSL: it asks for the feature, compiles 8x8 f32 and 16x16 f16 products, checks the
8x8 one against numpy and times a naive 4,096-cube product with it.
`--matmul-sweep` (no model needed) times the prefill product alone (f32 kernel, f16 kernel in
several tiles) on 8B and 1B shapes, 2,048 tokens, and checks a corner of each output against numpy.
`--matmul8-sweep` (no model needed) times the int8 prefill product (ops.matmul8, every tile; alone
and with the quantize_rows pass of its X) beside the f16 one the backend picks, same shapes.
`--matvec-sweep` (no model needed) times the decode matvec alone on 8B-shaped matrices in every
layout (lanes, rows per thread) and prints GB/s of weights streamed, the chosen layout marked;
for rows of ops.INT8_PRE_K_MIN and more (the down products) also x quantized once to global memory
("pre": the quantize_x pass and the matvec reading its blocks, both timed). `--sweep-only NAME`
keeps the cases whose name contains NAME (e.g. down; for --matmul8-sweep the exact "name type").
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def roundtrip(be, reps=20):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        be.dev.read([(be.amax, 0, 4)])
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def per_op(be, plan, n, kv_len, reps):
    rt = roundtrip(be)
    by = collections.Counter()
    count = collections.Counter()
    for i in range(len(plan.ops)):
        enc = be.dev.device.create_command_encoder()
        plan.encode(enc, n, kv_len, i, i + 1, repeat=reps)
        t = time.perf_counter()
        be.dev.read([(be.amax, 0, 4)], enc)
        dt = time.perf_counter() - t - rt
        lab = plan.ops[i]["label"].split(".")[-1]
        by[lab] += dt / reps
        count[lab] += 1
    return by, count, rt


def timed(dev, dispatches, reps):
    """GPU seconds of one round of `dispatches` [(kernel, buffers, groups, params)], repeated `reps`
    times in one pass, the empty round trip subtracted."""
    from hearth.engine.gpu.plan import Plan  # noqa: PLC0415
    plan = Plan(dev, "sweep")
    for k, bufs, groups, prm in dispatches:
        plan.add(k, bufs, groups, "sweep", **prm)
    plan.finalize()
    probe = dev.buffer(16, "probe")

    def once(r):
        enc = dev.device.create_command_encoder()
        plan.encode(enc, 1, 1, repeat=r)
        t = time.perf_counter()
        dev.read([(probe, 0, 4)], enc)
        return time.perf_counter() - t
    once(2)
    rt = float(np.median([once(0) for _ in range(5)]))
    dt = float(np.median([once(reps) for _ in range(3)]))
    plan.destroy()
    return max(dt - rt, 0.0) / reps


# byte offsets of each block type's f16 scale fields: random bits there could be NaN or Inf
F16_FIELDS = {"Q4_0": [0], "Q8_0": [0], "Q4_K": [0, 2], "Q6_K": [208], "Q4_1": [0, 2], "Q5_0": [0], "Q5_K": [0, 2],
              "IQ4_XS": [0], "IQ4_NL": [0]}


def sane_blocks(rng, qtype, m, k):
    """uint8 [m * row bytes]: random blocks of `qtype` with small finite scales (as a real file has)."""
    from hearth.engine.quants import TYPE_BY_NAME  # noqa: PLC0415
    t = TYPE_BY_NAME[qtype]
    raw = rng.integers(0, 256, (m * (k // t.block_size), t.type_size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = (rng.random(len(raw)) * 0.02 + 0.001).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(-1)


# layouts (lanes, rows per thread, unroll) swept for x quantized once to global memory
PRE_LAYOUTS = [(256, 4, 2), (256, 4, 1), (256, 2, 2), (256, 1, 2), (128, 4, 1), (128, 4, 2), (128, 2, 2),
               (128, 1, 2), (64, 4, 1), (64, 2, 1), (64, 1, 2), (32, 2, 1)]


def matvec_sweep(reps=20, only=""):
    """The decode matvec alone: weights in 4 copies (rotated, so the 50 MB L2 does not hold them)."""
    from hearth.engine.gpu import ops  # noqa: PLC0415
    from hearth.engine.gpu.device import Device  # noqa: PLC0415
    from hearth.engine.gpu.kernels import Kernels  # noqa: PLC0415
    dev = Device()
    ks = Kernels(dev)
    rng = np.random.default_rng(0)
    cases = [("gate+up", ["Q4_0", "Q4_0"], 4096, 14336, "glu"), ("gate+up", ["Q8_0", "Q8_0"], 4096, 14336, "glu"),
             ("gate+up", ["Q4_K", "Q4_K"], 4096, 14336, "glu"), ("down", ["Q4_0"], 14336, 4096, "concat"),
             ("down", ["Q6_K"], 14336, 4096, "concat"), ("o", ["Q4_0"], 4096, 4096, "concat"),
             ("head", ["Q6_K"], 4096, 128256, "concat"), ("1B gate+up", ["Q4_K", "Q4_K"], 2048, 8192, "glu"),
             ("1B down", ["Q6_K"], 8192, 2048, "concat"), ("down", ["Q4_K"], 14336, 4096, "concat"),
             ("down", ["Q8_0"], 14336, 4096, "concat"), ("1B down", ["Q4_K"], 8192, 2048, "concat"),
             ("1B qkv", ["Q4_K"], 2048, 3072, "concat"), ("1B o", ["Q4_K"], 2048, 2048, "concat"),
             ("1B head", ["Q6_K"], 2048, 128256, "concat")]
    layouts = [(32, 1, 1), (128, 4, 1), (256, 4, 1), (128, 4, 2), (256, 4, 2)]
    layouts = [(lay, 0) for lay in layouts] + [(lay, 1) for lay in layouts + [(64, 4, 1), (128, 2, 1), (32, 4, 1),
                                                                               (32, 2, 1), (64, 2, 1), (64, 4, 2)]]
    cases.insert(3, ("gate+up", ["Q4_1", "Q4_1"], 4096, 14336, "glu"))
    cases.insert(4, ("gate+up", ["Q5_0", "Q5_0"], 4096, 14336, "glu"))
    # the 8B IQ4_XS's products; HEARTH_GPU_IQ4_C64=0 / HEARTH_GPU_IQ4_LUT=1 runs give the A/B (--sweep-only IQ4_XS)
    cases += [("gate+up", ["IQ4_XS", "IQ4_XS"], 4096, 14336, "glu"), ("down", ["IQ4_XS"], 14336, 4096, "concat"),
              ("qkv", ["IQ4_XS"], 4096, 6144, "concat")]
    # 2,560-wide models (Qwen3.5-4B, Gemma 4 E4B), whose decode matvecs are smaller than the 8B's (--sweep-only 2560)
    cases += [("2560 gate+up", ["Q4_K", "Q4_K"], 2560, 9216, "glu"), ("2560 down", ["Q6_K"], 9216, 2560, "concat"),
              ("2560 down", ["Q4_K"], 9216, 2560, "concat"), ("2560 in", ["Q4_K"], 2560, 12352, "concat"),
              ("2560 out", ["Q4_K"], 4096, 2560, "concat"), ("2560 g4 gate+up", ["Q4_K", "Q4_K"], 2560, 10240, "glu")]
    print("\nmatvec sweep: GB/s of weights (us per dispatch); * = the layout the backend picks;"
          " i8 = x as int8 blocks (ops.int8_ok)")
    for name, types, k, m, mode in cases:
        if only and not any(o in f"{name} {types[0]}" for o in only.split(",")):
            continue
        rb = ops.row_bytes(types[0], k)
        copies = 1 if m * rb * len(types) > 400 << 20 else 4
        ws = [[dev.upload(sane_blocks(rng, t, m, k)) for t in types] for _ in range(copies)]
        x = dev.upload(rng.standard_normal(k).astype(np.float32))
        g = dev.upload(rng.standard_normal(k).astype(np.float32))
        y = dev.buffer(m * 4)
        chosen = ops.matvec_layout(k, m, mats=len(types) if mode == "glu" else 1)
        row = []
        for lay, i8 in layouts + ([] if (chosen, 0) in layouts else [(chosen, 0)]):
            if i8 and not ops.int8_ok(dev, types, k):
                continue
            norm = mode == "glu"
            kern = ops.matvec(ks, types, mode=mode, norm=norm, residual=mode != "glu", layout=lay, q8x=k if i8 else 0)
            prm = ops.matvec_params(types, k, [m] * len(types) if mode == "glu" else [m], eps=1e-5, mode=mode)
            disp = [(kern, [x, y] + w + ([g] if norm else []), ops.matvec_groups(m, lay), prm) for w in ws]
            sec = timed(dev, disp, max(1, reps // copies)) / copies
            gbs = m * rb * len(types) / max(sec, 1e-9) / 1e9
            row.append(f"{'i8 ' if i8 else ''}{'x'.join(map(str, lay))}{'*' if lay == chosen else ''} "
                       f"{gbs:,.0f} ({sec * 1e6:.0f})")
        if mode == "concat" and ops.int8_pre_ok(dev, types, k):
            xg = dev.buffer(ops.q8_words(k) * 4)
            qk = ops.quantize_x(ks)
            for lay in PRE_LAYOUTS:
                kern = ops.matvec(ks, types, residual=True, layout=lay, q8x=k, q8g=True)
                prm = ops.matvec_params(types, k, [m])
                disp = []
                for w in ws:
                    disp += [(qk, [x, xg], ops.quantize_x_groups(k), dict(K=k)),
                             (kern, [xg, y] + w, ops.matvec_groups(m, lay), prm)]
                sec = timed(dev, disp, max(1, reps // copies)) / copies
                gbs = m * rb / max(sec, 1e-9) / 1e9
                mark = "*" if lay == ops.INT8_PRE_LAYOUT else ""
                row.append(f"pre {'x'.join(map(str, lay))}{mark} {gbs:,.0f} ({sec * 1e6:.0f})")
            xg.destroy()
        print(f"  {name:11s} {'+'.join(types):10s} K={k:<6d} M={m:<7d} " + " | ".join(row), flush=True)
        for w in ws:
            for b in w:
                b.destroy()
    dev.destroy()


MATMUL_CASES = [("8B gate", "Q4_0", 4096, 14336), ("8B gate", "Q4_K", 4096, 14336), ("8B gate", "Q8_0", 4096, 14336),
         ("8B down", "Q6_K", 14336, 4096), ("8B q/o", "Q4_K", 4096, 4096), ("8B k/v", "Q4_K", 4096, 1024),
         ("1B gate", "Q4_K", 2048, 8192), ("1B q/o", "Q4_K", 2048, 2048), ("1B k/v", "Q4_K", 2048, 512),
         ("8B gate", "F16", 4096, 14336)]
# (tile, flush); None = the f32 kernel
MATMUL_CONFIGS = [None, ((8, 8), 2), ((8, 8), 1), ((8, 4), 2), ((4, 8), 2), ((4, 4), 2)]


def matmul_sweep(reps=3, n=2048):
    """The prefill product alone on 8B and 1B shapes (n tokens): the f32 kernel and the f16 one in
    several tiles and f16 spans; TFLOP/s, and each output's 64 x 64 corner checked
    against numpy (relative error of that corner)."""
    from hearth.engine.gpu import ops  # noqa: PLC0415
    from hearth.engine.gpu.device import Device  # noqa: PLC0415
    from hearth.engine.gpu.kernels import Kernels  # noqa: PLC0415
    import gguf  # noqa: PLC0415
    dev = Device()
    ks = Kernels(dev)
    rng = np.random.default_rng(0)
    cases, configs = MATMUL_CASES, MATMUL_CONFIGS
    print(f"\nmatmul sweep, {n} tokens: TFLOP/s (ms) [rel err of a 64x64 corner vs numpy]; "
          f"f16 tiles RMxRN/flush; "
          f"chosen = {ops.MATMUL16_TILE}/{ops.MATMUL16_FLUSH} (smaller where ops.matmul16_tile says)")
    x_np = (rng.standard_normal((n, 14336)) * 0.5).astype(np.float32)
    for name, qt, k, m in cases:
        if qt == "F16":
            raw = (rng.standard_normal((m, k)) * 0.02).astype(np.float16).view(np.uint8).reshape(-1)
        else:
            raw = sane_blocks(rng, qt, m, k)
        w = dev.upload(raw)
        xk = np.ascontiguousarray(x_np[:, :k])
        x = dev.upload(xk)
        y = dev.buffer(n * m * 4)
        rb = ops.row_bytes(qt, k)
        wref = gguf.quants.dequantize(raw[:64 * rb].reshape(64, rb), getattr(gguf.GGMLQuantizationType, qt))
        c = min(64, n)
        ref = xk[:c].astype(np.float64) @ np.asarray(wref, np.float64).reshape(64, k).T
        row = []
        for cfg in configs:
            if cfg is None:
                kern, groups, lab = ops.matmul(ks, [qt]), ops.matmul_groups(m, n), "f32"
            else:
                tile, fl = cfg
                kern = ops.matmul16(ks, [qt], tile=tile, flush=fl)
                groups, lab = ops.matmul16_groups(m, n, tile), f"{tile[0]}x{tile[1]}/{fl}"
            prm = ops.matmul_params([qt], k, m, n, ldy=m)
            sec = timed(dev, [(kern, [x, y, w], groups, prm)], reps)
            got = dev.read([(y, 0, n * m * 4)]).view(np.float32).reshape(n, m)[:c, :64]
            err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            row.append(f"{lab} {2 * n * m * k / max(sec, 1e-9) / 1e12:.1f} ({sec * 1e3:.2f}) [{err:.1e}]")
        print(f"  {name:8s} {qt:5s} K={k:<6d} M={m:<6d} " + " | ".join(row), flush=True)
        for b in (w, x, y):
            b.destroy()
    dev.destroy()


MATMUL8_CASES = [c for c in MATMUL_CASES if c[1] != "F16"] + [
    ("8B down", "Q4_0", 14336, 4096), ("8B down", "Q4_K", 14336, 4096), ("8B gate", "Q6_K", 4096, 14336),
    ("135M gate", "Q4_1", 576, 1536), ("135M down", "Q4_1", 1536, 576)]


def matmul8_sweep(reps=3, n=2048, only=""):
    """The int8 prefill product (ops.matmul8, every tile) beside the f16 one the backend picks
    (ops.matmul16_tile), same shapes, same call: TFLOP/s (ms) of the product alone, then with the
    quantize_rows pass of its X (which a layer runs once for Q|K|V and once for gate/up), and the
    error of a 64 x 64 corner against numpy's exact product."""
    from hearth.engine.gpu import ops  # noqa: PLC0415
    from hearth.engine.gpu.device import Device  # noqa: PLC0415
    from hearth.engine.gpu.kernels import Kernels  # noqa: PLC0415
    import gguf  # noqa: PLC0415
    dev = Device()
    ks = Kernels(dev)
    rng = np.random.default_rng(0)
    print(f"\nmatmul8 sweep, {n} tokens: TFLOP/s (ms) [rel err of a 64x64 corner vs numpy]; "
          "i8 RMxRN (+q: with the quantize pass), * = the tile ops.matmul8_tile picks")
    x_np = (rng.standard_normal((n, 14336)) * 0.5).astype(np.float32)
    for name, qt, k, m in MATMUL8_CASES:
        if only and not any(o == f"{name} {qt}" for o in only.split(",")):
            continue
        raw = sane_blocks(rng, qt, m, k)
        w = dev.upload(raw)
        xk = np.ascontiguousarray(x_np[:, :k])
        x = dev.upload(xk)
        y = dev.buffer(n * m * 4)
        xq = dev.buffer(ops.q8_rows_words(n, k) * 4)
        s_off = ops.q8_rows_scales(n, k)
        rb = ops.row_bytes(qt, k)
        wref = gguf.quants.dequantize(raw[:64 * rb].reshape(64, rb), getattr(gguf.GGMLQuantizationType, qt))
        c = min(64, n)
        ref = xk[:c].astype(np.float64) @ np.asarray(wref, np.float64).reshape(64, k).T
        flop = 2 * n * m * k

        def err():
            got = dev.read([(y, 0, n * m * 4)]).view(np.float32).reshape(n, m)[:c, :64]
            return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        tile = ops.matmul16_tile(m, n)
        kern = ops.matmul16(ks, [qt], tile=tile, xshift=ops.MATMUL16_FF_SHIFT if "down" in name else 0)
        sec = timed(dev, [(kern, [x, y, w], ops.matmul16_groups(m, n, tile), ops.matmul_params([qt], k, m, n, ldy=m))], reps)
        row = [f"f16 {tile[0]}x{tile[1]} {flop / max(sec, 1e-9) / 1e12:.1f} ({sec * 1e3:.2f}) [{err():.1e}]"]
        qk = (ops.quantize_rows(ks), [x, xq], ops.quantize_rows_groups(n, k), dict(K=k, n=n, ldx=k, s_off=s_off))
        qsec = timed(dev, [qk], reps)
        chosen = ops.matmul8_tile(m, n)
        for t8 in ops.MATMUL8_TILES:
            mk = (ops.matmul8(ks, qt, tile=t8), [xq, y, w], ops.matmul8_groups(m, n, t8),
                  ops.matmul8_params(qt, k, m, n, m, s_off))
            sec = timed(dev, [mk], reps)
            both = timed(dev, [qk, mk], reps)
            mark = "*" if t8 == chosen else ""
            row.append(f"i8 {t8[0]}x{t8[1]}{mark} {flop / max(sec, 1e-9) / 1e12:.1f} ({sec * 1e3:.2f}; "
                       f"+q {both * 1e3:.2f}) [{err():.1e}]")
        row.append(f"q alone {qsec * 1e3:.3f}")
        print(f"  {name:9s} {qt:5s} K={k:<6d} M={m:<6d} " + " | ".join(row), flush=True)
        for b in (w, x, y, xq):
            b.destroy()
    dev.destroy()


COOP_WGSL = """
enable wgpu_cooperative_matrix;
{ENABLE}
@group(0) @binding(0) var<storage, read> a: array<{T}>;
@group(0) @binding(1) var<storage, read> b: array<{T}>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: vec4<u32>;   // n (square), tiles per row
@compute @workgroup_size({SG})
fn main(@builtin(workgroup_id) wid: vec3<u32>) {{
    let n = dims.x;
    let r0 = wid.x * {S}u;
    let c0 = wid.y * {S}u;
    var acc = coop_mat{S}x{S}<{A}, C>();
    for (var k = 0u; k < n; k += {S}u) {{
        let ta = coopLoad<coop_mat{S}x{S}<{T}, A>>(&a[r0 * n + k], n);
        let tb = coopLoad<coop_mat{S}x{S}<{T}, B>>(&b[k * n + c0], n);
        acc = coopMultiplyAdd(ta, tb, acc);
    }}
    coopStore(acc, &c[r0 * n + c0], n);
}}
"""


def coop_probe():
    """Cooperative matrices through wgpu-py: which configurations compile and run, and how fast."""
    import wgpu  # noqa: PLC0415
    from hearth.engine.gpu.device import select_adapter  # noqa: PLC0415
    ad = select_adapter()
    feats = sorted(f for f in ad.features if "coop" in f or "f16" in f)
    print(f"adapter {ad.info['device']}: features {feats}")
    try:
        dev = ad.request_device_sync(required_features=[f for f in ("cooperative-matrix", "shader-f16") if f in ad.features])
    except Exception as e:
        print(f"  device with cooperative-matrix refused: {e}")
        return
    for name, T, A, S in (("8x8 f32", "f32", "f32", 8), ("16x16 f16 -> f16", "f16", "f16", 16),
                          ("16x16 f16 -> f32", "f16", "f32", 16), ("8x8 f16 -> f32", "f16", "f32", 8)):
        code = COOP_WGSL.format(ENABLE="enable f16;" if T == "f16" else "", T=T, A=A, S=S, SG=32)
        code = code.replace("array<f32>;\n@group(0) @binding(3)", f"array<{A}>;\n@group(0) @binding(3)")
        try:
            mod = dev.create_shader_module(code=code)
            pipe = dev.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
        except Exception as e:
            print(f"  {name}: does not compile: {' '.join(str(e).split())[:400]}")
            continue
        for n in (64, 4096):
            rng = np.random.default_rng(0)
            dt = np.float16 if T == "f16" else np.float32
            a = rng.standard_normal((n, n)).astype(dt)
            b = rng.standard_normal((n, n)).astype(dt)
            BU = wgpu.BufferUsage
            ba = dev.create_buffer_with_data(data=a.tobytes(), usage=BU.STORAGE)
            bb = dev.create_buffer_with_data(data=b.tobytes(), usage=BU.STORAGE)
            esz = 2 if A == "f16" else 4
            bc = dev.create_buffer(size=n * n * esz, usage=BU.STORAGE | BU.COPY_SRC)
            bd = dev.create_buffer_with_data(data=np.array([n, n // S, 0, 0], np.uint32).tobytes(), usage=BU.UNIFORM)
            bg = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
                {"binding": i, "resource": {"buffer": x, "offset": 0, "size": x.size}} for i, x in enumerate((ba, bb, bc, bd))])

            def go(reps):
                enc = dev.create_command_encoder()
                cp = enc.begin_compute_pass()
                cp.set_pipeline(pipe)
                cp.set_bind_group(0, bg)
                for _ in range(reps):
                    cp.dispatch_workgroups(n // S, n // S, 1)
                cp.end()
                t = time.perf_counter()
                dev.queue.submit([enc.finish()])
                out = dev.queue.read_buffer(bc)
                return time.perf_counter() - t, out
            try:
                _, out = go(1)
            except Exception as e:
                print(f"  {name} n={n}: failed to run: {e}")
                break
            got = np.frombuffer(out, np.float16 if A == "f16" else np.float32).reshape(n, n).astype(np.float64)
            if n == 64:
                ref = a.astype(np.float64) @ b.astype(np.float64)
                print(f"  {name}: compiles; n=64 max |err| / max |ref| = {np.abs(got - ref).max() / np.abs(ref).max():.2e}")
            else:
                t1 = min(go(1)[0] for _ in range(2))
                t5 = min(go(6)[0] for _ in range(2))
                sec = (t5 - t1) / 5
                print(f"  {name}: naive {n}^3 product {sec * 1e3:.2f} ms = {2 * n ** 3 / sec / 1e12:.1f} TFLOP/s")
    dev.destroy()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--matvec-sweep", action="store_true")
    ap.add_argument("--sweep-only", default="", help="--matvec-sweep: only cases whose name (and type) contains one of these (comma-separated); "
                    "--matmul8-sweep: only the cases named exactly (name and type, e.g. '8B gate Q4_K')")
    ap.add_argument("--coop-probe", action="store_true")
    ap.add_argument("--matmul-sweep", action="store_true")
    ap.add_argument("--matmul8-sweep", action="store_true", help="the int8 prefill product beside the f16 one (no model)")
    ap.add_argument("--dispatch-floor", action="store_true", help="the GPU's cost of an empty dispatch (no model)")
    ap.add_argument("--prefill-only", action="store_true", help="only the prefill chunk's per-kernel times")
    ap.add_argument("--prefill-n", type=int, default=2048, help="tokens in the profiled prefill chunk (at most the backend's)")
    ap.add_argument("--decode-only", action="store_true", help="only decode's per-kernel times")
    ap.add_argument("--split-only", action="store_true", help="only the decode token's split (no per-kernel times)")
    a = ap.parse_args(argv)
    if a.matmul_sweep:
        matmul_sweep()
        return
    if a.matmul8_sweep:
        matmul8_sweep(only=a.sweep_only)
        return
    if a.dispatch_floor:
        dispatch_floor()
        return
    if a.coop_probe:
        coop_probe()
        return
    if a.matvec_sweep:
        matvec_sweep(a.reps, a.sweep_only)
        return
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.gpu import GpuBackend  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415
    g = GGUFFile.open(a.model or default_model_path())
    cfg = ModelConfig.from_gguf(g)
    be = GpuBackend(cfg, g, 4096)
    be.forward(np.arange(2048, dtype=np.int32) + 100, 0)
    be.forward_argmax(np.array([5], np.int32), 2048)
    if a.split_only:
        token_split(be)
    elif not a.prefill_only:
        decode_profile(be, a.reps)
    if not (a.decode_only or a.split_only):
        prefill_profile(be, a.prefill_n)
    be.close()


def decode_profile(be, reps):
    # encode cost
    P = be.decode_plan
    ts = []
    for _ in range(30):
        enc = be.dev.device.create_command_encoder()
        t = time.perf_counter()
        P.encode(enc, 1, 2049, 0, None)
        ts.append(time.perf_counter() - t)
        t2 = time.perf_counter()
        cb = enc.finish()
        ts[-1] = (ts[-1], time.perf_counter() - t2)
        be.dev.queue.submit([cb])
    be.dev.read([(be.amax, 0, 4)])
    enc_t = np.median([x[0] for x in ts]) * 1e3
    fin_t = np.median([x[1] for x in ts]) * 1e3
    # whole token, and submit pieces
    tok = []
    for i in range(30):
        t = time.perf_counter()
        be.forward_argmax(np.array([5], np.int32), 2049 + i)
        tok.append(time.perf_counter() - t)
    print(f"decode: encode {enc_t:.3f} ms, finish {fin_t:.3f} ms for {len(P.ops)} dispatches; "
          f"whole token {np.median(tok) * 1e3:.3f} ms at kv 2049")
    for pieces in (1, 2, 3, 5):
        be.submit_pieces = pieces
        tok = []
        for i in range(40):
            t = time.perf_counter()
            be.forward_argmax(np.array([5], np.int32), 100 + i)
            tok.append(time.perf_counter() - t)
        print(f"  submitted in {pieces} pieces: whole token {np.median(tok) * 1e3:.3f} ms at kv ~120")
    token_split(be)
    be.submit_pieces = 1
    for kv in (17, 2049):
        by, cnt, rt = per_op(be, P, 1, kv, reps)
        print(f"\ndecode at kv_len {kv}: round trip {rt * 1e3:.3f} ms; GPU ms per token by kernel (count):")
        for k, v in by.most_common():
            print(f"  {k:10s} {v * 1e3:8.3f}  ({cnt[k]})")
        print(f"  total      {sum(by.values()) * 1e3:8.3f}")


def token_split(be, n=40):
    """Where a decode token's time goes (kv ~120): the whole step (forward_argmax, and pipelined
    through greedy_steps), the GPU alone (K whole tokens encoded into one command buffer beforehand,
    one readback; the difference of K = 8 and K = 1 over 7), the host side (encode + finish + submit
    of one token, no wait), the empty readback round trip, and one small dispatch (the embedding's
    one workgroup, 200 times in one pass)."""
    P, dev = be.decode_plan, be.dev
    tok = []
    for i in range(n):
        t = time.perf_counter()
        be.forward_argmax(np.array([5], np.int32), 100 + i)
        tok.append(time.perf_counter() - t)
    t = time.perf_counter()
    for _ in be.greedy_steps(5, 100, n):
        pass
    pipe = (time.perf_counter() - t) / n

    def gpu_only(k):
        enc = dev.device.create_command_encoder()
        for _ in range(k):
            P.encode(enc, 1, 120)
        t = time.perf_counter()
        dev.read([(be.amax, 0, 4)], enc)
        return time.perf_counter() - t
    gpu_only(2)
    g1 = float(np.median([gpu_only(1) for _ in range(7)]))
    g8 = float(np.median([gpu_only(8) for _ in range(5)]))
    host = []
    for _ in range(n):
        t = time.perf_counter()
        enc = dev.device.create_command_encoder()
        P.encode(enc, 1, 120)
        dev.submit(enc)
        host.append(time.perf_counter() - t)
    dev.read([(be.amax, 0, 4)])
    rt = roundtrip(be)

    def floor(k):
        enc = dev.device.create_command_encoder()
        P.encode(enc, 1, 120, 0, 1, repeat=k)
        t = time.perf_counter()
        dev.read([(be.amax, 0, 4)], enc)
        return time.perf_counter() - t
    floor(10)
    f = (float(np.median([floor(201) for _ in range(5)])) - float(np.median([floor(1) for _ in range(5)]))) / 200
    print(f"\ntoken split (kv ~120): step {np.median(tok) * 1e3:.3f} ms, "
          f"pipelined {pipe * 1e3:.3f} ms; GPU alone {(g8 - g1) / 7 * 1e3:.3f} ms (one token + readback "
          f"{g1 * 1e3:.3f}); host encode+finish+submit {np.median(host) * 1e3:.3f} ms; empty round trip "
          f"{rt * 1e3:.3f} ms; embedding dispatch {f * 1e6:.1f} us (in one pass)")


FLOOR_WGSL = """
@group(0) @binding(0) var<storage, read_write> o: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x == 0u) { o[0] = o[0] + 1u; } }
"""


def dispatch_floor(n=200):
    """The GPU's cost of a dispatch that does nothing (one thread adds 1): in one pass on one buffer
    (a barrier between each), each on its own buffer (no hazard), with 1,024 workgroups, and each in
    its own compute pass. Seconds per dispatch: (time of n + 1) - (time of 1), over n."""
    from hearth.engine.gpu.device import Device  # noqa: PLC0415
    dev = Device()
    d, BU = dev.device, dev.wgpu.BufferUsage
    pipe = d.create_compute_pipeline(layout="auto", compute={"module": d.create_shader_module(code=FLOOR_WGSL),
                                                            "entry_point": "main"})
    bufs = [dev.buffer(256, f"floor-{i}", BU.STORAGE | BU.COPY_SRC | BU.COPY_DST) for i in range(n + 1)]
    bgs = [d.create_bind_group(layout=pipe.get_bind_group_layout(0),
                               entries=[{"binding": 0, "resource": {"buffer": b, "offset": 0, "size": 256}}]) for b in bufs]

    def once(k, own_buffer, groups, own_pass):
        enc = d.create_command_encoder()
        cp = None
        for i in range(k):
            if cp is None or own_pass:
                if cp is not None:
                    cp.end()
                cp = enc.begin_compute_pass()
                cp.set_pipeline(pipe)
            cp.set_bind_group(0, bgs[i if own_buffer else 0])
            cp.dispatch_workgroups(groups)
        cp.end()
        t = time.perf_counter()
        dev.read([(bufs[0], 0, 4)], enc)
        return time.perf_counter() - t
    print(f"\ndispatch floor ({dev.info['device']}), us a dispatch that does nothing:")
    for name, args in (("one pass, one buffer", (False, 1, False)), ("one pass, own buffers", (True, 1, False)),
                       ("one pass, one buffer, 1,024 workgroups", (False, 1024, False)),
                       ("own passes, one buffer", (False, 1, True))):
        once(n + 1, *args)
        t1 = float(np.median([once(1, *args) for _ in range(5)]))
        tn = float(np.median([once(n + 1, *args) for _ in range(5)]))
        print(f"  {name:42s} {(tn - t1) / n * 1e6:7.2f}")
    dev.destroy()


def prefill_profile(be, n=2048):
    n = min(n, be.chunk)  # a tiny model's chunk is smaller than 2048
    # the step buffer must say what a real chunk says (rope and attention read it)
    hdr = np.zeros(4 + n, np.uint32)
    hdr[1] = n
    hdr[4:] = np.arange(n) + 100
    be.dev.queue.write_buffer(be.step, 0, hdr)
    by, cnt, rt = per_op(be, be.prefill_plan, n, n, 3)
    kinds = ("int8 " + "/".join(be.mm8_types) + ", else " if be.mm8 else "") + ("f16" if be.f16 else "f32")
    print(f"\nprefill chunk of {n} at pos 0 ({kinds} products): GPU ms by kernel (count):")
    for k, v in by.most_common():
        print(f"  {k:10s} {v * 1e3:8.3f}  ({cnt[k]})")
    print(f"  total      {sum(by.values()) * 1e3:8.3f}")


if __name__ == "__main__":
    main()
