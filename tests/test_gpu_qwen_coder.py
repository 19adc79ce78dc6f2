"""Qwen2.5-Coder-0.5B on the GPU backend against llama.cpp (tests/data/qwen_coder/), on lavapipe in CI.

lavapipe runs this 0.5B model at ~4 s per token, so the test is one short prefill (the first 5
tokens of the `code` prompt, every position) and one decode step (~20 s in all). Tolerances are
test_models_qwen_coder's: over llama.cpp's top 64 ids at each position a mean |difference| <= 0.3
after removing the mean difference, the same top-1 where llama.cpp's top-2 gap is >= 1.0
(measured: 0.06-0.10 per position, every top-1 the same).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.config import ModelConfig  # noqa: E402
from hearth.engine.gguf import GGUFFile  # noqa: E402
from hearth.engine.gpu import GpuBackend  # noqa: E402
from model_paths import QWEN_MISSING, qwen_coder_model_path  # noqa: E402
from gpu_fixtures import pick_adapter  # noqa: E402
from test_gpu_backend import centered  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
DATA = Path(__file__).parent / "data" / "qwen_coder"
N_PROMPT, MEAN_TOL, GAP = 5, 0.3, 1.0


def test_prefill_and_one_decode_step_match_llama_cpp():
    path = qwen_coder_model_path()
    if path is None:
        pytest.skip(QWEN_MISSING)
    ref = next(p for p in json.loads((DATA / "reference.json").read_text(encoding="utf-8"))["prompts"]
               if p["name"] == "code")
    d = np.load(DATA / "logits_code.npz")
    top_ids, top = d["top_ids"], d["top_logits"].astype(np.float64)      # [n_pos, 64]
    g = GGUFFile.open(path)
    gpu = GpuBackend(ModelConfig.from_gguf(g), g, 32, adapter=pick_adapter())
    try:
        got = gpu.forward(np.asarray(ref["ids"][:N_PROMPT], np.int32), 0, all_logits=True)   # [5, vocab]
        at_top = np.take_along_axis(got.astype(np.float64), top_ids[:N_PROMPT], axis=1)
        assert centered(at_top, top[:N_PROMPT]).mean(axis=1).max() <= MEAN_TOL
        sure = top[:, 0] - top[:, 1] >= GAP
        assert (got.argmax(axis=1) == top_ids[:N_PROMPT, 0])[sure[:N_PROMPT]].all()
        # one decode step: the prompt's next token at position 5, its argmax as llama.cpp's there
        step = gpu.forward_argmax(np.array([ref["ids"][N_PROMPT]], np.int32), N_PROMPT)
        assert sure[N_PROMPT] and int(step) == int(top_ids[N_PROMPT, 0])
    finally:
        gpu.close()
