"""The tiny-next reference models (../shared/reference/tiny-next/<arch>/) and the tolerance their
README gives: at the 64 ids llama.cpp lists per position, mean |diff| <= 0.15 and max <= 1.5, the
same top-1 where llama.cpp's top-2 gap is >= 0.5; greedy runs compared up to the first gap < 0.5."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from hearth.engine.tokenizer import Tokenizer

PROMPTS = ["chat", "english"]


def load(reference_dir, arch: str):
    d = reference_dir / "tiny-next" / arch
    manifest = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / manifest["file"])
    return d, manifest, CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)


def prompt_of(manifest, name):
    return next(p for p in manifest["prompts"] if p["name"] == name)


def checked_reference(path: Path, ref_file: Path):
    """(path, ref_file's arrays), once path is the very file the reference was computed on (a maker's
    output: its sha256 in the reference)."""
    ref = np.load(ref_file)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == str(ref["sha256"]), "the maker no longer makes that file"
    return path, ref


def top64(ref, name):
    """llama.cpp's top 64 of prompt `name` in a reference's arrays, as check_against_top64 takes them."""
    return {"ids": ref[f"{name}_top_ids"], "logits": ref[f"{name}_top_logits"]}


def check_against_top64(got, ref):
    at = np.take_along_axis(got, ref["ids"].astype(np.int64), axis=1)
    diff = np.abs(at - ref["logits"])
    assert diff.mean() <= 0.15 and diff.max() <= 1.5, (diff.mean(), diff.max())
    sure = ref["logits"][:, 0] - ref["logits"][:, 1] >= 0.5
    assert (got.argmax(-1) == ref["ids"][:, 0])[sure].all()


def one_token_at_a_time(be, ids):
    be.kv.clear()
    return np.stack([be.forward([t], i) for i, t in enumerate(ids)])


def batch_logits(be, ids):
    """be's logits at every position of ids as one batch, from an empty cache."""
    be.kv.clear()
    return be.forward(ids, 0, all_logits=True)


def batch_and_one_token(be, ids):
    """be's logits at every position of ids, as one batch and one token at a time, each from an empty cache."""
    return batch_logits(be, ids), one_token_at_a_time(be, ids)


def check_both_ways(be, ids, top):
    """batch_and_one_token's two answers, each against the top 64 ids `top`; returns them."""
    batch, one = batch_and_one_token(be, ids)
    check_against_top64(batch, top)
    check_against_top64(one, top)
    return batch, one


def cpu_float_logits(path: Path, ids, n_ctx: int):
    """The CPU backend's float path (float32 x, exact dequantized weights) on the file at path: the
    logits at every position of ids."""
    g = GGUFFile.open(path)
    cpu = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=n_ctx, int8=False)
    with cpu.float_activations():
        return cpu.forward(ids, 0, all_logits=True)


def check_greedy(be, p):
    be.kv.clear()
    ids = list(p["ids"])
    logits = be.forward(ids, 0)
    for step in p["greedy"]["steps"]:
        if step["margin_to_top2"] < 0.5:
            break
        tok = int(np.argmax(logits))
        assert tok == step["top1"]
        logits = be.forward([tok], len(ids))
        ids.append(tok)


# The per-position checks the tiny-next test files share; each takes the file's `tiny` fixture
# (dir, manifest, GGUFFile, backend) and a prompt name, so every file keeps its own test names.

def assert_agrees(got, ref):
    """got float32 [n_pos, n_vocab] against llama.cpp's top64 npz, at every position."""
    at = np.take_along_axis(got, ref["ids"].astype(np.int64), axis=1)
    diff = np.abs(at - ref["logits"])
    assert diff.mean(axis=1).max() <= 0.15
    assert diff.max() <= 1.5
    sure = ref["logits"][:, 0] - ref["logits"][:, 1] >= 0.5
    assert sure.sum() >= 2
    assert (got.argmax(-1) == ref["ids"][:, 0])[sure].all()


def check_token_ids(tiny, name):
    _, m, g, _ = tiny
    p = prompt_of(m, name)
    assert Tokenizer.from_gguf(g).encode(p["text"]) == p["ids"]


def check_every_position_as_one_batch(tiny, name):
    d, m, _, be = tiny
    p = prompt_of(m, name)
    be.kv.clear()
    got = be.forward(p["ids"], 0, all_logits=True)
    assert got.shape == (len(p["ids"]), be.cfg.n_vocab)
    assert_agrees(got, np.load(d / f"top64_{name}.npz"))


def check_every_position_one_token_at_a_time(tiny, name):
    d, m, _, be = tiny
    p = prompt_of(m, name)
    be.kv.clear()
    steps = np.stack([be.forward([t], j).copy() for j, t in enumerate(p["ids"])])
    assert_agrees(steps, np.load(d / f"top64_{name}.npz"))


def check_last_position_matches_float_path(tiny, name):
    """Within 0.01 mean / 0.05 max of llama.cpp's all-F32 path."""
    d, m, _, be = tiny
    p = prompt_of(m, name)
    f32 = np.load(d / f"logits_f32path_last_{name}.npy")
    be.kv.clear()
    with be.float_activations():
        got = be.forward(p["ids"], 0)
    assert np.abs(got - f32).mean() <= 0.01
    assert np.abs(got - f32).max() <= 0.05


def check_batch_and_one_token_agree_on_the_float_path(tiny):
    _, m, _, be = tiny
    ids = prompt_of(m, "english")["ids"]
    with be.float_activations():
        be.kv.clear()
        whole = be.forward(ids, 0, all_logits=True)
        be.kv.clear()
        for j, t in enumerate(ids):
            np.testing.assert_allclose(be.forward([t], j), whole[j], atol=1e-3)
