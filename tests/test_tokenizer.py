"""engine/tokenizer/: the same token ids as llama.cpp, lossless decoding, streaming without half
characters, and clear errors for vocabularies we cannot read.

The reference ids come from llama.cpp (see ../shared/reference/README.md): the `vocab/` vectors and
the `tokenizer.inp/.out` files are tokenized without BOS/EOS and with special-token text as plain
text; the prompts of `reference.json` with `add_special=True`, with and without special parsing.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import REFERENCE
from hearth.engine.errors import GGUFError, UnsupportedModelError
from hearth.engine.gguf import GGUFFile
from hearth.engine.paths import default_model_path
from model_paths import gemma3_model_path
from hearth.engine.tokenizer import SUPPORTED_PRE_TOKENIZERS, StreamDecoder, Tokenizer

MARK = "\n__ggml_vocab_test__\n"
VOCABS = ["deepseek-llm", "gemma-4", "gpt-2", "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35",
          "refact", "starcoder"]

# Vectors llama.cpp's output cannot be matched on, with the reason: (vocab, index) -> reason.
# Every vector passes today; a future regression that cannot be fixed goes here as a strict xfail.
KNOWN_MISMATCHES: dict[tuple[str, int], str] = {}


# --- helpers ------------------------------------------------------------------------------------------
def read_vectors(inp: Path, out: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's test-tokenizer-0 format: strings separated by MARK; one line of ids per string."""
    texts = inp.read_text(encoding="utf-8").split(MARK)
    if texts and texts[-1] == "":      # the file ends with a marker
        texts.pop()
    lines = out.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(texts) == len(lines), f"{inp.name}: {len(texts)} strings but {len(lines)} lines of ids"
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


def vector_paths(name: str, root: Path) -> tuple[Path, Path]:
    """The .inp/.out pair of a vocabulary; 'smollm2' and 'gemma3' are the real models' files."""
    if name in ("smollm2", "gemma3"):
        return root / name / "tokenizer.inp", root / name / "tokenizer.out"
    return root / f"vocab/ggml-vocab-{name}.gguf.inp", root / f"vocab/ggml-vocab-{name}.gguf.out"


def vocab_gguf(name: str, root: Path) -> Path | None:
    if name == "smollm2":
        return default_model_path()
    if name == "gemma3":
        return gemma3_model_path()
    return root / f"vocab/ggml-vocab-{name}.gguf"


@lru_cache(maxsize=None)
def tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_gguf(GGUFFile.open(path, check_types=False))


@lru_cache(maxsize=None)
def vectors(name: str, root: Path) -> list[tuple[str, list[int]]]:
    return read_vectors(*vector_paths(name, root))


def _vector_params():
    """One test per vector; counted at collection (a missing file gives one test that fails)."""
    params = []
    for name in VOCABS + ["smollm2", "gemma3"]:
        inp, _ = vector_paths(name, REFERENCE)
        n = 1
        if inp.exists():
            texts = inp.read_text(encoding="utf-8").split(MARK)
            n = len(texts) - (texts[-1] == "")
        for i in range(n):
            marks = [pytest.mark.xfail(strict=True, reason=KNOWN_MISMATCHES[(name, i)])] \
                if (name, i) in KNOWN_MISMATCHES else []
            params.append(pytest.param(name, i, id=f"{name}-{i:02d}", marks=marks))
    return params


def model_tokenizer(name: str) -> Tokenizer:
    if name == "gemma3":
        path = gemma3_model_path()
        if path is None:
            pytest.skip("Gemma 3 270M is not installed (./dev test installs it)")
        return tokenizer(path)
    return tokenizer(default_model_path())


@pytest.fixture(scope="module")
def smol() -> Tokenizer:
    return tokenizer(default_model_path())


# --- llama.cpp's vectors -------------------------------------------------------------------------------
@pytest.mark.parametrize("name,index", _vector_params())
def test_vector_matches_llama_cpp(reference_dir, name, index):
    gguf = vocab_gguf(name, reference_dir)
    if gguf is None:
        pytest.skip("Gemma 3 270M is not installed (./dev test installs it)")
    text, expected = vectors(name, reference_dir)[index]
    assert tokenizer(gguf).encode(text, add_special=False, parse_special=False) == expected, repr(text)


