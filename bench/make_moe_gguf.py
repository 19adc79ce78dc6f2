"""Random-weight GGUF files of real mixture-of-experts shapes, for memory and speed side by side with
llama.cpp on the same bytes (never run by the tests: the files are 12-19 GB).

    gptoss20b    gpt-oss-20b: 24 layers, width 2,880, 64 query / 8 KV heads of 64, 32 experts of
                 2,880, top 4, vocabulary 201,088, sliding window 128 on even layers, YaRN (factor 32
                 over 4,096), attention sinks; experts MXFP4, the rest as TYPES below
    qwen3_30b    Qwen3-30B-A3B: 48 layers, width 2,048, 32 query / 4 KV heads of 128, 128 experts of
                 768, top 8, vocabulary 151,936; llama.cpp's Q4_K_M mix (Q4_K; Q6_K for the output and,
                 in the layers `use_more_bits` picks, attn_v and ffn_down_exps; routers and norms F32)

Weights are random blocks of their GGUF type written as bytes (valid scales, random codes), tensor by
tensor, so a file is made in minutes with one tensor in memory at a time. The tokenizer comes from a
real vocabulary file (gpt-oss: llama-bpe padded with unused tokens to 201,088, since no o200k_harmony
vocabulary file is at hand; Qwen3: the qwen2 vocabulary, 151,936 tokens). The logits mean nothing.

usage: python -m bench.make_moe_gguf SHAPE OUT.gguf [--layers N]
    (a Python with the `gguf` package; --layers N makes a shorter model of the same widths, for a
    quick check that Hearth and llama.cpp load it; VOCAB_DIR names the folder of ggml-vocab-*.gguf,
    by default HEARTH_REFERENCE's vocab/ as the tests find it)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, GGUFValueType, GGUFWriter

SHAPES = {
    "gptoss20b": {"arch": "gpt-oss", "n_embd": 2880, "n_layer": 24, "n_head": 64, "n_head_kv": 8, "head_dim": 64,
                  "n_expert": 32, "n_used": 4, "n_ff_exp": 2880, "n_vocab": 201088, "vocab": "llama-bpe",
                  "ctx": 131072, "rope_base": 150000.0, "window": 128, "rms_eps": 1e-5},
    "qwen3_30b": {"arch": "qwen3moe", "n_embd": 2048, "n_layer": 48, "n_head": 32, "n_head_kv": 4, "head_dim": 128,
                  "n_expert": 128, "n_used": 8, "n_ff_exp": 768, "n_ff": 6144, "n_vocab": 151936, "vocab": "qwen2",
                  "ctx": 40960, "rope_base": 1e6, "rms_eps": 1e-6},
}
# gpt-oss's non-expert tensors: the published MXFP4 file keeps attention in BF16 and the embeddings
# and output in 8 bits (as far as the file listings show; change here if a listing says otherwise).
GPTOSS_TYPES = {"token_embd": QT.Q8_0, "output": QT.Q8_0, "attn": QT.BF16, "experts": QT.MXFP4}
BLOCK = {QT.Q4_K: (256, 144), QT.Q6_K: (256, 210), QT.Q8_0: (32, 34), QT.MXFP4: (32, 17)}


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's llama-quant.cpp: the layers a _M mix gives more bits (first and last eighth, every third)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def random_blocks(rng, qt, n_rows: int, n_in: int, std: float) -> np.ndarray:
    """uint8 [n_rows, bytes per row] of random blocks whose weights are about `std`."""
    bs, nbytes = BLOCK[qt]
    raw = rng.integers(0, 256, size=(n_rows * (n_in // bs), nbytes), dtype=np.uint8)
    f16 = lambda v: np.frombuffer(np.float16(v).tobytes(), np.uint8)
    if qt == QT.Q8_0:
        raw[:, 0:2] = f16(std / 73.0)
    elif qt == QT.Q4_K:                       # d, dmin (f16), then 6-bit scales and mins, then codes
        raw[:, 0:2], raw[:, 2:4] = f16(std / 150.0), f16(std / 40.0)
    elif qt == QT.Q6_K:                       # ql, qh, int8 scales, then d (f16) last
        raw[:, 208:210] = f16(std / 1000.0)
    elif qt == QT.MXFP4:                      # E8M0 exponent first: codes up to 6 times 2^(e - 127)
        raw[:, 0] = np.uint8(127 + int(np.floor(np.log2(std))) - 1)
    return raw.reshape(n_rows, -1)


def dense(rng, qt, shape: tuple[int, ...], std: float, mean: float = 0.0) -> np.ndarray:
    """A float tensor (numpy order) of type F32/F16/BF16, as gguf-py stores it."""
    x = rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)
    if qt == QT.F32:
        return x
    if qt == QT.F16:
        return x.astype(np.float16)
    return (x.view(np.uint32) >> 16).astype(np.uint16)      # BF16: the high half (truncated)


def copy_tokenizer(w: GGUFWriter, src: Path, n_vocab: int) -> None:
    """The tokenizer keys of `src`, its token list padded with unused tokens to n_vocab."""
    r = GGUFReader(src)
    for k, f in r.fields.items():
        if not k.startswith("tokenizer.") or k == "tokenizer.chat_template":
            continue
        t = f.types[0]
        if t == GGUFValueType.ARRAY:
            vals = ([bytes(f.parts[i]) for i in f.data] if f.types[-1] == GGUFValueType.STRING
                    else [f.parts[i].tolist()[0] for i in f.data])
            if k == "tokenizer.ggml.tokens":
                vals += [f"<|unused_{i}|>".encode() for i in range(n_vocab - len(vals))]
            elif k == "tokenizer.ggml.token_type":
                vals += [4] * (n_vocab - len(vals))          # LLAMA_TOKEN_TYPE_UNUSED
            w.add_array(k, vals)
        elif t == GGUFValueType.STRING:
            w.add_string(k, bytes(f.parts[f.data[0]]).decode())
        elif t == GGUFValueType.BOOL:
            w.add_bool(k, bool(f.parts[f.data[0]][0]))
        else:
            w.add_uint32(k, int(f.parts[f.data[0]][0]))


class Plan:
    """The tensors of a file in order: (name, numpy shape, GGUF type, maker(rng) -> array)."""

    def __init__(self):
        self.items = []

    def quant(self, name, qt, n_rows, n_in, std, lead=()):
        """A quantized matrix [*lead, n_rows, n_in] (lead: the experts)."""
        n = int(np.prod(lead)) * n_rows if lead else n_rows

        def make(rng):
            return random_blocks(rng, qt, n, n_in, std).reshape(*lead, n_rows, -1)
        self.items.append((name, (*lead, n_rows, n_in), qt, make))

    def float(self, name, qt, shape, std, mean=0.0):
        self.items.append((name, tuple(shape), qt, lambda rng: dense(rng, qt, shape, std, mean)))


def plan_gptoss(s: dict) -> Plan:
    d, hd, E, ff = s["n_embd"], s["head_dim"], s["n_expert"], s["n_ff_exp"]
    q, kv = s["n_head"] * hd, s["n_head_kv"] * hd
    T = GPTOSS_TYPES
    p = Plan()
    p.quant("token_embd.weight", T["token_embd"], s["n_vocab"], d, 0.02)
    p.float("output_norm.weight", QT.F32, (d,), 0.0, 1.0)
    p.quant("output.weight", T["output"], s["n_vocab"], d, 1 / np.sqrt(d))
    for i in range(s["n_layer"]):
        b = f"blk.{i}."
        p.float(b + "attn_norm.weight", QT.F32, (d,), 0.0, 1.0)
        for n, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            p.float(b + n + ".weight", T["attn"], (rows, d), 1 / np.sqrt(d))
            p.float(b + n + ".bias", QT.F32, (rows,), 0.02)
        p.float(b + "attn_output.weight", T["attn"], (d, q), 1 / np.sqrt(q))
        p.float(b + "attn_output.bias", QT.F32, (d,), 0.02)
        p.float(b + "attn_sinks.weight", QT.F32, (s["n_head"],), 1.0)
        p.float(b + "post_attention_norm.weight", QT.F32, (d,), 0.0, 1.0)
        p.float(b + "ffn_gate_inp.weight", QT.F32, (E, d), 1 / np.sqrt(d))
        p.float(b + "ffn_gate_inp.bias", QT.F32, (E,), 0.1)
        for n, rows, n_in in (("ffn_gate_exps", ff, d), ("ffn_up_exps", ff, d), ("ffn_down_exps", d, ff)):
            p.quant(b + n + ".weight", T["experts"], rows, n_in, 1 / np.sqrt(n_in), lead=(E,))
            p.float(b + n + ".bias", QT.F32, (E, rows), 0.02)
    return p


def plan_qwen3moe(s: dict) -> Plan:
    d, hd, E, ff, L = s["n_embd"], s["head_dim"], s["n_expert"], s["n_ff_exp"], s["n_layer"]
    q, kv = s["n_head"] * hd, s["n_head_kv"] * hd
    p = Plan()
    p.quant("token_embd.weight", QT.Q4_K, s["n_vocab"], d, 0.02)
    p.float("output_norm.weight", QT.F32, (d,), 0.0, 1.0)
    p.quant("output.weight", QT.Q6_K, s["n_vocab"], d, 1 / np.sqrt(d))
    for i in range(L):
        b, more = f"blk.{i}.", use_more_bits(i, L)
        p.float(b + "attn_norm.weight", QT.F32, (d,), 0.0, 1.0)
        p.quant(b + "attn_q.weight", QT.Q4_K, q, d, 1 / np.sqrt(d))
        p.quant(b + "attn_k.weight", QT.Q4_K, kv, d, 1 / np.sqrt(d))
        p.quant(b + "attn_v.weight", QT.Q6_K if more else QT.Q4_K, kv, d, 1 / np.sqrt(d))
        p.float(b + "attn_q_norm.weight", QT.F32, (hd,), 0.0, 1.0)
        p.float(b + "attn_k_norm.weight", QT.F32, (hd,), 0.0, 1.0)
        p.quant(b + "attn_output.weight", QT.Q4_K, d, q, 1 / np.sqrt(q))
        p.float(b + "ffn_norm.weight", QT.F32, (d,), 0.0, 1.0)
        p.float(b + "ffn_gate_inp.weight", QT.F32, (E, d), 1 / np.sqrt(d))
        p.quant(b + "ffn_gate_exps.weight", QT.Q4_K, ff, d, 1 / np.sqrt(d), lead=(E,))
        p.quant(b + "ffn_up_exps.weight", QT.Q4_K, ff, d, 1 / np.sqrt(d), lead=(E,))
        p.quant(b + "ffn_down_exps.weight", QT.Q6_K if more else QT.Q4_K, d, ff, 1 / np.sqrt(ff), lead=(E,))
    return p


def write_metadata(w: GGUFWriter, shape: str, s: dict, n_layer: int) -> None:
    a = s["arch"]
    w.add_name(f"random-{shape}")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["n_embd"])
    w.add_block_count(n_layer)
    w.add_feed_forward_length(s.get("n_ff", s["n_ff_exp"]))
    w.add_uint32(f"{a}.expert_feed_forward_length", s["n_ff_exp"])
    w.add_expert_count(s["n_expert"])
    w.add_expert_used_count(s["n_used"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(s["rms_eps"])
    if a == "gpt-oss":
        w.add_sliding_window(s["window"])
        w.add_string(f"{a}.rope.scaling.type", "yarn")
        w.add_float32(f"{a}.rope.scaling.factor", 32.0)
        w.add_uint32(f"{a}.rope.scaling.original_context_length", 4096)
        w.add_file_type(38)                                   # LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    else:
        w.add_file_type(15)                                   # LLAMA_FTYPE_MOSTLY_Q4_K_M


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=None, help="fewer layers, the same widths (a quick check)")
    args = ap.parse_args()
    s = dict(SHAPES[args.shape])
    if args.layers:
        s["n_layer"] = args.layers
    reference = os.environ.get("HEARTH_REFERENCE", Path(__file__).resolve().parents[2] / "shared" / "reference")
    vocab_dir = Path(os.environ.get("VOCAB_DIR", Path(reference) / "vocab"))
    plan = plan_gptoss(s) if s["arch"] == "gpt-oss" else plan_qwen3moe(s)
    w = GGUFWriter(str(args.out), s["arch"])
    write_metadata(w, args.shape, s, s["n_layer"])
    copy_tokenizer(w, vocab_dir / f"ggml-vocab-{s['vocab']}.gguf", s["n_vocab"])
    sizes = {}
    for name, shape, qt, make in plan.items:
        nbytes = _nbytes(shape, qt)
        sizes[name] = nbytes
        w.add_tensor_info(name, _stored_shape(shape, qt), _dtype(qt), nbytes, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(1234)
    total = sum(sizes.values())
    done = 0
    for name, shape, qt, make in plan.items:
        arr = make(rng)
        assert arr.nbytes == sizes[name], (name, arr.nbytes, sizes[name])
        w.write_tensor_data(arr)
        done += arr.nbytes
        print(f"\r{done / 2**30:6.2f} / {total / 2**30:.2f} GiB  {name:40s}", end="", flush=True)
    w.close()
    print(f"\n{args.out}: {args.out.stat().st_size / 1e9:.2f} GB")


def _nbytes(shape, qt) -> int:
    n = int(np.prod(shape))
    if qt in BLOCK:
        bs, nb = BLOCK[qt]
        return n // bs * nb
    return n * {QT.F32: 4, QT.F16: 2, QT.BF16: 2}[qt]


def _stored_shape(shape, qt):
    """What add_tensor_info takes as the numpy shape of the bytes it will be given."""
    if qt in BLOCK:
        bs, nb = BLOCK[qt]
        return (*shape[:-1], shape[-1] // bs * nb)
    return shape


def _dtype(qt):
    return {QT.F32: np.float32, QT.F16: np.float16, QT.BF16: np.uint16}.get(qt, np.uint8)


if __name__ == "__main__":
    main()
