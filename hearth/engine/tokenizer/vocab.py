"""The vocabulary as llama.cpp reads it from a GGUF file (`llama_vocab::impl::load`).

`read_vocab` gives the tokens, their llama_token_attr bits, the special ids (BOS, EOS, unknown,
every end-of-generation id) and the flags that decide how text is encoded; `tokenizer.py`
builds the tokenizer on it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..errors import GGUFError, UnsupportedModelError
from ..gguf import GGUFFile
from .pretokenizers import PRE_TOKENIZERS, PreTokenizer

log = logging.getLogger("hearth.engine.tokenizer")   # the package's logger, for every tokenizer warning

# tokenizer.ggml.token_type values (gguf-py TokenType)
# llama.cpp's llama_token_attr bits
ATTR_UNKNOWN, ATTR_UNUSED, ATTR_NORMAL, ATTR_CONTROL = 1 << 0, 1 << 1, 1 << 2, 1 << 3
ATTR_USER_DEFINED, ATTR_BYTE, ATTR_LSTRIP, ATTR_RSTRIP = 1 << 4, 1 << 5, 1 << 7, 1 << 8
_TYPE_ATTR = np.array([0, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_UNUSED, ATTR_BYTE],
                      np.int32)
SPECIAL_ATTRS = ATTR_CONTROL | ATTR_UNKNOWN           # hidden when decoding with skip_special
SPLIT_OUT_ATTRS = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN   # split out of text before BPE

SPACE_MARK = "\u2581"  # ▁, SentencePiece's visible space


def _meta_id(meta: dict, key: str, default: int | None, n_vocab: int) -> int | None:
    """A special-token id from the metadata, as llama.cpp reads it: out-of-range ids are ignored."""
    if default is not None and default >= n_vocab:
        default = None
    v = meta.get(key)
    if v is None:
        return default
    return int(v) if 0 <= int(v) < n_vocab else default


@dataclass
class Vocab:
    """The vocabulary as llama.cpp sees it after `llama_vocab::impl::load`."""
    tokens: list[str]
    attrs: np.ndarray                 # int32 [n_vocab] llama_token_attr bits
    kind: str                         # "bpe" or "spm"
    pre: PreTokenizer | None
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    escape_spaces: bool
    pre_name: str | None = None
    eog_ids: set[int] = field(default_factory=set)


# --- reading the vocabulary (llama_vocab::impl::load) ---------------------------------------------
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
              "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
_EOG_TEXTS = frozenset(("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                        "<｜end▁of▁sentence｜>", "[e~["))
# (metadata key suffix, texts llama.cpp looks for when the key is absent); found tokens become control
_AUTO_SPECIAL = (
    (("eot",), _EOT_TEXTS),
    (("eom",), ("<|eom_id|>",)),
    (("fim_pre", "prefix"), ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                             "<|code_prefix|>", "<|prefix|>")),
    (("fim_suf", "suffix"), ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                             "<|code_suffix|>", "<|suffix|>")),
    (("fim_mid", "middle"), ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                             "<|code_middle|>", "<|middle|>")),
    (("fim_pad",), ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
    (("fim_rep",), ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
    (("fim_sep",), ("<|file_sep|>",)),
)


def read_vocab(g: GGUFFile) -> tuple[Vocab, dict[str, int]]:
    meta, name = g.metadata, g.path.name
    model = meta.get("tokenizer.ggml.model")
    raw_tokens = meta.get("tokenizer.ggml.tokens")
    if model is None or raw_tokens is None:
        raise UnsupportedModelError(f"{name}: the file carries no tokenizer (tokenizer.ggml.model or "
                                    f"tokenizer.ggml.tokens is missing)")
    tokens = string_list(raw_tokens)
    n = len(tokens)
    if "" in tokens:
        for i in (i for i, t in enumerate(tokens) if not t):
            tokens[i] = f"[EMPTY_{i}]"    # as llama.cpp names them
    index = dict(zip(tokens, range(n)))
    if len(index) != n:
        seen: set[str] = set()
        dup = next(t for t in tokens if t in seen or seen.add(t))
        raise GGUFError(f"{name}: tokenizer.ggml.tokens holds {dup!r} twice")
    types = meta.get("tokenizer.ggml.token_type")
    if types is None:
        attrs = np.full(n, ATTR_NORMAL, np.int32)
    else:
        t = np.asarray(types, np.int64)
        if len(t) < n:
            raise GGUFError(f"{name}: tokenizer.ggml.token_type has {len(t)} entries for {n} tokens")
        t = t[:n]
        attrs = np.where((t >= 0) & (t <= 6), _TYPE_ATTR[np.clip(t, 0, 6)], 0).astype(np.int32)

    pre_name = meta.get("tokenizer.ggml.pre")
    if model in ("gpt2", "gemma4"):
        kind, unk = "bpe", None
        bos = eos = None if model == "gemma4" else 11     # llama.cpp's defaults
        if model == "gemma4":
            pre_name = "gemma4"
        if not pre_name:
            log.warning("%s: tokenizer.ggml.pre is missing; using llama.cpp's 'default' pre-tokenizer "
                        "(the model's own may split text differently)", name)
            pre_name = "default"
        pre = PRE_TOKENIZERS.get(pre_name)
        if pre is None:
            raise UnsupportedModelError(
                f"{name}: tokenizer.ggml.pre is '{pre_name}', a pre-tokenizer Hearth does not know "
                f"(known: {', '.join(sorted(PRE_TOKENIZERS))})")
        if pre.no_bos:
            bos = None
        add_bos, add_space_prefix, escape = pre.add_bos, False, pre.escape_spaces
    elif model == "llama":
        kind, pre, bos, eos, unk = "spm", None, 1, 2, 0
        add_bos, add_space_prefix, escape = True, True, True
    else:
        raise UnsupportedModelError(f"{name}: tokenizer.ggml.model is '{model}'; Hearth reads 'gpt2' (BPE), "
                                    f"'llama' (SentencePiece) and 'gemma4' vocabularies")
    add_space_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", add_space_prefix))
    bos = _meta_id(meta, "tokenizer.ggml.bos_token_id", bos, n)
    eos = _meta_id(meta, "tokenizer.ggml.eos_token_id", eos, n)
    unk = _meta_id(meta, "tokenizer.ggml.unknown_token_id", unk, n)
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", add_bos))
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
    if pre is not None and pre is PRE_TOKENIZERS["gemma4"]:
        add_bos = True                   # llama.cpp's workaround for Gemma 4 files
    for flag, tid, what in ((add_bos, bos, "bos"), (add_eos, eos, "eos")):
        if flag and tid is None:
            raise GGUFError(f"{name}: tokenizer.ggml.add_{what}_token is true, but "
                            f"tokenizer.ggml.{what}_token_id is not set")

    v = Vocab(tokens, attrs, kind, pre, bos, eos, unk, add_bos, add_eos, add_space_prefix, escape,
               pre_name if kind == "bpe" else None)
    _find_special_tokens(v, meta, index)
    if any(s in str(meta.get("general.name", "")).lower() for s in ("phi-3", "phi3")):
        # llama.cpp strips whitespace after Phi-3's special tokens
        v.attrs[(v.attrs & SPLIT_OUT_ATTRS) != 0] |= ATTR_RSTRIP
        for text, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            if text in index:
                v.attrs[index[text]] = v.attrs[index[text]] | ATTR_RSTRIP if on else v.attrs[index[text]] & ~ATTR_RSTRIP
    return v, index


def _find_special_tokens(v: Vocab, meta: dict, index: dict[str, int]) -> None:
    """End-of-generation ids and control attributes, decided from metadata and token texts as
    llama.cpp does (its comment: "determined based on the token text, which is obviously not ideal")."""
    n, attrs = len(v.tokens), v.attrs
    found: dict[str, int | None] = {}
    for keys, texts in _AUTO_SPECIAL:
        tid = None
        for k in keys:
            tid = _meta_id(meta, f"tokenizer.ggml.{k}_token_id", tid, n)
        if tid is None:
            tid = next((index[t] for t in texts if t in index), None)
            if tid is not None:
                attrs[tid] |= ATTR_CONTROL
        found[keys[0]] = tid
    for tid in np.flatnonzero(attrs & ATTR_CONTROL).tolist():
        if "unused" in v.tokens[tid]:
            attrs[tid] |= ATTR_UNUSED
    eog = {found[k] for k in ("fim_pad", "fim_rep", "fim_sep") if found[k] is not None}
    for text in _EOG_TEXTS:
        tid = index.get(text)
        if tid is not None:
            eog.add(tid)
            attrs[tid] |= ATTR_CONTROL
    for text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):   # gpt-oss
        if text in index:
            attrs[index[text]] = ATTR_USER_DEFINED
    eog |= {t for t in (v.eos_id, found["eot"], found["eom"]) if t is not None}
    texts = {v.tokens[t] for t in eog}
    if "<|end|>" in texts and (("<|return|>" in texts and "<|call|>" in texts)
                               or ({"<|call|>", "<|calls|>"} & texts and "<|flush|>" in texts)):
        end = index["<|end|>"]
        eog.discard(end)
        attrs[end] = ATTR_USER_DEFINED
    if "<|tool_response>" in texts and "</s>" in texts:          # Gemma 4
        eog.discard(index["</s>"])
        attrs[index["</s>"]] = ATTR_NORMAL
    v.eog_ids = eog


def string_list(arr) -> list[str]:
    """A GGUF string array as a list, fast: one decode of the whole span instead of one per string.

    In the file each string is preceded by its 8-byte length; we turn the first of those bytes into
    a NUL, drop the other seven, decode once and split at the NULs. Anything unusual (a string
    holding a NUL or invalid UTF-8) takes the plain path, which decodes string by string."""
    offsets, lengths = getattr(arr, "offsets", None), getattr(arr, "lengths", None)
    buf = getattr(arr, "_buf", None)
    if buf is None or offsets is None or len(arr) < 2:
        return arr.tolist() if hasattr(arr, "tolist") else [str(x) for x in arr]
    start, end = int(offsets[0]), int(offsets[-1] + lengths[-1])
    blob = np.frombuffer(buf, np.uint8, end - start, start).copy()
    gaps = offsets[1:] - start - 8                     # where each length prefix starts in blob
    if not np.array_equal(gaps, offsets[:-1] + lengths[:-1] - start):
        return arr.tolist()
    blob[gaps] = 0
    keep = np.ones(len(blob), bool)
    for j in range(1, 8):
        keep[gaps + j] = False
    try:
        parts = blob[keep].tobytes().decode("utf-8").split("\0")
    except UnicodeDecodeError:
        return arr.tolist()
    return parts if len(parts) == len(arr) else arr.tolist()

