"""smollm3, phi3 and mistral3 at real widths on the GPU backend against numpy: the paths a real GPU
takes (int8-x decode matvecs at their default row lengths 2,048-4,096, int8-X and f16 prefill
products) run on whatever adapter wgpu finds (lavapipe here), which the tiny models' tests reach only
with ops.INT8_K_MIN lowered. Never run by the tests (each file is 40-90 MB).

Models: tests/data/tiny-next/make_tiny.py's layers and metadata at real widths (smollm3 2,048 wide,
16 / 4 heads of 128; phi3 3,072, 24 / 8 heads of 128, 96 rotated dims; mistral3 3,072, 32 / 8 heads
of 128), n_ff 4,096, every matrix Q8_0, the token embedding F16, random weights (logits spread ~150-250).
Printed: |GPU - numpy float| over a 24-token prefill (all positions) and 3 decode steps, beside
numpy's own 8-bit-x path's distance from its float path (llama.cpp's scheme: the noise to expect).

usage: python -m bench.gpu_dense_next_wide [smollm3,phi3,mistral3] [--dir /tmp/wide]
    (a Python with the `gguf` package; the vocabulary from HEARTH_REFERENCE's vocab/ggml-vocab-phi-3.gguf)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DIMS = {"smollm3": (2048, 16, 4, 128, 4096), "phi3": (3072, 24, 8, 128, 4096), "mistral3": (3072, 32, 8, 128, 4096)}
IDS = np.asarray([1] + list(range(200, 223)), np.int32)     # 24 positions: past mistral3's floor of 16
STEPS = [5, 6, 7]


def _make_tiny():
    spec = importlib.util.spec_from_file_location("make_tiny", ROOT / "tests" / "data" / "tiny-next" / "make_tiny.py")
    mt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mt)
    return mt


def write(arch: str, path: Path, vocab_path: Path) -> None:
    import gguf  # noqa: PLC0415
    mt = _make_tiny()
    mt.D, mt.N_HEAD, mt.N_KV, mt.HD, mt.N_FF = DIMS[arch]
    spec = mt.ARCHS[arch]
    kv = dict(spec["kv"], **({"rope.dimension_count": 96} if arch == "phi3" else {}))
    v = mt.vocab(str(vocab_path))
    rng = np.random.default_rng(11)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("wide random")
    w.add_context_length(spec.get("ctx", 128))
    w.add_embedding_length(mt.D)
    w.add_block_count(spec["n_layer"])
    w.add_feed_forward_length(mt.N_FF)
    w.add_head_count(mt.N_HEAD)
    w.add_head_count_kv(mt.N_KV)
    w.add_key_length(mt.HD)
    w.add_value_length(mt.HD)
    w.add_layer_norm_rms_eps(1e-5)
    for k, val in kv.items():
        add = w.add_string if isinstance(val, str) else w.add_uint32 if isinstance(val, int) else w.add_float32
        add(f"{arch}.{k}", val)
    mt.write_vocab(w, v)
    t = {"token_embd.weight": (0.3 * rng.standard_normal((len(v[0]), mt.D))).astype(np.float32),
         "output_norm.weight": (1 + 0.1 * rng.standard_normal(mt.D)).astype(np.float32)}
    if arch == "phi3":
        t["rope_factors_long.weight"] = np.linspace(1.0, 12.0, 48).astype(np.float32)
        t["rope_factors_short.weight"] = np.linspace(1.0, 1.6, 48).astype(np.float32)
    for il in range(spec["n_layer"]):
        t.update(mt.layer_tensors(arch, rng, il))
    q8 = gguf.GGMLQuantizationType.Q8_0
    for name, a in t.items():
        if a.ndim == 1:
            w.add_tensor(name, a)
        elif name == "token_embd.weight":
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, q8), raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _run(be):
    """(prefill logits [24, vocab], decode logits [3, vocab])."""
    a = np.array(be.forward(IDS, 0, all_logits=True), copy=True)
    s = np.stack([np.array(be.forward(np.array([t], np.int32), len(IDS) + j), copy=True) for j, t in enumerate(STEPS)])
    return a, s


def _diff(a, b) -> str:
    d = np.abs(np.asarray(a, np.float64) - b)
    return f"mean {d.mean():.4f} max {d.max():.4f}"


def check(arch: str, path: Path) -> None:
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.cpu_backend import CpuBackend  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.gpu import GpuBackend  # noqa: PLC0415
    g = GGUFFile.open(path)
    cfg = ModelConfig.from_gguf(g)
    ref_a, ref_s = _run(CpuBackend(cfg, g, 128, int8=False))
    q_a, q_s = _run(CpuBackend(cfg, g, 128, int8=True))
    print(f"{arch}: logits spread {np.ptp(ref_a, axis=-1).mean():.0f}; numpy 8-bit x vs float: "
          f"prefill {_diff(q_a, ref_a)}, decode {_diff(q_s, ref_s)}")
    for label, kw in (("f32", {}), ("real-GPU paths", dict(int8=True, f16=True, mm8=True))):
        t0 = time.perf_counter()
        be = GpuBackend(cfg, g, 128, **kw)
        try:
            a, s = _run(be)
            print(f"  GPU {label} (int8 {be.int8}, f16 {be.f16}, mm8 {be.mm8}) vs numpy float: prefill {_diff(a, ref_a)}, "
                  f"decode {_diff(s, ref_s)}, same argmax {(a.argmax(-1) == ref_a.argmax(-1)).mean():.2f}, "
                  f"{time.perf_counter() - t0:.0f} s")
        finally:
            be.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archs", nargs="?", default="smollm3,phi3,mistral3")
    ap.add_argument("--dir", default="/tmp/hearth-wide-dense")
    args = ap.parse_args()
    ref = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    for arch in args.archs.split(","):
        path = out / f"wide-{arch}.gguf"
        if not path.exists():
            write(arch, path, ref / "vocab" / "ggml-vocab-phi-3.gguf")
        check(arch, path)


if __name__ == "__main__":
    main()
