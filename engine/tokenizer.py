"""The tokenizer, built from a GGUF file's own vocabulary with the `tokenizers` library.

What llama.cpp does (src/llama-vocab.cpp) is the specification: the same ids for the same text.

- `tokenizer.ggml.model == "gpt2"`: byte-level BPE. The text is split by the regexes that
  `tokenizer.ggml.pre` names (llama.cpp's table, `_PRE_TOKENIZERS` below), each piece is mapped to
  GPT-2's byte alphabet and merged by the ranks of `tokenizer.ggml.merges`.
- `tokenizer.ggml.model == "gemma4"`: BPE over raw UTF-8 with spaces written as "▁", split only
  at newlines, `<0xXX>` byte fallback.
- `tokenizer.ggml.model == "llama"` (SentencePiece: Llama 2, Gemma 1-3, Phi-3): spaces become
  "▁", a "▁" is prepended to each run of text when `add_space_prefix`, and pieces merge by the
  score of the token they form; characters outside the vocabulary fall back to `<0xXX>` tokens.
  llama.cpp merges by score at run time; we give `tokenizers` the equivalent BPE merge list
  (every split of every token into two tokens, ranked by the whole token's score).

A `tokenizer.ggml.pre` that is not in the table is an UnsupportedModelError naming it. A missing
one means llama.cpp's "default" pre-tokenizer, as in llama.cpp, with a logged warning.

Control, unknown and user-defined tokens (`<|im_start|>` ...) are split out of the text before
anything else; with `parse_special=False` control and unknown tokens are plain text (user-defined
ones are still split out, as in llama.cpp and `tokenizers`).

Decoding works on bytes: each token has its bytes (llama.cpp's `token_to_piece`), so a UTF-8
character split across tokens is joined before it is decoded. Unlike llama.cpp we do not "clean
up" spaces before punctuation when decoding (`clean_spaces`): decoding round-trips instead.

Where `tokenizers` and llama.cpp could part (no reference vector shows it; tests/test_tokenizer.py
checks every one): special tokens are found leftmost-longest rather than longest-first; for
SentencePiece, two different tokens of exactly equal score are ranked by id rather than by
position, and a character outside the vocabulary becomes bytes at once rather than after merging.
A byte with no token of its own (SmolLM2 has none for 0xF1) is dropped, as in llama.cpp.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import threading
from dataclasses import dataclass, field

import numpy as np
from tokenizers import AddedToken, Regex
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import models, normalizers, pre_tokenizers

from .errors import GGUFError, UnsupportedModelError
from .gguf import GGUFFile

log = logging.getLogger(__name__)

# tokenizer.ggml.token_type values (gguf-py TokenType)
# llama.cpp's llama_token_attr bits
ATTR_UNKNOWN, ATTR_UNUSED, ATTR_NORMAL, ATTR_CONTROL = 1 << 0, 1 << 1, 1 << 2, 1 << 3
ATTR_USER_DEFINED, ATTR_BYTE, ATTR_LSTRIP, ATTR_RSTRIP = 1 << 4, 1 << 5, 1 << 7, 1 << 8
_TYPE_ATTR = np.array([0, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_UNUSED, ATTR_BYTE],
                      np.int32)
_SPECIAL = ATTR_CONTROL | ATTR_UNKNOWN           # hidden when decoding with skip_special
_SPLIT_OUT = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN   # split out of text before BPE

SPACE_MARK = "\u2581"  # ▁, SentencePiece's visible space


# --- pre-tokenizer regexes, copied from llama.cpp's llm_tokenizer_bpe -------------------------------
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# cased letters (Lu, Ll, Lt) as in DeepSeek's tokenizer.json; escaped so that no editor normalizes them
_DEEPSEEK_LLM_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370"
    "-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-"
    "\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-"
    "\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-"
    "\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
    "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a"
    "-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-"
    "\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-"
    "\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-"
    "\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-"
    "\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943")
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_GPT4O = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _CONTRACTIONS + "?"
          r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _CONTRACTIONS + "?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
           r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEEPSEEK3 = [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
              r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
              r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]
_PORO = r" ?[^(\s|.,!?…。，、।۔،)]+"


@dataclass(frozen=True)
class _Pre:
    regexes: tuple[str, ...]
    ignore_merges: bool = False   # a word that is itself a token is taken whole
    add_bos: bool = False         # llama.cpp's default before tokenizer.ggml.add_bos_token
    byte_encode: bool = True      # GPT-2 byte alphabet; False for SentencePiece-style BPE
    escape_spaces: bool = False   # spaces become ▁ before splitting
    no_bos: bool = False          # llama.cpp clears the default BOS id (chatglm)


_DEFAULT = _Pre((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"))
_PRE_GROUPS: list[tuple[tuple[str, ...], _Pre]] = [
    (("default",), _DEFAULT),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"),
     _Pre((_LLAMA3,), ignore_merges=True, add_bos=True)),
    (("dbrx", "smaug-bpe"), _Pre((_LLAMA3,))),
    (("glm4", "chatglm-bpe"), _Pre((_LLAMA3,), no_bos=True)),
    (("deepseek-llm",), _Pre(("[\r\n]", "\\s?[" + _DEEPSEEK_LLM_LETTERS + "]+", "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
                              r"\s+$", _CJK, r"\p{N}+"))),
    (("deepseek-coder",), _Pre(("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"))),
    (("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), _Pre(tuple(_DEEPSEEK3))),
    (("falcon",), _Pre((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"))),
    (("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"),
     _Pre((r"\p{N}", _GPT2))),
    (("gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "jina-es", "jina-de", "gigachat",
      "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "exaone4", "jina-v1-en", "jina-v2-code",
      "roberta-bpe"), _Pre((_GPT2,))),
    (("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan", "solar-open"),
     _Pre((_QWEN2,))),
    (("qwen35",), _Pre((_QWEN35,))),
    (("poro-chat", "bloom", "gpt3-finnish"), _Pre((_PORO,))),
    (("viking",), _Pre((_PORO, r"\p{N}"))),
    (("tekken",), _Pre((_TEKKEN,), ignore_merges=True, add_bos=True)),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), _Pre((_GPT4O,))),
    (("seed-coder",), _Pre((_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
                             r"|\s*[\r\n]+|\s+(?!\S)|\s+",))),
    (("grok-2",), _Pre((_QWEN2,))),
    (("bailingmoe", "bailingmoe2", "llada-moe"),
     _Pre((r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]|\s+(?!\S)|\s+",))),
    (("gemma4", "granite-embed-multi-311m"),
     _Pre(("[^\n]+|[\n]+",), add_bos=True, byte_encode=False, escape_spaces=True)),
]
_PRE_TOKENIZERS: dict[str, _Pre] = {name: pre for names, pre in _PRE_GROUPS for name in names}
SUPPORTED_PRE_TOKENIZERS = frozenset(_PRE_TOKENIZERS)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_BYTE_DECODER = {ord(c): chr(b) for b, c in _bytes_to_unicode().items()}   # str.translate table -> latin-1


def _meta_id(meta: dict, key: str, default: int | None, n_vocab: int) -> int | None:
    """A special-token id from the metadata, as llama.cpp reads it: out-of-range ids are ignored."""
    if default is not None and default >= n_vocab:
        default = None
    v = meta.get(key)
    if v is None:
        return default
    return int(v) if 0 <= int(v) < n_vocab else default


@dataclass
class _Vocab:
    """The vocabulary as llama.cpp sees it after `llama_vocab::impl::load`."""
    tokens: list[str]
    attrs: np.ndarray                 # int32 [n_vocab] llama_token_attr bits
    kind: str                         # "bpe" or "spm"
    pre: _Pre | None
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


def _read_vocab(g: GGUFFile) -> tuple[_Vocab, dict[str, int]]:
    meta, name = g.metadata, g.path.name
    model = meta.get("tokenizer.ggml.model")
    raw_tokens = meta.get("tokenizer.ggml.tokens")
    if model is None or raw_tokens is None:
        raise UnsupportedModelError(f"{name}: the file carries no tokenizer (tokenizer.ggml.model or "
                                    f"tokenizer.ggml.tokens is missing)")
    tokens = _string_list(raw_tokens)
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
        pre = _PRE_TOKENIZERS.get(pre_name)
        if pre is None:
            raise UnsupportedModelError(
                f"{name}: tokenizer.ggml.pre is '{pre_name}', a pre-tokenizer Hearth does not know "
                f"(known: {', '.join(sorted(_PRE_TOKENIZERS))})")
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
    if pre is not None and pre is _PRE_TOKENIZERS["gemma4"]:
        add_bos = True                   # llama.cpp's workaround for Gemma 4 files
    for flag, tid, what in ((add_bos, bos, "bos"), (add_eos, eos, "eos")):
        if flag and tid is None:
            raise GGUFError(f"{name}: tokenizer.ggml.add_{what}_token is true, but "
                            f"tokenizer.ggml.{what}_token_id is not set")

    v = _Vocab(tokens, attrs, kind, pre, bos, eos, unk, add_bos, add_eos, add_space_prefix, escape,
               pre_name if kind == "bpe" else None)
    _find_special_tokens(v, meta, index)
    if any(s in str(meta.get("general.name", "")).lower() for s in ("phi-3", "phi3")):
        # llama.cpp strips whitespace after Phi-3's special tokens
        v.attrs[(v.attrs & _SPLIT_OUT) != 0] |= ATTR_RSTRIP
        for text, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            if text in index:
                v.attrs[index[text]] = v.attrs[index[text]] | ATTR_RSTRIP if on else v.attrs[index[text]] & ~ATTR_RSTRIP
    return v, index


def _find_special_tokens(v: _Vocab, meta: dict, index: dict[str, int]) -> None:
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


# --- the `tokenizers` pipeline ----------------------------------------------------------------------
def _make_hf_tokenizer(g: GGUFFile, v: _Vocab, index: dict[str, int]) -> _HFTokenizer:
    name = g.path.name
    unk = v.tokens[v.unk_id] if v.unk_id is not None else None
    if v.kind == "bpe":
        raw = g.metadata.get("tokenizer.ggml.merges")
        if raw is None:
            raise GGUFError(f"{name}: tokenizer.ggml.merges is missing (a BPE vocabulary needs its merges)")
        merges = _bpe_merges(raw)
        pre = v.pre
        model = _bpe(index, merges, byte_fallback=not pre.byte_encode, ignore_merges=pre.ignore_merges,
                     unk_token=None if pre.byte_encode else unk)
        hf = _HFTokenizer(model)
        steps = [pre_tokenizers.Split(Regex(r), "isolated") for r in pre.regexes]
        if pre.byte_encode:
            steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        hf.pre_tokenizer = pre_tokenizers.Sequence(steps)
        if pre.escape_spaces:
            hf.normalizer = normalizers.Replace(" ", SPACE_MARK)
    else:
        scores = g.metadata.get("tokenizer.ggml.scores")
        scores = np.zeros(len(v.tokens), np.float32) if scores is None else np.asarray(scores, np.float32)
        hf = _HFTokenizer(_bpe(index, _spm_merges(v, scores, index), byte_fallback=True, ignore_merges=False,
                               unk_token=unk))
        steps = [normalizers.Prepend(SPACE_MARK)] if v.add_space_prefix else []
        hf.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", SPACE_MARK)])
    split_out = np.flatnonzero(v.attrs & _SPLIT_OUT).tolist()
    added = [AddedToken(v.tokens[i], special=bool(v.attrs[i] & _SPECIAL), normalized=False,
                        lstrip=bool(v.attrs[i] & ATTR_LSTRIP), rstrip=bool(v.attrs[i] & ATTR_RSTRIP))
             for i in split_out]
    hf.add_special_tokens([a for a in added if a.special])
    hf.add_tokens([a for a in added if not a.special])
    return hf


def _bpe(vocab: dict[str, int], merges: list[tuple[str, str]], **kw) -> models.BPE:
    try:
        return models.BPE(vocab, merges, **kw)
    except Exception:  # noqa: BLE001  a merge whose parts or result are not tokens: llama.cpp ignores it
        ok = [(a, b) for a, b in merges if a in vocab and b in vocab and a + b in vocab]
        return models.BPE(vocab, ok, **kw)


def _string_list(arr) -> list[str]:
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


_NOT_ONE_SPACE = re.compile(r"(?m)^ |^[^ \n]*$")


def _bpe_merges(raw) -> list[tuple[str, str]]:
    """"a b" -> ("a", "b"), split at the first space after the first character, as llama.cpp does."""
    lines = _string_list(raw)
    # Fast path: each merge holds one space, not at its start (always so for byte-level BPE)
    joined = "\n".join(lines)
    if joined.count("\n") == len(lines) - 1 and joined.count(" ") == len(lines) and not _NOT_ONE_SPACE.search(joined):
        it = iter(joined.replace("\n", " ").split(" "))
        return list(zip(it, it))
    out = []
    for m in lines:
        p = m.find(" ", 1)
        if p > 0:
            out.append((m[:p], m[p + 1:]))
    return out


def _spm_merges(v: _Vocab, scores: np.ndarray, index: dict[str, int]) -> list[tuple[str, str]]:
    """Every way to write a token as two tokens, best score first: running these as BPE merges
    does what llama.cpp's SentencePiece merge loop does (merge the adjacent pair whose joined
    text is the highest-scoring token)."""
    score, attrs = scores.tolist(), v.attrs.tolist()
    cands: list[tuple[float, int, str, str]] = []
    add = cands.append
    for i, t in enumerate(v.tokens):
        if len(t) < 2 or attrs[i] & ATTR_BYTE:
            continue
        s = -score[i]
        for k in range(1, len(t)):
            left = t[:k]
            if left in index:
                right = t[k:]
                if right in index:
                    add((s, i, left, right))
    cands.sort()        # best score first; ties: lower id, then shorter left part
    return [(c[2], c[3]) for c in cands]


class Tokenizer:
    """Text <-> token ids for one GGUF model. Build with `Tokenizer.from_gguf(gguf_file)`.

    Attributes: n_vocab, bos_id, eos_id (None when the model has none), eog_ids (frozenset of
    end-of-generation ids), add_bos, add_eos, model ("bpe" or "spm"), pre (the pre-tokenizer's
    name for BPE vocabularies).
    """

    def __init__(self, hf: _HFTokenizer, vocab: _Vocab, name: str):
        self._hf = hf
        self._v = vocab
        self._lock = threading.Lock()      # encode_special_tokens is tokenizer-wide state
        self._pieces: list[bytes] | None = None
        self.name = name
        self.n_vocab = len(vocab.tokens)
        self.bos_id = vocab.bos_id
        self.eos_id = vocab.eos_id
        self.eog_ids = frozenset(vocab.eog_ids)
        self.add_bos = vocab.add_bos
        self.add_eos = vocab.add_eos
        self.model = vocab.kind
        self.add_space_prefix = vocab.add_space_prefix
        self.pre = vocab.pre_name

    @property
    def eos_ids(self) -> frozenset[int]:
        """All end-of-generation ids (the name engine/DESIGN.md uses)."""
        return self.eog_ids

    # --- construction --------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, gguf: GGUFFile | str | os.PathLike) -> "Tokenizer":
        if not isinstance(gguf, GGUFFile):
            gguf = GGUFFile.open(gguf, check_types=False)
        vocab, index = _read_vocab(gguf)
        return cls(_make_hf_tokenizer(gguf, vocab, index), vocab, gguf.path.name)

    # --- encoding ------------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`. `add_special` adds BOS/EOS where the model's metadata says so;
        `parse_special` turns control-token text such as "<|im_start|>" into its token."""
        ids: list[int] = []
        if add_special and self.add_bos and self.bos_id is not None:
            ids.append(self.bos_id)
        if text:
            with self._lock:
                self._hf.encode_special_tokens = not parse_special
                ids.extend(self._hf.encode(text, add_special_tokens=False).ids)
        if add_special and self.add_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    # --- decoding ------------------------------------------------------------------------------
    def token_text(self, token_id: int) -> str:
        """The token's string as stored in the GGUF (byte-level or ▁-escaped for normal tokens)."""
        return self._v.tokens[token_id]

    def is_special(self, token_id: int) -> bool:
        """A control or unknown token (hidden by `decode(..., skip_special=True)`)."""
        return bool(self._v.attrs[token_id] & _SPECIAL)

    def token_bytes(self, token_id: int, skip_special: bool = False) -> bytes:
        """The bytes this token stands for (llama.cpp's token_to_piece)."""
        if not 0 <= token_id < self.n_vocab:
            raise ValueError(f"{self.name}: token id {token_id} is outside the vocabulary (0..{self.n_vocab - 1})")
        if skip_special and self._v.attrs[token_id] & _SPECIAL:
            return b""
        if self._pieces is None:
            self._pieces = self._build_pieces()
        return self._pieces[token_id]

    def decode(self, ids, skip_special: bool = False) -> str:
        """The text of `ids`. Bytes that do not form UTF-8 become U+FFFD. For SentencePiece models
        that prepend a space, the first piece's leading space is dropped (as llama.cpp does)."""
        data = b"".join(self.token_bytes(int(i), skip_special) for i in ids)
        if self._v.add_space_prefix and data.startswith(b" "):
            data = data[1:]
        return data.decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special: bool = False) -> "StreamDecoder":
        return StreamDecoder(self, skip_special)

    def _build_pieces(self) -> list[bytes]:
        v = self._v
        out: list[bytes] = []
        for tok, attr in zip(v.tokens, v.attrs.tolist()):
            if attr & (_SPECIAL | ATTR_USER_DEFINED):
                out.append(tok.encode("utf-8"))
            elif attr & ATTR_NORMAL:
                if v.escape_spaces:
                    out.append(tok.replace(SPACE_MARK, " ").encode("utf-8"))
                else:
                    out.append(_byte_level_decode(tok))
            elif attr & ATTR_BYTE:
                out.append(bytes([int(tok[3:5], 16)]))
            else:
                out.append(b"")
        return out

    def __repr__(self) -> str:
        return (f"Tokenizer({self.name}: {self._v.kind}, pre={self._v.pre_name}, "
                f"n_vocab={self.n_vocab}, bos={self.bos_id}, eos={self.eos_id}, eog={sorted(self.eog_ids)})")


def _byte_level_decode(tok: str) -> bytes:
    s = tok.translate(_BYTE_DECODER)
    try:
        return s.encode("latin-1")
    except UnicodeEncodeError:
        # A character outside GPT-2's byte alphabet: llama.cpp prints "[UNK_BYTE_0x..]"; we keep its UTF-8.
        return b"".join(c.encode("latin-1") if ord(c) < 256 else c.encode("utf-8") for c in s)


class StreamDecoder:
    """Turns ids, fed one at a time, into text deltas without ever emitting half a UTF-8 character.

    Meant for generated tokens, which continue a prompt: unlike `decode`, it keeps the leading
    space of a SentencePiece token ("▁Hello" is " Hello" after the prompt).

        dec = StreamDecoder(tok)
        for i in generated: print(dec.feed(i), end="")
        print(dec.flush())
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self._tok = tokenizer
        self._skip = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        return self._utf8.decode(self._tok.token_bytes(int(token_id), self._skip))

    def flush(self) -> str:
        """What is left at the end: an incomplete character becomes U+FFFD."""
        return self._utf8.decode(b"", final=True)
