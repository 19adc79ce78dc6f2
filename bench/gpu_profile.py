"""Where the GPU backend's time goes: `python -m bench.gpu_profile [--model PATH]`.

Prints, for decode and for a 2,048-token prefill chunk: the Python time to encode a token's plan,
the empty submit+readback round trip, and per kernel label the GPU time of one dispatch (each op
repeated R times in one pass, the round trip subtracted), summed over layers.
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
        for _ in range(reps):
            plan.encode(enc, n, kv_len, i, i + 1)
        t = time.perf_counter()
        be.dev.read([(be.amax, 0, 4)], enc)
        dt = time.perf_counter() - t - rt
        lab = plan.ops[i]["label"].split(".")[-1]
        by[lab] += dt / reps
        count[lab] += 1
    return by, count, rt


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args(argv)
    from engine.config import ModelConfig  # noqa: PLC0415
    from engine.gguf import GGUFFile  # noqa: PLC0415
    from engine.gpu import GpuBackend  # noqa: PLC0415
    from engine.paths import default_model_path  # noqa: PLC0415
    g = GGUFFile.open(a.model or default_model_path())
    cfg = ModelConfig.from_gguf(g)
    be = GpuBackend(cfg, g, 4096)
    be.forward(np.arange(2048, dtype=np.int32) + 100, 0)
    be.forward_argmax(np.array([5], np.int32), 2048)
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
    be.submit_pieces = 1
    for kv in (17, 2049):
        by, cnt, rt = per_op(be, P, 1, kv, a.reps)
        print(f"\ndecode at kv_len {kv}: round trip {rt * 1e3:.3f} ms; GPU ms per token by kernel (count):")
        for k, v in by.most_common():
            print(f"  {k:10s} {v * 1e3:8.3f}  ({cnt[k]})")
        print(f"  total      {sum(by.values()) * 1e3:8.3f}")
    # the step buffer must say what a real 2048-token chunk says (rope and attention read it)
    hdr = np.zeros(4 + 2048, np.uint32)
    hdr[1] = 2048
    hdr[4:] = np.arange(2048) + 100
    be.dev.queue.write_buffer(be.step, 0, hdr)
    by, cnt, rt = per_op(be, be.prefill_plan, 2048, 2048, 3)
    print("\nprefill chunk of 2048 at pos 0: GPU ms by kernel (count):")
    for k, v in by.most_common():
        print(f"  {k:10s} {v * 1e3:8.3f}  ({cnt[k]})")
    print(f"  total      {sum(by.values()) * 1e3:8.3f}")
    be.close()


if __name__ == "__main__":
    main()
