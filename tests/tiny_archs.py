"""Paths of the tiny model of every architecture the warm-chat tests (#29) run on: the shared
tiny-next models, the ones in tests/data/tiny-next, and the variants made from them (qwen35moe,
Gemma 4 with shared K/V and with experts), written once per session into a temporary folder."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data" / "tiny-next"
SHARED = ("qwen35", "gemma4", "qwen3moe", "gpt-oss")
LOCAL = ("smollm3", "phi3", "mistral3")
MADE = {"qwen35moe": ("qwen35", "tiny_qwen35moe"), "gemma4-shared": ("gemma4", "tiny_gemma4_shared"),
        "gemma4-moe": ("gemma4", "tiny_gemma4_moe")}
ALL = (*SHARED, *MADE, *LOCAL)
STATEFUL = ("qwen35", "qwen35moe", "gemma4", "gemma4-shared", "gemma4-moe")   # a state section


def tiny_path(name: str, reference_dir: Path, tmp_factory) -> Path:
    if name in SHARED:
        return reference_dir / "tiny-next" / name / f"tiny-{name}.gguf"
    if name in LOCAL:
        return DATA / name / f"tiny-{name}.gguf"
    src, module = MADE[name]
    import importlib  # noqa: PLC0415
    make = importlib.import_module(f"tests.{module}").make
    dst = tmp_factory.getbasetemp() / f"tiny-{name}.gguf"
    if not dst.exists():
        make(reference_dir / "tiny-next" / src / f"tiny-{src}.gguf", dst)
    return dst