@pytest.mark.parametrize("name", VOCABS + ["smollm2"])
def test_vectors_round_trip(reference_dir, name):
    tok = tokenizer(vocab_gguf(name, reference_dir))
    for text, _ in vectors(name, reference_dir):
        for parse_special in (False, True):
            assert tok.decode(tok.encode(text, add_special=False, parse_special=parse_special)) == text


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
@pytest.mark.parametrize("prompt", [0, 1, 2])
def test_reference_prompt_ids(reference_dir, model, prompt):
    ref = json.loads((reference_dir / model / "reference.json").read_text())
    p = ref["prompts"][prompt]
    tok = model_tokenizer(model)
    assert tok.encode(p["text"]) == p["ids"]
    plain = p["ids"] if p["ids_special_false"] == "same as ids" else p["ids_special_false"]
    assert tok.encode(p["text"], parse_special=False) == plain
    assert tok.decode(p["ids"], skip_special=False).removeprefix("<bos>") == p["text"]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
def test_tiny_model_prompt_ids(reference_dir, arch):
    """The tiny reference models carry real vocabularies (Llama 3, Qwen2, Qwen3's qwen35, Gemma 3)."""
    manifest = json.loads((reference_dir / f"tiny/{arch}/manifest.json").read_text())
    tok = tokenizer(reference_dir / f"tiny/{arch}" / manifest["file"])
    assert manifest["prompts"], "no prompts in the manifest"
    for p in manifest["prompts"]:
        assert tok.encode(p["text"]) == p["ids"], p["name"]
        plain = p["ids"] if p.get("ids_special_false", "same as ids") == "same as ids" else p["ids_special_false"]
        assert tok.encode(p["text"], parse_special=False) == plain, p["name"]


# --- special tokens and metadata ----------------------------------------------------------------------
def test_smollm2_special_tokens(smol):
    assert (smol.n_vocab, smol.bos_id, smol.eos_id) == (49152, 1, 2)
    assert smol.eog_ids == {0, 2, 4}         # <|endoftext|>, <|im_end|>, <reponame> (README)
    assert smol.eos_ids == smol.eog_ids
    assert not smol.add_bos and not smol.add_eos
    assert smol.token_text(1) == "<|im_start|>" and smol.is_special(1) and not smol.is_special(504)


def test_gemma3_special_tokens(reference_dir):
    tok = model_tokenizer("gemma3")
    model = json.loads((reference_dir / "gemma3/reference.json").read_text())["model"]
    assert (tok.n_vocab, tok.bos_id, tok.eos_id) == (model["n_vocab"], model["bos_id"], model["eos_id"])
    assert tok.eog_ids == set(model["eog_ids"])
    assert tok.add_bos and tok.encode("Hi")[0] == 2 and tok.encode("Hi", add_special=False)[0] != 2


@pytest.mark.parametrize("vocab,eog", [
    ("llama-bpe", {128001, 128009}),                # <|end_of_text|>, <|eot_id|>
    ("qwen2", {151643, 151645, 128247}),            # <|endoftext|>, <|im_end|>, and "</s>" (a text llama.cpp stops on)
    ("phi-3", {2, 32000, 32007}),                   # </s>, <|endoftext|>, <|end|>
    ("gpt-2", {50256}),
])
def test_end_of_generation_ids_follow_llama_cpp(reference_dir, vocab, eog):
    assert tokenizer(reference_dir / f"vocab/ggml-vocab-{vocab}.gguf").eog_ids == eog


def test_parse_special(smol):
    assert smol.encode("<|im_start|>user") == [1, 4093]
    assert smol.encode("<|im_start|>user", parse_special=False) == [44, 108, 306, 79, 3738, 108, 46, 4093]


def test_add_special_adds_bos_and_eos_as_the_metadata_says(reference_dir):
    spm = tokenizer(reference_dir / "vocab/ggml-vocab-llama-spm.gguf")   # add_bos_token true, add_eos_token false
    assert spm.encode("Hello") == [1] + spm.encode("Hello", add_special=False)
    assert spm.encode("") == [1] and spm.encode("", add_special=False) == []
    qwen = tokenizer(reference_dir / "vocab/ggml-vocab-qwen2.gguf")     # neither key: BPE adds nothing
    assert qwen.encode("Hello") == qwen.encode("Hello", add_special=False)


def test_llama3_bpe_adds_bos_by_default(reference_dir):
    llama = tokenizer(reference_dir / "tiny/llama/tiny-llama.gguf")     # no add_bos_token key: llama3 default
    assert llama.encode("Hello")[0] == 128000


