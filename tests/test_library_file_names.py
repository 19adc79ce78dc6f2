"""hearth.engine.library.file_names: quant labels and split parts read from GGUF file names."""

from __future__ import annotations

import pytest

from hearth.engine.library.file_names import display_name, group_model_files, joined_name, quant_label, split_names, split_part


@pytest.mark.parametrize("name, label", [
    ("SmolLM2-135M-Instruct-Q4_K_M.gguf", "Q4_K_M"),
    ("gemma-3-1b-it-UD-IQ2_XXS.gguf", "IQ2_XXS"),
    ("qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"),
    ("Llama-3.2-1B-Instruct-f16.gguf", "F16"),
    ("model.BF16.gguf", "BF16"),
    ("Llama-3-8B-F16-Q4_K_M.gguf", "Q4_K_M"),
    ("Q5_K_S/model-Q5_K_S-00001-of-00002.gguf", "Q5_K_S"),
    ("phi-4-Q4_0_4_4.gguf", "Q4_0_4_4"),
    ("model-fp16.gguf", "F16"),
    ("mmproj-model-f16.gguf", "F16"),
    ("model.gguf", None),
    ("MQ4_K_Mx.gguf", None),  # not between separators
])
def test_quant_label(name, label):
    assert quant_label(name) == label


def test_split_part_and_names():
    p = split_part("Q4_K_M/big-Q4_K_M-00002-of-00003.gguf")
    assert (p.stem, p.number, p.count) == ("Q4_K_M/big-Q4_K_M", 2, 3)
    assert split_names(p) == [f"Q4_K_M/big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert joined_name("big-00001-of-00002.gguf") == "big.gguf"
    assert joined_name("whole.gguf") == "whole.gguf"
    assert split_part("whole.gguf") is None
    assert split_part("bad-00004-of-00003.gguf") is None


def test_group_model_files_gathers_parts_in_order():
    paths = ["README.md", "m-Q8_0.gguf", "Q4_K_M/m-Q4_K_M-00002-of-00002.gguf",
             "Q4_K_M/m-Q4_K_M-00001-of-00002.gguf", "x-Q2_K-00001-of-00003.gguf", "x-Q2_K-00003-of-00003.gguf"]
    groups = group_model_files(paths)
    assert [(g.name, g.files, g.quant, g.complete) for g in groups] == [
        ("m-Q8_0.gguf", ("m-Q8_0.gguf",), "Q8_0", True),
        ("m-Q4_K_M.gguf", ("Q4_K_M/m-Q4_K_M-00001-of-00002.gguf", "Q4_K_M/m-Q4_K_M-00002-of-00002.gguf"),
         "Q4_K_M", True),
        ("x-Q2_K.gguf", ("x-Q2_K-00001-of-00003.gguf", "x-Q2_K-00003-of-00003.gguf"), "Q2_K", False),
    ]


@pytest.mark.parametrize("name, shown", [
    ("SmolLM2-135M-Instruct-Q4_K_M.gguf", "SmolLM2-135M-Instruct"),
    ("gemma-3-1b-it-UD-IQ2_XXS.gguf", "gemma-3-1b-it"),
    ("model.BF16.gguf", "model"),
    ("Q4_K_M/big-Q4_K_M-00001-of-00003.gguf", "big"),
    ("Llama-3-F16-Q8_0.gguf", "Llama-3-F16"),
    ("plain.gguf", "plain"),
    ("Q8_0.gguf", "Q8_0"),
])
def test_display_name(name, shown):
    assert display_name(name) == shown
