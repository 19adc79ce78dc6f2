"""Makes the tiny random-weight smollm3, phi3 and mistral3 models in this folder and llama.cpp's
logits on them (the references tests/test_models_dense_next.py compares Hearth with).

Run with the python of a venv that has llama-cpp-python 0.3.36 (built from its sdist) and its
vendored gguf-py, from the project root:
    <venv>/bin/python tests/data/tiny-next/make_tiny.py ../shared/reference/vocab/ggml-vocab-phi-3.gguf

The vocabulary is llama.cpp's phi-3 test vocabulary (SentencePiece, BOS added) cut to its first
4,000 tokens (the byte tokens and the highest-scored pieces) plus every character they use as a
piece of its own (~90), which is still a consistent SPM vocabulary, so each model stays under 2 MB. Weights: seeded normal values; matrices F16 or Q8_0,
norms and rope factors F32. Per arch folder: tiny-<arch>.gguf, manifest.json (hparams, prompts,
ids, 16 greedy steps with their top-1/top-2 gaps), top64_<prompt>.npz (llama.cpp's 64 largest
logits at every position: ids int32 [n, 64], logits float32), last_logits_<prompt>.npy, and
logits_f32path_last_<prompt>.npy (llama.cpp on an all-F32 copy of the same values, F32 K/V: no 8-bit
activations).
phi3 also gets top64_english_long.npz: llama.cpp at n_ctx 512 (over the original context of 256),
where it takes rope_factors_long instead of rope_factors_short.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

HERE = Path(__file__).resolve().parent
N_HEAD_TOKENS = 4000   # then the characters they use (vocab() says why)
PROMPTS = {"chat": "Hi there! How are you doing today?",
           "english": ("The old lighthouse keeper climbed the spiral stairs every evening, counting each step "
                       "as the waves crashed against the rocks below.")}
D, N_HEAD, N_KV, HD, N_FF = 64, 4, 2, 16, 128


def vocab(path: str):
    r = gguf.GGUFReader(path)
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    scores = [float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    # Every character of a kept piece as a piece of its own (as in any real SPM vocabulary; the
    # lone word-start piece, for one, is far down the list), so the cut vocabulary stays consistent.
    index = {t: i for i, t in enumerate(toks)}
    head = list(range(N_HEAD_TOKENS))
    chars = sorted({ch for i in head if types[i] == 1 for ch in toks[i]} - {toks[i] for i in head})
    keep = head + [index[ch] for ch in chars if ch in index]
    return [toks[i] for i in keep], [scores[i] for i in keep], [types[i] for i in keep]


def write_vocab(w, v):
    toks, scores, types = v
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def layer_tensors(arch: str, rng, il: int) -> dict[str, np.ndarray]:
    """numpy [out, in] per GGUF tensor name of layer il."""
    p = f"blk.{il}."
    def m(o, i):
        return (rng.standard_normal((o, i)) / math.sqrt(i)).astype(np.float32)
    t = {p + "attn_norm.weight": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32),
         p + "ffn_norm.weight": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32),
         p + "attn_output.weight": m(D, N_HEAD * HD),
         p + "ffn_down.weight": m(D, N_FF)}
    if arch == "phi3":   # fused q/k/v and gate+up (gate first) as Phi-4-mini's file stores them
        t[p + "attn_qkv.weight"] = m((N_HEAD + 2 * N_KV) * HD, D)
        t[p + "ffn_up.weight"] = m(2 * N_FF, D)
    else:
        t[p + "attn_q.weight"] = m(N_HEAD * HD, D)
        t[p + "attn_k.weight"] = m(N_KV * HD, D)
        t[p + "attn_v.weight"] = m(N_KV * HD, D)
        t[p + "ffn_gate.weight"] = m(N_FF, D)
        t[p + "ffn_up.weight"] = m(N_FF, D)
    # Attention logits big enough that position mistakes show (random q.k are otherwise ~0).
    for k in ("attn_q.weight", "attn_k.weight", "attn_qkv.weight"):
        if p + k in t:
            t[p + k] *= 2.0
    return t


ARCHS = {
    # SmolLM3: llama's layers, but layer il has no RoPE when (il + 1) % 4 == 0 (llama.cpp hard-codes it).
    "smollm3": dict(n_layer=4, kv={"rope.freq_base": 10000.0}),
    # Phi-4-mini: fused qkv, gate+up in ffn_up, NeoX rotation of 12 of 16 dims, per-frequency factors
    # (long when the context exceeds the original 256, short otherwise;
    # llama.cpp pads n_ctx to a multiple of 256), rope.scaling.attn_factor.
    "phi3": dict(n_layer=2, ctx=512, kv={"rope.freq_base": 10000.0, "rope.dimension_count": 12,
                                         "rope.scaling.original_context_length": 256,
                                         "rope.scaling.attn_factor": math.sqrt(1 + math.log(2) / math.log(256))}),
    # Ministral 3: llama's layers with YaRN (factor 8 over an original context of 16, log multiplier
    # 1) and Llama 4's temperature scaling of q by 1 + 0.1 ln(floor(pos / 16) + 1).
    "mistral3": dict(n_layer=2, kv={"rope.freq_base": 1e6, "rope.scaling.type": "yarn",
                                    "rope.scaling.factor": 8.0, "rope.scaling.original_context_length": 16,
                                    "rope.scaling.yarn_beta_fast": 32.0, "rope.scaling.yarn_beta_slow": 1.0,
                                    "rope.scaling.yarn_log_multiplier": 1.0,
                                    "attention.temperature_scale": 0.1}),
}


def write_model(arch: str, v, path: Path, all_f32: bool) -> dict:
    spec = ARCHS[arch]
    rng = np.random.default_rng({"smollm3": 3, "phi3": 4, "mistral3": 5}[arch])
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny random")   # a name with "phi3" in it makes llama.cpp look for phi-3's special tokens
    w.add_context_length(spec.get("ctx", 128))
    w.add_embedding_length(D)
    w.add_block_count(spec["n_layer"])
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-5)
    for k, val in spec["kv"].items():
        key = f"{arch}.{k}"
        if isinstance(val, str):
            w.add_string(key, val)
        elif isinstance(val, int):
            w.add_uint32(key, val)
        else:
            w.add_float32(key, val)
    write_vocab(w, v)
    # 0.3: top logits ~9, top-1/top-2 gaps over 0.5 at most positions (1.0 gives ~30, 0.1 near ties)
    tensors = {"token_embd.weight": (0.3 * rng.standard_normal((len(v[0]), D))).astype(np.float32),
               "output_norm.weight": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)}
    if arch == "phi3":
        half = spec["kv"]["rope.dimension_count"] // 2
        tensors["rope_factors_long.weight"] = np.linspace(1.0, 12.0, half).astype(np.float32)
        tensors["rope_factors_short.weight"] = np.linspace(1.0, 1.6, half).astype(np.float32)
    for il in range(spec["n_layer"]):
        tensors.update(layer_tensors(arch, rng, il))
    types = {}
    for i, (name, a) in enumerate(tensors.items()):
        # all_f32: the same values as the stored types hold (their dequantized copies)
        if a.ndim == 1:
            w.add_tensor(name, a)
            types[name] = "F32"
        elif i % 2 and name != "token_embd.weight":
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            if all_f32:
                w.add_tensor(name, gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).astype(np.float32))
            else:
                w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            types[name] = "Q8_0"
        else:
            h = a.astype(np.float16)
            w.add_tensor(name, h.astype(np.float32) if all_f32 else h)
            types[name] = "F16"
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def run_llama(path: Path, n_ctx: int, f32kv: bool = False):
    import llama_cpp
    from llama_cpp import Llama
    kw = dict(type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32) if f32kv else {}
    return Llama(str(path), n_ctx=n_ctx, n_threads=2, logits_all=True, verbose=False, **kw)


def top64(scores: np.ndarray) -> dict:
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :64].astype(np.int32)
    return {"ids": ids, "logits": np.take_along_axis(scores, ids, axis=1).astype(np.float32)}


def greedy(m, ids: list[int], steps: int = 16) -> dict:
    m.reset()
    m.eval(ids)
    out, info = [], []
    for _ in range(steps):
        lg = np.array(m.scores[m.n_tokens - 1], np.float32)
        o = np.argsort(-lg)[:2]
        out.append(int(o[0]))
        info.append({"top1": int(o[0]), "top2": int(o[1]), "margin_to_top2": float(lg[o[0]] - lg[o[1]])})
        m.eval([int(o[0])])
    return {"ids": out, "steps": info}


def main(vocab_path: str) -> None:
    v = vocab(vocab_path)
    for arch in ARCHS:
        d = HERE / arch
        d.mkdir(exist_ok=True)
        path = d / f"tiny-{arch}.gguf"
        types = write_model(arch, v, path, all_f32=False)
        m = run_llama(path, 128)
        prompts = []
        for name, text in PROMPTS.items():
            ids = m.tokenize(text.encode(), add_bos=True, special=True)
            m.reset()
            m.eval(ids)
            sc = np.array(m.scores[:len(ids)], np.float32)
            np.savez_compressed(d / f"top64_{name}.npz", **top64(sc))
            np.save(d / f"last_logits_{name}.npy", sc[-1])
            prompts.append({"name": name, "text": text, "ids": [int(t) for t in ids],
                            "greedy": greedy(m, ids)})
        if arch == "phi3":   # the long factors: a context longer than the original one
            long = run_llama(path, 512)
            ids = prompts[1]["ids"]
            long.eval(ids)
            np.savez_compressed(d / "top64_english_long.npz", **top64(np.array(long.scores[:len(ids)], np.float32)))
        with tempfile.TemporaryDirectory() as tmp:
            f32 = Path(tmp) / "f32.gguf"
            write_model(arch, v, f32, all_f32=True)
            mf = run_llama(f32, 128, f32kv=True)
            for p in prompts:
                mf.reset()
                mf.eval(p["ids"])
                np.save(d / f"logits_f32path_last_{p['name']}.npy", np.array(mf.scores[len(p["ids"]) - 1], np.float32))
        manifest = {"arch": arch, "file": path.name, "n_ctx": 128, "n_vocab": len(v[0]),
                    "hparams": {"n_embd": D, "n_layer": ARCHS[arch]["n_layer"], "n_head": N_HEAD, "n_head_kv": N_KV,
                                "head_dim": HD, "n_ff": N_FF, **ARCHS[arch]["kv"]},
                    "tensor_types": types, "prompts": prompts,
                    "vocab": f"{Path(vocab_path).name}: its first {N_HEAD_TOKENS} tokens and the characters they use"}
        (d / "manifest.json").write_text(json.dumps(manifest, indent=1))
        print(arch, path.stat().st_size, "bytes", [len(p["ids"]) for p in prompts])


if __name__ == "__main__":
    main(sys.argv[1])