def test_decode_skips_special_tokens_when_asked(smol):
    ids = smol.encode("<|im_start|>user\nHi<|im_end|>")
    assert smol.decode(ids) == "<|im_start|>user\nHi<|im_end|>"
    assert smol.decode(ids, skip_special=True) == "user\nHi"


def test_decode_rejects_ids_outside_the_vocabulary(smol):
    with pytest.raises(ValueError, match="49152"):
        smol.decode([49152])


def test_spm_decode_drops_the_prefix_space(reference_dir):
    spm = tokenizer(reference_dir / "vocab/ggml-vocab-llama-spm.gguf")
    ids = spm.encode("Hello world", add_special=False)
    assert spm.token_text(ids[0]) == "\u2581Hello"
    assert spm.decode(ids) == "Hello world" and spm.decode([1] + ids, skip_special=True) == "Hello world"


# --- streaming ---------------------------------------------------------------------------------------------
def _stream(tok: Tokenizer, ids: list[int]) -> list[str]:
    dec = StreamDecoder(tok)
    return [dec.feed(i) for i in ids] + [dec.flush()]


@pytest.mark.parametrize("vocab,text", [
    ("smollm2", "Rocket 🚀 and llama 🦙!"),                    # byte-level BPE: emoji bytes in separate tokens
    ("smollm2", "我想在apple工作 𠀋"),
    ("llama-spm", "Rocket 🚀 and llama 🦙!"),                  # SentencePiece: <0xF0><0x9F>... byte fallback
    ("llama-spm", "中文 𠀋 テスト"),
    ("gemma-4", "emoji 🦙 and 𠀋"),
])
def test_stream_decoder_never_emits_half_a_character(reference_dir, vocab, text):
    path = default_model_path() if vocab == "smollm2" else reference_dir / f"vocab/ggml-vocab-{vocab}.gguf"
    tok = tokenizer(path)
    ids = tok.encode(text, add_special=False)
    pieces = [tok.token_bytes(i) for i in ids]
    split = [p for p in pieces if p and not _is_utf8(p)]
    assert split, f"the test needs a character split across tokens: {pieces}"
    deltas = _stream(tok, ids)
    # a SentencePiece model that prepends a space to text keeps it when streaming a continuation
    assert "".join(deltas) == (" " + text if tok.add_space_prefix else text)
    assert all("\ufffd" not in d for d in deltas)
    assert "" in deltas[:-1]            # the first bytes of a split character were held back


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_stream_decoder_flushes_an_incomplete_character_as_replacement(smol):
    ids = smol.encode("🚀", add_special=False)
    assert len(ids) > 1
    dec = smol.stream_decoder()
    assert dec.feed(ids[0]) == ""
    assert dec.flush() == "\ufffd"


def _bytes_in_vocab(tok: Tokenizer) -> set[int]:
    """The bytes that have a token of their own (SmolLM2 lacks a few, e.g. 0xF1: llama.cpp drops them)."""
    return {b for i in range(tok.n_vocab) if len(p := tok.token_bytes(i)) == 1 for b in p}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_byte_level_round_trip_property(text):
    tok = tokenizer(default_model_path())
    assume(set(text.encode("utf-8")) <= _smol_bytes(tok))
    for parse_special in (True, False):
        ids = tok.encode(text, add_special=False, parse_special=parse_special)
        assert tok.decode(ids) == text
        assert "".join(_stream(tok, ids)) == text


_SMOL_BYTES: list[set[int]] = []


def _smol_bytes(tok: Tokenizer) -> set[int]:
    if not _SMOL_BYTES:
        _SMOL_BYTES.append(_bytes_in_vocab(tok))
    return _SMOL_BYTES[0]


def test_a_byte_without_a_token_is_dropped_as_llama_cpp_drops_it(smol):
    assert 0xF1 not in _smol_bytes(smol)
    assert smol.decode(smol.encode("a\U00040000b", add_special=False)) == "a\ufffd\ufffd\ufffdb"


# --- construction ---------------------------------------------------------------------------------------
def test_a_vocabulary_only_gguf_yields_a_tokenizer(reference_dir):
    g = GGUFFile.open(reference_dir / "vocab/ggml-vocab-gpt-2.gguf")
    assert not g.tensors
    assert Tokenizer.from_gguf(g).encode("Hello world") == [15496, 995]


