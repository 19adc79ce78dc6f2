"""Makes tests/data/iquants/: two tiny llama variants in i-quant and MXFP4 types and llama.cpp's
logits on them. Run by hand where llama.cpp is built (never by the tests):

    LLAMA_BIN=<llama.cpp build/bin> <python with llama_cpp and gguf> tests/data/iquants/make.py <tiny-llama.gguf>

1. llama-imatrix over the tiny model's two prompts (the IQ2/IQ3_XXS types need an importance matrix),
   then llama-quantize --pure --allow-requantize with IQ4_XS, IQ3_S, IQ2_M, IQ3_XXS, IQ2_XS, IQ2_XXS.
   Rows of 64 weights (every matrix but ffn_down, 256) cannot take 256-weight blocks; llama.cpp
   writes them as IQ4_NL.
2. mix_a: layers 0/1/2's ffn_down from the IQ4_XS / IQ3_S / IQ2_M (IQ2_S blocks) files, every other
   layer matrix from the IQ4_XS file (IQ4_NL), but blk.1.attn_output and blk.2.ffn_up in MXFP4
   (gguf-py's quantizer on the original weights). mix_b: ffn_down from the IQ3_XXS / IQ2_XS / IQ2_XXS
   files, the rest as mix_a. Embeddings and norms stay the shipped model's.
3. <model>.npz: the replaced tensors ("<name>.type", "<name>.data"); top64_<model>_<prompt>.npz:
   llama.cpp's 64 largest logits at every position of the manifest's prompts (ids, logits), as
   ../shared/reference/tiny's files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))          # tests/
sys.path.insert(0, str(HERE.parent.parent.parent))   # the project

from iquant_models import compose  # noqa: E402

from hearth.engine.gguf import GGUFFile  # noqa: E402
from hearth.engine.quants import TYPE_BY_NAME, dequantize_tensor  # noqa: E402

BIN = Path(os.environ["LLAMA_BIN"])
DOWNS = {"mix_a": ["IQ4_XS", "IQ3_S", "IQ2_M"], "mix_b": ["IQ3_XXS", "IQ2_XS", "IQ2_XXS"]}
MXFP4 = ["blk.1.attn_output.weight", "blk.2.ffn_up.weight"]


def run(*args):
    subprocess.run([str(a) for a in args], check=True, env={**os.environ, "LD_LIBRARY_PATH": str(BIN)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(src: Path) -> None:
    import gguf
    from llama_cpp import Llama
    manifest = json.loads((src.parent / "manifest.json").read_text())
    tmp = Path(tempfile.mkdtemp())
    calib = tmp / "calib.txt"
    calib.write_text(("\n".join(p["text"] for p in manifest["prompts"]) + "\n") * 40)
    run(BIN / "llama-imatrix", "-m", src, "-f", calib, "-o", tmp / "imatrix.gguf", "-c", 64, "-t", 2)
    files = {}
    for t in sorted({t for ts in DOWNS.values() for t in ts}):
        files[t] = tmp / f"{t}.gguf"
        run(BIN / "llama-quantize", "--imatrix", tmp / "imatrix.gguf", "--pure", "--allow-requantize", src, files[t], t, 1)
    orig = GGUFFile.open(src)
    base = GGUFFile.open(files["IQ4_XS"])
    for model, downs in DOWNS.items():
        rep = {}
        for name, t in base.tensors.items():
            if name.startswith("blk.") and len(t.shape) == 2:
                rep[name] = (t.type.id, np.array(t.data))
        for layer, qt in enumerate(downs):
            t = GGUFFile.open(files[qt]).tensors[f"blk.{layer}.ffn_down.weight"]
            rep[t.name] = (t.type.id, np.array(t.data))
        for name in MXFP4:
            w = dequantize_tensor(orig.tensors[name])
            rep[name] = (TYPE_BY_NAME["MXFP4"].id, gguf.quants.quantize(w, gguf.GGMLQuantizationType.MXFP4).reshape(-1))
        np.savez_compressed(HERE / f"{model}.npz", **{f"{n}.type": np.int32(tid) for n, (tid, _) in rep.items()},
                            **{f"{n}.data": raw for n, (_, raw) in rep.items()})
        path = compose(src, rep, tmp / f"{model}.gguf")
        llm = Llama(str(path), n_ctx=128, n_threads=2, logits_all=True, verbose=False)
        for p in manifest["prompts"]:
            llm.reset()
            llm.eval(p["ids"])
            logits = np.array(llm.scores[:len(p["ids"])], np.float32)
            ids = np.argsort(-logits, axis=1)[:, :64].astype(np.int32)
            np.savez_compressed(HERE / f"top64_{model}_{p['name']}.npz", ids=ids,
                                logits=np.take_along_axis(logits, ids, axis=1))
        print(model, {k: sum(1 for v in rep.values() if v[0] == TYPE_BY_NAME[k].id)
                      for k in ("IQ4_NL", "IQ4_XS", "IQ3_S", "IQ2_S", "IQ3_XXS", "IQ2_XS", "IQ2_XXS", "MXFP4")})


if __name__ == "__main__":
    main(Path(sys.argv[1]))
