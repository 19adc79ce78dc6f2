"""Can Hearth run this model? Answered before download from what the Hub says (file name, the
repository's GGUF summary) and after download from the file itself, with the reason when not.

The engine's own tables are the truth: `engine.config.SUPPORTED_ARCHS` (+ `ARCH_ALIASES`) and
`engine.quants.SUPPORTED_TYPES`; nothing here keeps a second list of what is supported. The only
table here maps a file-name label to the tensor types llama.cpp's quantizer writes for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import ARCH_ALIASES, OWN_METADATA_ARCHS, SUPPORTED_ARCHS, ModelConfig
from ..errors import UnsupportedModelError
from ..quants import SUPPORTED_TYPES
from .file_names import quant_label

# label -> (the bulk type, other types llama.cpp's quantizer uses for some tensors of that mix).
# Norms are F32 in every mix and embeddings/output often Q6_K or Q8_0; those are listed where the
# mix puts them. A label not here is unknown, so nothing is promised before the file is read.
LABEL_TYPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "F32": ("F32", ()), "F16": ("F16", ()), "BF16": ("BF16", ()),
    "Q4_0": ("Q4_0", ("Q6_K", "Q8_0")), "Q4_1": ("Q4_1", ("Q6_K", "Q8_0")),
    "Q5_0": ("Q5_0", ("Q6_K", "Q8_0")), "Q5_1": ("Q5_1", ("Q6_K", "Q8_0")),
    "Q8_0": ("Q8_0", ()),
    "Q2_K": ("Q2_K", ("Q3_K", "Q4_K", "Q6_K")), "Q2_K_S": ("Q2_K", ("Q4_K", "Q6_K")),
    "Q3_K_S": ("Q3_K", ("Q6_K",)), "Q3_K_M": ("Q3_K", ("Q4_K", "Q5_K", "Q6_K")),
    "Q3_K_L": ("Q3_K", ("Q5_K", "Q6_K")), "Q3_K_XL": ("Q3_K", ("Q4_K", "Q5_K", "Q6_K", "Q8_0")),
    "Q4_K_S": ("Q4_K", ("Q5_K", "Q6_K")), "Q4_K_M": ("Q4_K", ("Q5_K", "Q6_K")),
    "Q4_K_XL": ("Q4_K", ("Q5_K", "Q6_K", "Q8_0")),
    "Q5_K_S": ("Q5_K", ("Q6_K",)), "Q5_K_M": ("Q5_K", ("Q6_K",)), "Q5_K_XL": ("Q5_K", ("Q6_K", "Q8_0")),
    "Q6_K": ("Q6_K", ()), "Q6_K_XL": ("Q6_K", ("Q8_0",)), "Q8_K_XL": ("Q8_0", ("BF16",)),
    "IQ1_S": ("IQ1_S", ()), "IQ1_M": ("IQ1_M", ()),
    "IQ2_XXS": ("IQ2_XXS", ()), "IQ2_XS": ("IQ2_XS", ()), "IQ2_S": ("IQ2_S", ()), "IQ2_M": ("IQ2_S", ()),
    "IQ3_XXS": ("IQ3_XXS", ()), "IQ3_XS": ("IQ3_XXS", ("IQ3_S",)), "IQ3_S": ("IQ3_S", ()),
    "IQ3_M": ("IQ3_S", ()), "IQ4_NL": ("IQ4_NL", ()), "IQ4_XS": ("IQ4_XS", ()),
    "TQ1_0": ("TQ1_0", ()), "TQ2_0": ("TQ2_0", ()), "MXFP4": ("MXFP4", ()), "NVFP4": ("NVFP4", ()),
    "Q4_0_4_4": ("Q4_0_4_4", ()), "Q4_0_4_8": ("Q4_0_4_8", ()), "Q4_0_8_8": ("Q4_0_8_8", ()),
}


@dataclass(frozen=True)
class Verdict:
    """`runs`: True (it will load), False (it will not; `reason` says why) or None (not known
    until the file is read; `reason` says what is unsure)."""
    runs: bool | None
    reason: str = ""

    @property
    def refused(self) -> bool:
        return self.runs is False


def architecture_verdict(arch: str | None) -> Verdict:
    if not arch:
        return Verdict(None, "architecture not known until the file is read")
    canonical = ARCH_ALIASES.get(arch, arch)
    if canonical in SUPPORTED_ARCHS:
        return Verdict(True)
    return Verdict(False, f"architecture '{arch}' is not supported by Hearth "
                          f"(supported: {', '.join(sorted(SUPPORTED_ARCHS))})")


def types_verdict(types: set[str], what: str) -> Verdict:
    missing = sorted(t for t in types if t not in SUPPORTED_TYPES)
    if missing:
        return Verdict(False, f"{what} {', '.join(missing)}, which Hearth cannot read yet")
    return Verdict(True)


def verdict_before_download(file_name: str, architecture: str | None = None) -> Verdict:
    """From the file name's quant label and, when the Hub's GGUF summary gives it, the architecture.
    A projector (`mmproj-*`) is refused: it is half of a vision model, not a chat model."""
    base = Path(file_name).name.lower()
    if base.startswith("mmproj") or "-mmproj" in base:
        return Verdict(False, "a multimodal projector (mmproj), not a chat model")
    arch = architecture_verdict(architecture)
    if arch.refused:
        return arch
    label = quant_label(file_name)
    if label is None:
        return Verdict(None, "no quantization in the file name; checked once downloaded")
    if label not in LABEL_TYPES:
        return Verdict(None, f"quantization {label} is not known; checked once downloaded")
    bulk, others = LABEL_TYPES[label]
    main = types_verdict({bulk}, "its weights are")
    if main.refused:
        return main
    extra = types_verdict(set(others), "some tensors may be")
    if extra.refused:
        return Verdict(None, extra.reason)
    return arch if arch.runs is None else Verdict(True)


def verdict_for_gguf(gguf, split_ok: bool = False) -> Verdict:
    """From an open `GGUFFile` (opened with check_types=False): architecture and every tensor type.
    A part of a split model is refused (the engine maps one file) unless `split_ok`: the header of
    a split model's first part, read before download, speaks for the joined file."""
    arch = architecture_verdict(gguf.architecture or None)
    if arch.runs is not True:
        if arch.runs is None:
            return Verdict(False, "the file names no architecture (general.architecture)")
        return arch
    if not split_ok and int(gguf.get("split.count", 1) or 1) > 1:
        return Verdict(False, "one part of a split model; open the joined file")
    if ARCH_ALIASES.get(gguf.architecture, gguf.architecture) in OWN_METADATA_ARCHS:
        # Hybrid and per-layer models: their layer pattern and recurrent metadata are checked as
        # loading checks them (the header is enough), so a file Hearth cannot run is refused here.
        try:
            ModelConfig.from_gguf(gguf)
        except UnsupportedModelError as e:
            return Verdict(False, str(e))
    return types_verdict({t.type.name for t in gguf.tensors.values()}, "it has tensors of type")