def _write_vocab(path: Path, model: str = "gpt2", pre: str | None = "gpt-2", with_merges: bool = True) -> Path:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    tokens = ["a", "b", "ab", "Ġ", "Ġab", "<|end|>"]
    w.add_token_list(tokens)
    w.add_token_types([1, 1, 1, 1, 1, 3])
    if with_merges:
        w.add_token_merges(["a b", "Ġ ab"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_hand_made_vocabulary(tmp_path):
    tok = Tokenizer.from_gguf(GGUFFile.open(_write_vocab(tmp_path / "v.gguf")))
    assert tok.encode("ab ab<|end|>") == [2, 4, 5]
    assert tok.eog_ids == {5}


def _write_byte_vocab(path: Path, model: str, pre: str) -> Path:
    """A vocabulary that can spell any text: GPT-2's 256 byte characters (or <0xXX> tokens and
    "▁" for Gemma 4 style), plus "ab" and " ab" as merges."""
    gguf = pytest.importorskip("gguf")
    from hearth.engine.tokenizer.tokenizer import _bytes_to_unicode
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    if model == "gpt2":
        chars = sorted(_bytes_to_unicode().values())
        tokens, types = chars + ["ab", "\u0120ab"], [1] * (len(chars) + 2)
        merges = ["a b", "\u0120 ab"]
    else:
        tokens = [f"<0x{b:02X}>" for b in range(256)] + ["a", "b", "ab", "\u2581", "\u2581ab", "<bos>"]
        types = [6] * 256 + [1] * 5 + [3]
        merges = ["a b", "\u2581 ab"]
        w.add_bos_token_id(len(tokens) - 1)     # Gemma 4 vocabularies always add BOS
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("pre", sorted(SUPPORTED_PRE_TOKENIZERS))
def test_every_known_pre_tokenizer_builds_and_round_trips(tmp_path, pre):
    """Each regex of the table compiles in the tokenizers library's regex engine and splits text
    without losing any of it (only the vectors above can say the split is llama.cpp's)."""
    model = "gemma4" if pre in ("gemma4", "granite-embed-multi-311m") else "gpt2"
    tok = Tokenizer.from_gguf(GGUFFile.open(_write_byte_vocab(tmp_path / "v.gguf", model, pre)))
    text = "ab ab, 12345 Ab'S  \n\n\txé 中文 🦙!?  "
    ids = tok.encode(text, add_special=False)
    assert tok.decode(ids) == text
    ab = tok.encode("ab", add_special=False)
    assert len(ab) == 1 and tok.token_text(ab[0]) == "ab"


def test_unknown_pre_tokenizer_is_an_error_naming_it(tmp_path):
    path = _write_vocab(tmp_path / "odd.gguf", pre="made-up-pre")
    with pytest.raises(UnsupportedModelError, match=r"odd\.gguf.*made-up-pre"):
        Tokenizer.from_gguf(GGUFFile.open(path))


def test_missing_pre_tokenizer_falls_back_to_default_with_a_warning(tmp_path, caplog):
    tok = Tokenizer.from_gguf(GGUFFile.open(_write_vocab(tmp_path / "nopre.gguf", pre=None)))
    assert tok.pre == "default"
    assert "tokenizer.ggml.pre is missing" in caplog.text


def test_unknown_tokenizer_model_is_an_error(tmp_path):
    with pytest.raises(UnsupportedModelError, match="'t5'"):
        Tokenizer.from_gguf(GGUFFile.open(_write_vocab(tmp_path / "t5.gguf", model="t5")))


def test_missing_merges_is_an_error(tmp_path):
    with pytest.raises(GGUFError, match="merges"):
        Tokenizer.from_gguf(GGUFFile.open(_write_vocab(tmp_path / "m.gguf", with_merges=False)))


def test_a_file_without_vocabulary_is_an_error(tmp_path):
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(tmp_path / "empty.gguf"), "llama")
    w.add_uint32("llama.block_count", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedModelError, match="no tokenizer"):
        Tokenizer.from_gguf(GGUFFile.open(tmp_path / "empty.gguf"))


@pytest.mark.parametrize("vocab", ["gemma-4", "llama-spm"])
def test_string_arrays_decode_like_the_gguf_reader(reference_dir, vocab):
    from hearth.engine.tokenizer.vocab import string_list as _string_list
    for path in (default_model_path(), reference_dir / f"vocab/ggml-vocab-{vocab}.gguf"):
        g = GGUFFile.open(path, check_types=False)
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            if key in g.metadata:
                assert _string_list(g.metadata[key]) == g.metadata[key].tolist()
