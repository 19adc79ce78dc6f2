"""Random-weight GGUF files of real hybrid shapes (Qwen3.5-4B, Qwen3.5-35B-A3B-class MoE, Gemma 4 E4B)
for speed and memory side by side with llama.cpp. Never run by the tests.

Matrices are random blocks of their GGUF type written straight as bytes (sane f16 scales, random
quants), so a multi-GB file takes seconds; small tensors (norms, the delta rule's vectors) are
float32 of plausible ranges; the tokenizer keys are copied raw from a vocabulary file. The logits mean
nothing. Q4_K_M is llama.cpp's mix: Q4_K, with Q6_K for the output, attn_v and every other ffn_down.

    python bench/make_hybrid_gguf.py SHAPE QTYPE OUT.gguf [--layers N]

SHAPE: qwen35-4b, qwen35moe-35b, gemma4-e4b; QTYPE: Q4_0, Q8_0, Q4_K_M. --layers keeps the first N
layers (same widths): a file this machine can hold that still times a layer of the real size.
The shapes are the published configs' as best known here (numbers below); check them against a
real file's header before quoting a figure as that model's.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Sessions have shared/ beside the worktrees' parent, CI beside the clone (HEARTH_REFERENCE overrides).
VOCAB = Path(os.environ.get("HEARTH_REFERENCE", next(
    (p for p in (ROOT.parent / "shared" / "reference", ROOT.parent.parent / "shared" / "reference") if p.is_dir()),
    ROOT.parent / "shared" / "reference"))) / "vocab"

SHAPES = {
    # hidden 2560, 32 layers (every 4th full attention), 16 q / 4 kv heads of 256, FFN 9216;
    # Gated DeltaNet: 16 key heads, 32 value heads of 128, conv kernel 4; partial rotary 64 dims
    "qwen35-4b": dict(arch="qwen35", vocab="qwen35", n_embd=2560, n_layer=32, n_head=16, n_head_kv=4, head_dim=256,
                      n_ff=9216, d_conv=4, d_state=128, n_group=16, dt_rank=32, n_rot=64, tied=True),
    # hidden 2048, 40 layers, 256 experts (8 used) of 512 plus a shared expert of 512
    "qwen35moe-35b": dict(arch="qwen35moe", vocab="qwen35", n_embd=2048, n_layer=40, n_head=16, n_head_kv=2,
                          head_dim=256, n_ff=512, d_conv=4, d_state=128, n_group=16, dt_rank=32, n_rot=64,
                          tied=False, n_expert=256, n_used=8, n_ff_exp=512, n_ff_shexp=512),
    # hidden 2560, 42 layers (5 sliding of 6), 8 q / 2 kv heads, head dim 256 sliding / 512 full,
    # FFN 10240, per-layer inputs of 256, the last 18 layers sharing K/V, window 512
    "gemma4-e4b": dict(arch="gemma4", vocab="gemma-4", n_embd=2560, n_layer=42, n_head=8, n_head_kv=2, head_dim=512,
                       head_dim_swa=256, n_ff=10240, n_per_layer=256, shared_kv=18, window=512, tied=True),
}
BLOCK = {"Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210),
         "F32": (0, 1, 4), "F16": (1, 1, 2)}
U32, F32V, BOOLV, STR, ARR, I32 = 4, 6, 7, 8, 9, 5


def kv(key, vtype, raw):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + raw


def u32(key, v):
    return kv(key, U32, struct.pack("<I", v))


def f32(key, v):
    return kv(key, F32V, struct.pack("<f", v))


def s(key, v):
    b = v.encode()
    return kv(key, STR, struct.pack("<Q", len(b)) + b)


def arr(key, sub, fmt, vals):
    return kv(key, ARR, struct.pack("<IQ", sub, len(vals)) + b"".join(struct.pack(fmt, v) for v in vals))


def tokenizer_kvs(vocab: str) -> tuple[list[bytes], int]:
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    path = VOCAB / f"ggml-vocab-{vocab}.gguf"
    g = GGUFFile.open(path, check_types=False)
    raw = path.read_bytes()
    out = [raw[a:b] for key, (a, b) in g.metadata_spans.items() if key.startswith("tokenizer.")]
    return out, len(g.metadata["tokenizer.ggml.tokens"])


def rand_blocks(rng, qt: str, n_rows: int, n_in: int, std: float) -> bytes:
    if qt == "F32":
        return (rng.standard_normal((n_rows, n_in)) * std).astype(np.float32).tobytes()
    _, bs, nbytes = BLOCK[qt]
    raw = rng.integers(0, 256, size=(n_rows * (n_in // bs), nbytes), dtype=np.uint8)
    f16 = lambda x: np.frombuffer(np.float16(x).tobytes(), np.uint8)   # noqa: E731
    if qt == "Q4_0":
        raw[:, 0:2] = f16(std / 4.6)
    elif qt == "Q8_0":
        raw[:, 0:2] = f16(std / 73.0)
    elif qt == "Q4_K":
        raw[:, 0:2], raw[:, 2:4] = f16(std / 150.0), f16(std / 40.0)
    elif qt == "Q6_K":
        raw[:, 208:210] = f16(std / 1000.0)
    return raw.tobytes()


class Plan:
    """Tensors as (name, ne, type, maker) so the header is written before any data is made."""

    def __init__(self, qtype: str, seed: int = 1234):
        self.mix = qtype == "Q4_K_M"
        self.qt = "Q4_K" if self.mix else qtype
        self.rng = np.random.default_rng(seed)
        self.items: list = []

    def mat(self, name, n_out, n_in, kind="", i=0, std=None):
        q = self.qt
        if self.mix and (kind in ("output", "attn_v") or (kind == "ffn_down" and i % 2 == 0)):
            q = "Q6_K"
        if n_in % BLOCK[q][1]:
            q = "F32"
        sd = std if std is not None else 1.0 / np.sqrt(n_in)
        self.items.append((name, (n_in, n_out), q, lambda: rand_blocks(self.rng, q, n_out, n_in, sd)))

    def experts(self, name, n_exp, n_out, n_in):
        q = self.qt if n_in % BLOCK[self.qt][1] == 0 else "F32"
        self.items.append((name, (n_in, n_out, n_exp), q, lambda: rand_blocks(self.rng, q, n_exp * n_out, n_in,
                                                                              1.0 / np.sqrt(n_in))))

    def vec(self, name, values):
        v = np.asarray(values, np.float32)
        self.items.append((name, v.shape[::-1], "F32", lambda: v.tobytes()))


def qwen35_tensors(p: Plan, c: dict, L: int, n_vocab: int) -> None:
    E, H, KV, hd, F = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["n_ff"]
    S, G, V = c["d_state"], c["n_group"], c["dt_rank"]
    conv = 2 * G * S + V * S
    p.mat("token_embd.weight", n_vocab, E, std=0.02)
    p.vec("output_norm.weight", np.ones(E))
    if not c["tied"]:
        p.mat("output.weight", n_vocab, E, "output")
    for i in range(L):
        b = f"blk.{i}."
        p.vec(b + "attn_norm.weight", np.ones(E))
        p.vec(b + "post_attention_norm.weight", np.ones(E))
        if (i + 1) % 4:
            p.mat(b + "attn_qkv.weight", conv, E)
            p.mat(b + "attn_gate.weight", V * S, E)
            p.vec(b + "ssm_conv1d.weight", p.rng.standard_normal((conv, c["d_conv"])) * 0.3)
            p.vec(b + "ssm_dt.bias", np.zeros(V))
            p.vec(b + "ssm_a", -np.geomspace(0.05, 2.0, V))
            p.mat(b + "ssm_beta.weight", V, E)
            p.mat(b + "ssm_alpha.weight", V, E)
            p.vec(b + "ssm_norm.weight", np.ones(S))
            p.mat(b + "ssm_out.weight", E, V * S)
        else:
            p.mat(b + "attn_q.weight", 2 * H * hd, E)
            p.mat(b + "attn_k.weight", KV * hd, E)
            p.mat(b + "attn_v.weight", KV * hd, E, "attn_v")
            p.mat(b + "attn_output.weight", E, H * hd)
            p.vec(b + "attn_q_norm.weight", np.ones(hd))
            p.vec(b + "attn_k_norm.weight", np.ones(hd))
        if c["arch"] == "qwen35moe":
            p.mat(b + "ffn_gate_inp.weight", c["n_expert"], E)
            p.experts(b + "ffn_gate_exps.weight", c["n_expert"], c["n_ff_exp"], E)
            p.experts(b + "ffn_up_exps.weight", c["n_expert"], c["n_ff_exp"], E)
            p.experts(b + "ffn_down_exps.weight", c["n_expert"], E, c["n_ff_exp"])
            p.vec(b + "ffn_gate_inp_shexp.weight", p.rng.standard_normal(E) / np.sqrt(E))
            p.mat(b + "ffn_gate_shexp.weight", c["n_ff_shexp"], E)
            p.mat(b + "ffn_up_shexp.weight", c["n_ff_shexp"], E)
            p.mat(b + "ffn_down_shexp.weight", E, c["n_ff_shexp"], "ffn_down", i)
        else:
            p.mat(b + "ffn_gate.weight", F, E)
            p.mat(b + "ffn_up.weight", F, E)
            p.mat(b + "ffn_down.weight", E, F, "ffn_down", i)


def qwen35_kvs(c: dict, L: int) -> list[bytes]:
    a = c["arch"]
    out = [u32(f"{a}.context_length", 262144), u32(f"{a}.embedding_length", c["n_embd"]), u32(f"{a}.block_count", L),
           u32(f"{a}.feed_forward_length", c["n_ff"]), u32(f"{a}.attention.head_count", c["n_head"]),
           u32(f"{a}.attention.head_count_kv", c["n_head_kv"]), u32(f"{a}.attention.key_length", c["head_dim"]),
           u32(f"{a}.attention.value_length", c["head_dim"]), f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6),
           f32(f"{a}.rope.freq_base", 1e7), u32(f"{a}.rope.dimension_count", c["n_rot"]),
           arr(f"{a}.rope.dimension_sections", I32, "<i", [11, 11, 10, 0]),
           u32(f"{a}.ssm.conv_kernel", c["d_conv"]), u32(f"{a}.ssm.state_size", c["d_state"]),
           u32(f"{a}.ssm.group_count", c["n_group"]), u32(f"{a}.ssm.time_step_rank", c["dt_rank"]),
           u32(f"{a}.ssm.inner_size", c["dt_rank"] * c["d_state"]), u32(f"{a}.full_attention_interval", 4)]
    if a == "qwen35moe":
        out += [u32(f"{a}.expert_count", c["n_expert"]), u32(f"{a}.expert_used_count", c["n_used"]),
                u32(f"{a}.expert_feed_forward_length", c["n_ff_exp"]),
                u32(f"{a}.expert_shared_feed_forward_length", c["n_ff_shexp"])]
    return out


def shared_kv(c: dict, L: int) -> int:
    """KV sharing only for the whole model (a cut one keeps K/V in every layer: its last sliding and
    full layers would not be where the sharing layers expect them)."""
    return c["shared_kv"] if L == c["n_layer"] else 0


def gemma4_tensors(p: Plan, c: dict, L: int, n_vocab: int) -> None:
    E, H, KV, F, npl = c["n_embd"], c["n_head"], c["n_head_kv"], c["n_ff"], c["n_per_layer"]
    n_kv = L - shared_kv(c, L)
    p.mat("token_embd.weight", n_vocab, E, std=0.02)
    p.mat("per_layer_token_embd.weight", n_vocab, npl * L, std=0.02)
    p.mat("per_layer_model_proj.weight", npl * L, E)
    p.vec("per_layer_proj_norm.weight", np.ones(npl))
    p.vec("output_norm.weight", np.ones(E))
    p.vec("rope_freqs.weight", [1.0] * (c["head_dim"] // 8) + [1e30] * (c["head_dim"] // 2 - c["head_dim"] // 8))
    for i in range(L):
        b, swa = f"blk.{i}.", i % 6 != 5
        hd = c["head_dim_swa"] if swa else c["head_dim"]
        for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "post_norm"):
            p.vec(b + n + ".weight", np.ones(E))
        p.vec(b + "layer_output_scale.weight", [0.8])
        p.mat(b + "attn_q.weight", H * hd, E)
        p.vec(b + "attn_q_norm.weight", np.ones(hd))
        if i < n_kv:
            p.mat(b + "attn_k.weight", KV * hd, E)
            p.mat(b + "attn_v.weight", KV * hd, E, "attn_v")
            p.vec(b + "attn_k_norm.weight", np.ones(hd))
        p.mat(b + "attn_output.weight", E, H * hd)
        p.mat(b + "ffn_gate.weight", F, E)
        p.mat(b + "ffn_up.weight", F, E)
        p.mat(b + "ffn_down.weight", E, F, "ffn_down", i)
        p.mat(b + "inp_gate.weight", npl, E)
        p.mat(b + "proj.weight", E, npl)


def gemma4_kvs(c: dict, L: int) -> list[bytes]:
    a = "gemma4"
    shared = shared_kv(c, L)
    return [u32(f"{a}.context_length", 131072), u32(f"{a}.embedding_length", c["n_embd"]), u32(f"{a}.block_count", L),
            u32(f"{a}.feed_forward_length", c["n_ff"]), u32(f"{a}.attention.head_count", c["n_head"]),
            u32(f"{a}.attention.head_count_kv", c["n_head_kv"]), u32(f"{a}.attention.key_length", c["head_dim"]),
            u32(f"{a}.attention.value_length", c["head_dim"]),
            u32(f"{a}.attention.key_length_swa", c["head_dim_swa"]),
            u32(f"{a}.attention.value_length_swa", c["head_dim_swa"]),
            f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6), u32(f"{a}.attention.sliding_window", c["window"]),
            arr(f"{a}.attention.sliding_window_pattern", BOOLV, "<B", [int(i % 6 != 5) for i in range(L)]),
            u32(f"{a}.attention.shared_kv_layers", shared),
            u32(f"{a}.embedding_length_per_layer_input", c["n_per_layer"]),
            f32(f"{a}.rope.freq_base", 1e6), f32(f"{a}.rope.freq_base_swa", 1e4),
            u32(f"{a}.rope.dimension_count", c["head_dim"]), u32(f"{a}.rope.dimension_count_swa", c["head_dim_swa"]),
            f32(f"{a}.final_logit_softcapping", 30.0)]


def make(shape: str, qtype: str, out: Path, layers: int | None = None) -> Path:
    c = SHAPES[shape]
    L = min(layers or c["n_layer"], c["n_layer"])
    tok, n_vocab = tokenizer_kvs(c["vocab"])
    p = Plan(qtype)
    if c["arch"] == "gemma4":
        gemma4_tensors(p, c, L, n_vocab)
        kvs = gemma4_kvs(c, L)
    else:
        qwen35_tensors(p, c, L, n_vocab)
        kvs = qwen35_kvs(c, L)
    kvs = [s("general.architecture", c["arch"]), s("general.name", f"random-{shape}-{qtype}")] + kvs + tok
    head = b"GGUF" + struct.pack("<IQQ", 3, len(p.items), len(kvs)) + b"".join(kvs)
    offset, sizes = 0, []
    for name, ne, q, _ in p.items:
        tid, bs, nbytes = BLOCK[q]
        size = int(np.prod(ne)) // bs * nbytes
        nb = name.encode()
        head += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne)) + b"".join(
            struct.pack("<Q", int(x)) for x in ne) + struct.pack("<IQ", tid, offset)
        sizes.append(size)
        offset += size + (-size) % 32
    head += b"\0" * ((-len(head)) % 32)
    with open(out, "wb") as f:
        f.write(head)
        for (_, _, _, maker), size in zip(p.items, sizes):
            data = maker()
            assert len(data) == size
            f.write(data + b"\0" * ((-size) % 32))
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    n = None
    if "--layers" in args:
        i = args.index("--layers")
        n = int(args[i + 1])
        del args[i:i + 2]
    make(args[0], args[1], Path(args[2]), n)
