"""What the model library shows about a GGUF file on disk, read from its header only (the tensor data
is mapped, never read): size, architecture, quantization, trained context length, the KV cache's
dimensions (for the memory estimate), sampling defaults and whether Hearth can run it."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import GGUFError
from ..gguf import GGUFFile
from .file_names import quant_label
from .support import Verdict, verdict_for_gguf

# llama.cpp's llama_ftype (general.file_type) -> the label its quantizer gives that mix.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
    18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
    25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
    32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}

# general.sampling.* (written by llama.cpp's converter from a model's generation_config.json) ->
# the `engine.sampling.Sampling` field it sets. Keys for samplers Hearth does not have (xtc,
# mirostat, the sampler sequence) are kept in `sampling_unused` so the app can say so.
SAMPLING_KEYS = {
    "general.sampling.temp": "temperature", "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p", "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repeat_penalty", "general.sampling.penalty_last_n": "repeat_last_n",
}


@dataclass(frozen=True)
class ModelFacts:
    path: str
    size: int                          # bytes on disk
    name: str                          # general.name, else the file name
    architecture: str
    quant: str | None                  # the mix label (general.file_type), else from the name or tensors
    context_length: int | None         # trained context, {arch}.context_length
    n_layer: int | None
    n_head_kv: int | None
    head_dim: int | None               # of K
    head_dim_v: int | None             # of V
    n_vocab: int | None
    sampling: dict = field(default_factory=dict)         # Sampling field -> value
    sampling_unused: tuple[str, ...] = ()
    runs: bool | None = None
    reason: str = ""

    @property
    def verdict(self) -> Verdict:
        return Verdict(self.runs, self.reason)

    def to_json(self) -> dict:
        d = asdict(self)
        d["sampling_unused"] = list(self.sampling_unused)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "ModelFacts":
        d = dict(d)
        d["sampling_unused"] = tuple(d.get("sampling_unused", ()))
        return cls(**d)


def _int(v) -> int | None:
    if v is None:
        return None
    if hasattr(v, "__len__") and not isinstance(v, str):  # per-layer arrays (head_count_kv): the largest
        return int(max(v)) if len(v) else None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def sampling_defaults(g: GGUFFile) -> tuple[dict, tuple[str, ...]]:
    used, unused = {}, []
    for key, value in g.metadata.items():
        if not key.startswith("general.sampling."):
            continue
        target = SAMPLING_KEYS.get(key)
        if target is None:
            unused.append(key)
            continue
        # float32 in the file: read back as the decimal that was written (0.6, not 0.60000002)
        used[target] = int(value) if target in ("top_k", "repeat_last_n") else float(f"{float(value):.7g}")
    return used, tuple(sorted(unused))


def quant_of(g: GGUFFile) -> str | None:
    """The mix label: general.file_type, else the file name's label, else the type with most bytes."""
    ft = g.get("general.file_type")
    if isinstance(ft, int) and ft in FILE_TYPES:
        return FILE_TYPES[ft]
    label = quant_label(g.path.name)
    if label:
        return label
    by_bytes = Counter()
    for t in g.tensors.values():
        by_bytes[t.type.name] += t.n_bytes
    return by_bytes.most_common(1)[0][0] if by_bytes else None


def facts_from_gguf(g: GGUFFile, split_ok: bool = False) -> ModelFacts:
    arch = g.architecture
    n_head = _int(g.arch_get("attention.head_count"))
    n_embd = _int(g.arch_get("embedding_length"))
    head_dim = _int(g.arch_get("attention.key_length")) or (n_embd // n_head if n_embd and n_head else None)
    head_dim_v = _int(g.arch_get("attention.value_length")) or head_dim
    tokens = g.get("tokenizer.ggml.tokens")
    sampling, unused = sampling_defaults(g)
    verdict = verdict_for_gguf(g, split_ok)
    return ModelFacts(
        path=str(g.path), size=g.file_size, name=str(g.get("general.name") or g.path.stem),
        architecture=arch, quant=quant_of(g), context_length=_int(g.arch_get("context_length")),
        n_layer=_int(g.arch_get("block_count")), n_head_kv=_int(g.arch_get("attention.head_count_kv")) or n_head,
        head_dim=head_dim, head_dim_v=head_dim_v,
        n_vocab=_int(g.arch_get("vocab_size")) or (len(tokens) if tokens is not None else None),
        sampling=sampling, sampling_unused=unused, runs=verdict.runs, reason=verdict.reason)


def read_facts(path: str | Path) -> ModelFacts:
    """Facts of the GGUF at `path`. A file that is not a readable GGUF raises GGUFError (its
    message names the file and the fault)."""
    g = GGUFFile.open(path, check_types=False)
    try:
        return facts_from_gguf(g)
    finally:
        g.close()


def unreadable_facts(path: Path, error: GGUFError | OSError) -> ModelFacts:
    """Facts for a file the library lists but cannot read: refused, with the reason."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    return ModelFacts(path=str(path), size=size, name=path.stem, architecture="", quant=quant_label(path.name),
                      context_length=None, n_layer=None, n_head_kv=None, head_dim=None, head_dim_v=None,
                      n_vocab=None, runs=False, reason=str(error))
