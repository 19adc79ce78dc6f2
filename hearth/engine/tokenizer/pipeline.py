"""The `tokenizers` pipeline for a GGUF vocabulary: a BPE model, its pre-tokenizer or normalizer,
and the tokens split out of the text before anything else.

- byte-level BPE (and Gemma 4's BPE over raw UTF-8): the merges are `tokenizer.ggml.merges`, the
  pre-tokenizer is the regexes `tokenizer.ggml.pre` names (pretokenizers.py);
- SentencePiece: the merges are derived from the token scores (`_spm_merges` says how).
"""

from __future__ import annotations

import re

import numpy as np
from tokenizers import AddedToken, Regex
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import models, normalizers, pre_tokenizers

from ..errors import GGUFError
from ..gguf import GGUFFile
from .vocab import ATTR_BYTE, ATTR_LSTRIP, ATTR_RSTRIP, SPACE_MARK, SPECIAL_ATTRS, SPLIT_OUT_ATTRS, Vocab, string_list


def make_hf_tokenizer(g: GGUFFile, v: Vocab, index: dict[str, int]) -> _HFTokenizer:
    """A `tokenizers.Tokenizer` that encodes as llama.cpp does for this vocabulary."""
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
    split_out = np.flatnonzero(v.attrs & SPLIT_OUT_ATTRS).tolist()
    added = [AddedToken(v.tokens[i], special=bool(v.attrs[i] & SPECIAL_ATTRS), normalized=False,
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


_NOT_ONE_SPACE = re.compile(r"(?m)^ |^[^ \n]*$")


def _bpe_merges(raw) -> list[tuple[str, str]]:
    """"a b" -> ("a", "b"), split at the first space after the first character, as llama.cpp does."""
    lines = string_list(raw)
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


def _spm_merges(v: Vocab, scores: np.ndarray, index: dict[str, int]) -> list[tuple[str, str]]:
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

