"""A tiny qwen35moe GGUF made from the shared tiny qwen35 (its vocabulary, attention and Gated
DeltaNet layers, copied as they are) with each dense FFN replaced by a mixture of experts: a softmax
router over 4 experts, the top 2 renormalised, and a shared expert gated by sigmoid(ffn_gate_inp_shexp x).
New tensors are F32/F16 from a seeded generator, so the file is the same bytes on every machine
(its sha256 is stored next to llama.cpp's logits for it, tests/data/tiny_qwen35moe_ref.npz).

    python -m tests.tiny_qwen35moe <tiny-qwen35.gguf> <out.gguf> [--f32]

--f32 writes every tensor as F32 (llama.cpp's float path, the tight reference).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np

N_EXPERT, N_USED, N_FF_EXP, N_FF_SHEXP = 4, 2, 32, 48
SEED = 2035


def _kv(key: str, vtype: int, raw_value: bytes) -> bytes:
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + raw_value


U32, F32_T = 4, 0
F16_T = 1


def make(src: Path, dst: Path, f32: bool = False) -> Path:
    """Written byte by byte (the source's metadata values copied raw, renamed to qwen35moe.*): the
    vendored gguf-py reader takes ~15 s to parse a 151k-token vocabulary, this ~1 s."""
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.quants import dequantize  # noqa: PLC0415
    arch = "qwen35moe"
    g = GGUFFile.open(src)
    raw = Path(src).read_bytes()
    kvs = []
    for key, (a, b) in g.metadata_spans.items():
        vtype = g.metadata_types[key]
        value = bytes(raw[a:b])[8 + len(key.encode()) + 4:]
        if key == "general.architecture":
            value = struct.pack("<Q", len(arch)) + arch.encode()
        kvs.append(_kv(key.replace("qwen35.", f"{arch}.", 1) if key.startswith("qwen35.") else key, vtype, value))
    for suffix, v in (("expert_count", N_EXPERT), ("expert_used_count", N_USED),
                      ("expert_feed_forward_length", N_FF_EXP), ("expert_shared_feed_forward_length", N_FF_SHEXP)):
        kvs.append(_kv(f"{arch}.{suffix}", U32, struct.pack("<I", v)))
    rng = np.random.default_rng(SEED)
    d = int(g.metadata["qwen35.embedding_length"])

    def mat(*shape, gain=1.0):
        return (rng.standard_normal(shape) * gain / np.sqrt(shape[-1])).astype(np.float32)

    tensors = []   # (name, ne, type id, bytes)

    def put(name, arr, half=False):
        a = arr.astype(np.float16 if half and not f32 else np.float32)
        tensors.append((name, arr.shape[::-1], F16_T if a.dtype == np.float16 else F32_T, a.tobytes()))

    for name, t in g.tensors.items():
        if ".ffn_" in name:
            if name.endswith("ffn_gate.weight"):
                p = name[:-len("ffn_gate.weight")]
                put(p + "ffn_gate_inp.weight", mat(N_EXPERT, d, gain=2.0))
                put(p + "ffn_gate_exps.weight", mat(N_EXPERT, N_FF_EXP, d), half=True)
                put(p + "ffn_up_exps.weight", mat(N_EXPERT, N_FF_EXP, d))
                put(p + "ffn_down_exps.weight", mat(N_EXPERT, d, N_FF_EXP), half=True)
                put(p + "ffn_gate_inp_shexp.weight", mat(d))
                put(p + "ffn_gate_shexp.weight", mat(N_FF_SHEXP, d), half=True)
                put(p + "ffn_up_shexp.weight", mat(N_FF_SHEXP, d))
                put(p + "ffn_down_shexp.weight", mat(d, N_FF_SHEXP), half=True)
            continue
        if f32:
            tensors.append((name, tuple(t.shape), F32_T, dequantize(t.data, t.type, t.shape, name).astype(np.float32).tobytes()))
        else:
            tensors.append((name, tuple(t.shape), t.type.id,
                            bytes(t.data)))
    align = 32
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, offset, blobs = [], 0, []
    for name, ne, tid, data in tensors:
        nb = name.encode()
        infos.append(struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne)) +
                     b"".join(struct.pack("<Q", int(x)) for x in ne) + struct.pack("<IQ", tid, offset))
        pad = (-len(data)) % align
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head += b"".join(infos)
    head += b"\0" * ((-len(head)) % align)
    dst.write_bytes(head + b"".join(blobs))
    return dst


if __name__ == "__main__":
    make(Path(sys.argv[1]), Path(sys.argv[2]), f32="--f32" in sys.argv)


def llama_cpp_reference(src: Path, out: Path, prompts: dict[str, list[int]]) -> None:
    """Run with /work/cache/llama-cpp's venv (llama_cpp importable) on `src` (a made model) and its
    all-F32 copy beside it (`<stem>-f32.gguf`): llama.cpp's top-64 logits at every position (batch) and the F32 copy's last
    logits, for each prompt, into `out` (.npz) with the made file's sha256."""
    import hashlib  # noqa: PLC0415

    from llama_cpp import Llama  # noqa: PLC0415
    q, f = src, src.with_name(src.stem + "-f32.gguf")   # made beforehand by `make` (the hearth venv)
    res = {"sha256": np.array(hashlib.sha256(q.read_bytes()).hexdigest())}
    for path, tag in ((q, "q"), (f, "f32")):
        m = Llama(str(path), n_ctx=128, n_threads=2, n_batch=128, logits_all=True, verbose=False,
                  type_k=0 if tag == "f32" else 1, type_v=0 if tag == "f32" else 1)
        for name, ids in prompts.items():
            m.reset()
            m.eval(ids)
            lg = np.array(m.scores[:len(ids)], np.float32)
            if tag == "q":
                top = np.argsort(-lg, axis=1, kind="stable")[:, :64].astype(np.int32)
                res[f"{name}_ids"] = np.array(ids, np.int32)
                res[f"{name}_top_ids"] = top
                res[f"{name}_top_logits"] = np.take_along_axis(lg, top, axis=1)
            else:   # the F32 copy's last position at its 512 largest logits (a tight, small target)
                top = np.argsort(-lg[-1], kind="stable")[:512].astype(np.int32)
                res[f"{name}_f32_ids"], res[f"{name}_f32_logits"] = top, lg[-1][top]
        del m
    np.savez_compressed(out, **res)
