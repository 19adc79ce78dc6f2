"""What a GGUF file's name says: its quantization label and whether it is one part of a split model.

Names on the Hub follow llama.cpp's tools: `<model>-<QUANT>.gguf` (`SmolLM2-135M-Instruct-Q4_K_M.gguf`,
`gemma-3-1b-it-UD-IQ2_XXS.gguf`) and, for files `gguf-split` cut into parts,
`<model>-<QUANT>-00001-of-00003.gguf` (sometimes inside a folder named after the quant).
The label is a hint for a file not yet downloaded; once the file is here its tensors say for sure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A quant label stands between separators (- . _ or the ends); longest alternatives first.
_QUANT = re.compile(
    r"(?:^|(?<=[-._/]))(?:UD-)?("
    r"IQ[1-4]_(?:XXS|XS|NL|S|M)"
    r"|Q[2-8]_K(?:_(?:XL|S|M|L))?"
    r"|Q[4-8]_[01](?:_\d_\d)?"
    r"|TQ[12]_0|MXFP4|NVFP4|BF16|FP16|FP32|F16|F32"
    r")(?=$|[-._/])",
    re.IGNORECASE)
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class SplitPart:
    stem: str      # the name without "-0000k-of-0000n.gguf" (folders included)
    number: int    # 1-based
    count: int


def quant_label(file_name: str) -> str | None:
    """The quantization label in a file name ("Q4_K_M", "IQ2_XXS", "BF16"), upper case, or None.
    The last label wins: `Llama-3-8B-F16-Q4_K_M.gguf` was made from F16 and holds Q4_K_M."""
    labels = _QUANT.findall(file_name)
    if not labels:
        return None
    label = labels[-1].upper()
    return {"FP16": "F16", "FP32": "F32"}.get(label, label)


def split_part(file_name: str) -> SplitPart | None:
    """The split position of `model-00002-of-00003.gguf`, or None for a whole file."""
    m = _SPLIT.match(file_name)
    if m is None:
        return None
    no, count = int(m["no"]), int(m["count"])
    if not 1 <= no <= count:
        return None
    return SplitPart(m["stem"], no, count)


def split_names(part: SplitPart) -> list[str]:
    """Every part's file name, first to last."""
    return [f"{part.stem}-{i:05d}-of-{part.count:05d}.gguf" for i in range(1, part.count + 1)]


def joined_name(file_name: str) -> str:
    """The file name the model gets once its parts are one file: `model-Q4_K_M.gguf`."""
    part = split_part(file_name)
    return file_name if part is None else part.stem + ".gguf"


def display_name(file_name: str) -> str:
    """The model's name as users know it: the base name less `.gguf`, the split suffix and the
    quant label (`SmolLM2-135M-Instruct-Q4_K_M.gguf` -> `SmolLM2-135M-Instruct`)."""
    base = joined_name(file_name.rsplit("/", 1)[-1])
    stem = base[:-5] if base.lower().endswith(".gguf") else base
    matches = list(_QUANT.finditer(stem))
    if matches and matches[-1].end() == len(stem):
        start = matches[-1].start()
        if stem[max(0, start - 3):start].upper() == "UD-":
            start -= 3
        head = stem[:start].rstrip("-._")
        return head or stem
    return stem


def is_gguf(file_name: str) -> bool:
    return file_name.lower().endswith(".gguf")


@dataclass(frozen=True)
class ModelFileGroup:
    """One downloadable model: a whole file or all parts of a split one (`files` in order)."""
    name: str               # the joined file name (base name, no folders)
    files: tuple[str, ...]  # repository paths
    quant: str | None
    complete: bool          # False when some parts of a split model are missing from the listing


def group_model_files(paths: list[str]) -> list[ModelFileGroup]:
    """The GGUF files of a repository as models: split parts gathered into one entry, in the order
    of the listing. Non-GGUF files are left out. Projector files (`mmproj-*.gguf`) are models of
    their own kind and are kept, so the caller can mark them."""
    groups: dict[str, list[str]] = {}
    order: list[str] = []
    counts: dict[str, int] = {}
    for p in paths:
        if not is_gguf(p):
            continue
        part = split_part(p)
        key = p if part is None else part.stem
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(p)
        if part is not None:
            counts[key] = part.count
    out = []
    for key in order:
        files = groups[key]
        if key in counts:
            want = split_names(split_part(files[0]))  # type: ignore[arg-type]
            have = set(files)
            files = [f for f in want if f in have]
            complete = len(files) == counts[key]
        else:
            complete = True
        base = joined_name(files[0]).rsplit("/", 1)[-1]
        out.append(ModelFileGroup(base, tuple(files), quant_label(files[0]), complete))
    return out
