"""Llama (and Mistral, by alias): the shared decoder as it is.

llama.cpp's llm_build_llama: pre-norm attention and SwiGLU FFN, adjacent-pair RoPE (the converter
permutes q/k rows for it), optional q/k/v/o biases, optional `rope_freqs` (Llama 3's per-frequency
divisors, read by Decoder).
"""

from __future__ import annotations

from .decoder import Decoder


class Model(Decoder):
    pass
