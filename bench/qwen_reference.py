"""Reference data from llama.cpp for Qwen2.5-Coder-0.5B-Instruct (tests/data/qwen_coder/).

Two steps, because llama.cpp's Python binding lives in its own venv:

1. With Hearth's Python, the prompt texts (the chat prompts rendered by the model's own template,
   the tool prompt with Hearth's built-in tools, as bench.tool_calls renders it):
       python -m bench.qwen_reference prompts tests/data/qwen_coder/prompts.json
2. With llama-cpp-python 0.3.36 (built from source; see /work/cache/llama-cpp/READY), on the joined
   model and an all-F32 copy of it (`llama-quantize --allow-requantize MODEL F32COPY F32`):
       python bench/qwen_reference.py llama MODEL F32COPY tests/data/qwen_coder/

Step 2 writes, for each prompt, into `reference.json`: its text, token ids (special tokens parsed,
no BOS: Qwen's vocabulary adds none) and a 16-step greedy run with the gap between the two best
logits at each step; and into `logits_<prompt>.npz`:
    top_ids     int32   [n_pos, 64]  llama.cpp's 64 largest logits at every position, their ids
    top_logits  float16 [n_pos, 64]  and values
    last        float16 [vocab]      every logit at the last position
    f32path_last float16 [vocab]     the same from the all-F32 copy with F32 K/V (no 8-bit
                                     activations anywhere: what a float engine should match)
float16 keeps logits of magnitude < 32 to within 0.008, far inside the tolerances used.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

SYSTEM = "You are a helpful assistant."
CHAT = "Explain in two sentences what a hash map is."
TOOL_QUESTION = "What is 23*47?"
RAW_PROMPTS = {
    "code": "def quicksort(items):\n    \"\"\"Sort a list of numbers.\"\"\"\n",
    "unicode": "Grüße aus Köln! 東京の天気は晴れです。Привет, мир — ça va? 🚀🙂 naïve café",
}
N_GREEDY = 16
TOP = 64


def make_prompts(out: Path) -> None:
    from hearth.engine import Engine  # noqa: PLC0415  (step 1 only: Hearth's venv)
    from hearth.engine.tools import ToolRegistry  # noqa: PLC0415
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from model_paths import qwen_coder_model_path  # noqa: PLC0415
    eng = Engine.load(qwen_coder_model_path())
    chat = eng.render_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": CHAT}])
    tool = eng.render_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": TOOL_QUESTION}],
                           tools=ToolRegistry.builtin().definitions())
    prompts = {**RAW_PROMPTS, "chat": chat, "tool": tool}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(prompts, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _run(model: str, ids: list[int], all_positions: bool, f32_kv: bool = False):
    from llama_cpp import Llama  # noqa: PLC0415  (step 2 only: the llama.cpp venv)
    kw = {"type_k": 0, "type_v": 0} if f32_kv else {}
    # logits_all even for the last position only: without it this binding's eval() stores no logits
    m = Llama(model, n_ctx=1024, n_batch=1024, n_threads=2, logits_all=True, verbose=False, seed=0, **kw)
    m.eval(ids)
    logits = np.array(m.scores[:m.n_tokens] if all_positions else m.scores[m.n_tokens - 1:m.n_tokens],
                      dtype=np.float32)
    return m, logits


def make_reference(model: str, f32_model: str, folder: Path) -> None:
    from llama_cpp import Llama  # noqa: PLC0415
    prompts = json.loads((folder / "prompts.json").read_text(encoding="utf-8"))
    tok = Llama(model, n_ctx=64, vocab_only=True, verbose=False)
    ref = {"model": Path(model).name, "llama_cpp_python": "0.3.36", "prompts": []}
    for name, text in prompts.items():
        ids = tok.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        m, logits = _run(model, ids, all_positions=True)          # [n_pos, vocab]
        order = np.argsort(-logits, axis=1)[:, :TOP]
        top_logits = np.take_along_axis(logits, order, axis=1)
        steps, gen, last = [], [], logits[-1]
        for _ in range(N_GREEDY):
            s = np.sort(last)
            t = int(last.argmax())
            steps.append({"id": t, "margin_to_top2": round(float(s[-1] - s[-2]), 4)})
            gen.append(t)
            m.eval([t])
            last = np.array(m.scores[m.n_tokens - 1], dtype=np.float32)
        _, f32 = _run(f32_model, ids, all_positions=False, f32_kv=True)
        np.savez_compressed(folder / f"logits_{name}.npz", top_ids=order.astype(np.int32),
                            top_logits=top_logits.astype(np.float16), last=logits[-1].astype(np.float16),
                            f32path_last=f32[0].astype(np.float16))
        ref["prompts"].append({"name": name, "text": text, "ids": ids,
                               "greedy": {"ids": gen, "text": tok.detokenize(gen).decode("utf-8", "replace"),
                                          "steps": steps}})
        print(f"{name}: {len(ids)} tokens, greedy {tok.detokenize(gen)!r}", flush=True)
    (folder / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] == ["prompts"]:
        make_prompts(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["llama"]:
        make_reference(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
    else:
        sys.exit(__doc__)
