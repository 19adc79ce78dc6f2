"""The tokenizer, built from a GGUF file's own vocabulary with the `tokenizers` library.

What llama.cpp does (src/llama-vocab.cpp) is the specification: the same ids for the same text.

- `tokenizer.ggml.model == "gpt2"`: byte-level BPE. The text is split by the regexes that
  `tokenizer.ggml.pre` names (llama.cpp's table, in pretokenizers.py), each piece is mapped to
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

Where each part lives: vocab.py reads the vocabulary and its special tokens from the GGUF,
pretokenizers.py holds llama.cpp's pre-tokenizer table, pipeline.py builds the
`tokenizers` pipeline (merges for BPE and SentencePiece); this module encodes and decodes.
"""

from __future__ import annotations

import codecs
import os
import threading

from tokenizers import Tokenizer as _HFTokenizer

from ..gguf import GGUFFile
from .pipeline import make_hf_tokenizer
from .pretokenizers import SUPPORTED_PRE_TOKENIZERS
from .vocab import (ATTR_BYTE, ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP, ATTR_UNKNOWN, ATTR_UNUSED,
                    ATTR_USER_DEFINED, SPACE_MARK, SPECIAL_ATTRS, Vocab, read_vocab)

__all__ = ["Tokenizer", "StreamDecoder", "SUPPORTED_PRE_TOKENIZERS", "SPACE_MARK", "ATTR_UNKNOWN", "ATTR_UNUSED",
           "ATTR_NORMAL", "ATTR_CONTROL", "ATTR_USER_DEFINED", "ATTR_BYTE", "ATTR_LSTRIP", "ATTR_RSTRIP"]


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


class Tokenizer:
    """Text <-> token ids for one GGUF model. Build with `Tokenizer.from_gguf(gguf_file)`.

    Attributes: n_vocab, bos_id, eos_id (None when the model has none), eog_ids (frozenset of
    end-of-generation ids), add_bos, add_eos, model ("bpe" or "spm"), pre (the pre-tokenizer's
    name for BPE vocabularies).
    """

    def __init__(self, hf: _HFTokenizer, vocab: Vocab, name: str):
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
        vocab, index = read_vocab(gguf)
        return cls(make_hf_tokenizer(gguf, vocab, index), vocab, gguf.path.name)

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
        return bool(self._v.attrs[token_id] & SPECIAL_ATTRS)

    def token_bytes(self, token_id: int, skip_special: bool = False) -> bytes:
        """The bytes this token stands for (llama.cpp's token_to_piece)."""
        if not 0 <= token_id < self.n_vocab:
            raise ValueError(f"{self.name}: token id {token_id} is outside the vocabulary (0..{self.n_vocab - 1})")
        if skip_special and self._v.attrs[token_id] & SPECIAL_ATTRS:
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
            if attr & (SPECIAL_ATTRS | ATTR_USER_DEFINED):
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
