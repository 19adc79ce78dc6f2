"""engine/gguf.py: the GGUF reader.

It reads what gguf-py (llama.cpp's reader) reads, from a memory map without copying tensor bytes;
it opens v2, v3 and vocabulary-only files; and every bad file -- wrong magic or version, truncated
anywhere, impossible counts, unknown types, bad alignment, not a file at all -- is a GGUFError
(UnsupportedModelError for tensor types) naming the file, never another exception or a hang.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hearth.engine.errors import GGUFError, UnsupportedModelError
from hearth.engine.gguf import GGUFFile, StringArray
from hearth.engine.quants import TYPE_BY_NAME

# ---------------------------------------------------------------------------------------------
# A small GGUF writer, independent of the reader under test (and of gguf-py, which writes v3 only).

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_FMT = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i", FLOAT32: "<f",
        BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}


def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(vtype: int, v) -> bytes:
    """A value's bytes; an ARRAY value is (item_type, [items])."""
    if vtype in _FMT:
        return struct.pack(_FMT[vtype], v)
    if vtype == STRING:
        return gstr(v)
    itype, items = v
    return struct.pack("<IQ", itype, len(items)) + b"".join(gval(itype, x) for x in items)


def gkv(key: str, vtype: int, v) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + gval(vtype, v)


def ginfo(name: str, shape, type_id: int, offset: int) -> bytes:
    return gstr(name) + struct.pack(f"<I{len(shape)}QIQ", len(shape), *shape, type_id, offset)


def build(kvs: list[bytes], infos: list[bytes], data: bytes = b"", version: int = 3, alignment: int = 32,
          n_tensors: int | None = None, n_kv: int | None = None) -> bytes:
    """v2 and v3 share this layout (u64 counts); only the version number differs."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(infos)
    return body + b"\0" * (-len(body) % alignment) + data


ALL_TYPES_KV = [
    ("t.u8", UINT8, 200), ("t.i8", INT8, -100), ("t.u16", UINT16, 60000), ("t.i16", INT16, -30000),
    ("t.u32", UINT32, 4_000_000_000), ("t.i32", INT32, -2_000_000_000), ("t.f32", FLOAT32, 1.5),
    ("t.bool", BOOL, True), ("t.str", STRING, "héllo ✓"), ("t.u64", UINT64, 2**63 + 5),
    ("t.i64", INT64, -(2**62)), ("t.f64", FLOAT64, 3.141592653589793),
    ("t.arr_i32", ARRAY, (INT32, [1, -2, 3])), ("t.arr_f32", ARRAY, (FLOAT32, [0.5, -0.25])),
    ("t.arr_bool", ARRAY, (BOOL, [True, False, True])), ("t.arr_str", ARRAY, (STRING, ["a", "", "ünï"])),
    ("t.arr_empty", ARRAY, (UINT8, [])), ("t.arr_nested", ARRAY, (ARRAY, [(INT8, [1, 2]), (INT8, [-3])])),
    ("t.arr_u64", ARRAY, (UINT64, [2**64 - 1, 0])), ("t.arr_f64", ARRAY, (FLOAT64, [1e300])),
]


def small_gguf(version: int = 3) -> bytes:
    """Every value type, and two tensors: F32 [8] and Q8_0 [32, 2] (GGUF order)."""
    kvs = [gkv("general.architecture", STRING, "llama"), gkv("general.alignment", UINT32, 32)]
    kvs += [gkv(k, t, v) for k, t, v in ALL_TYPES_KV]
    f32 = np.arange(8, dtype="<f4").tobytes()
    q8 = b"".join(np.float16(0.5).tobytes() + np.arange(32, dtype=np.int8).tobytes() for _ in range(2))
    infos = [ginfo("norm.weight", [8], 0, 0), ginfo("blk.0.w", [32, 2], 8, 32)]
    return build(kvs, infos, f32 + q8, version=version)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def assert_gguf_error(path: Path, match: str | None = None, exc=GGUFError) -> str:
    """Opening fails quickly with exactly `exc`, and the message names the file."""
    t = time.perf_counter()
    with pytest.raises(exc) as err:
        GGUFFile.open(path)
    assert time.perf_counter() - t < 5, "took too long to refuse the file"
    assert type(err.value) is exc, repr(err.value)
    msg = str(err.value)
    assert path.name in msg, msg
    if match:
        assert match in msg, msg
    return msg


# ---------------------------------------------------------------------------------------------
# The default model, against gguf-py


@pytest.fixture(scope="module")
def model(default_model_path):
    return GGUFFile.open(default_model_path)


@pytest.fixture(scope="module")
def oracle(default_model_path):
    return GGUFReader(default_model_path)  # slow (parses every string): once per module


def _oracle_value(field):
    """gguf-py's value of a field: a Python scalar or str, a list of str, or (numeric arrays) a
    numpy array of the item type."""
    from gguf import GGUFValueType
    if field.types[0] == GGUFValueType.ARRAY and field.types[1] != GGUFValueType.STRING:
        return np.concatenate([field.parts[i] for i in field.data]) if field.data else np.array([])
    return field.contents()


def assert_value_equal(ours, ref, key):
    if isinstance(ours, StringArray):
        assert ours.tolist() == ref, key
        assert [ours[i] for i in (0, -1, len(ref) // 2)] == [ref[0], ref[-1], ref[len(ref) // 2]], key
        with pytest.raises(IndexError):
            ours[len(ref)]
    elif isinstance(ours, np.ndarray):
        assert ours.dtype == ref.dtype.newbyteorder("<") and np.array_equal(ours, ref), key
    else:
        assert type(ours) is type(ref) and ours == ref, (key, ours, ref)


def test_default_model_metadata_matches_gguf_py(model, oracle):
    ref_keys = [k for k in oracle.fields if not k.startswith("GGUF.")]
    assert list(model.metadata) == ref_keys
    for key in ref_keys:
        field = oracle.fields[key]
        assert model.metadata_types[key] == int(field.types[0]), key
        assert_value_equal(model.metadata[key], _oracle_value(field), key)
    assert model.metadata["general.architecture"] == "llama"
    assert model.arch_get("block_count") == 30
    assert model.arch_get("no_such_key", 7) == 7
    assert isinstance(model.metadata["tokenizer.ggml.add_bos_token"], bool)
    assert isinstance(model.metadata["tokenizer.ggml.tokens"], StringArray)
    assert model.metadata["tokenizer.ggml.token_type"].dtype == np.int32


def test_default_model_tensors_match_gguf_py_without_copying(model, oracle, default_model_path):
    assert [t.name for t in oracle.tensors] == list(model.tensors)
    assert model.data_offset == oracle.data_offset
    whole_map = np.frombuffer(model._buf, np.uint8)
    for rt in oracle.tensors:
        info = model.tensors[rt.name]
        assert info.shape == tuple(int(d) for d in rt.shape), rt.name
        assert info.type.id == int(rt.tensor_type) and info.type.name == rt.tensor_type.name, rt.name
        assert model.data_offset + info.offset == rt.data_offset, rt.name
        assert info.n_bytes == rt.n_bytes == info.data.size, rt.name
        assert info.n_elements == rt.n_elements, rt.name
        assert np.array_equal(info.data, rt.data.view(np.uint8).reshape(-1)), rt.name
        # A view of the map, not a copy.
        assert not info.data.flags.owndata and not info.data.flags.writeable, rt.name
        assert np.shares_memory(info.data, whole_map), rt.name
        assert model.tensor_bytes(rt.name) is info.data


def test_header_bytes_data_offset_and_file_size(model, default_model_path):
    raw = default_model_path.read_bytes()
    assert model.file_size == len(raw) == os.path.getsize(default_model_path)
    assert model.data_offset % model.alignment == 0 and model.data_offset == 1785664
    assert model.header_bytes == raw[:model.data_offset]
    assert model.version == 3 and model.alignment == 32


# ---------------------------------------------------------------------------------------------
# Hand-made files


@pytest.mark.parametrize("version", [2, 3])
def test_hand_made_v2_and_v3_files_read_every_value_type(tmp_path, version):
    path = write(tmp_path, f"v{version}.gguf", small_gguf(version))
    g = GGUFFile.open(path)
    assert g.version == version
    for key, vtype, value in ALL_TYPES_KV:
        got = g.metadata[key]
        assert g.metadata_types[key] == vtype, key
        if vtype == ARRAY:
            itype, items = value
            if itype == STRING:
                assert isinstance(got, StringArray) and got.tolist() == items and got[-1] == items[-1]
            elif itype == ARRAY:
                assert [list(a) for a in got] == [list(v) for _, v in items]
            else:
                assert list(got) == items, key
                assert isinstance(got, np.ndarray)
        elif vtype == FLOAT32:
            assert got == np.float32(value)
        else:
            assert got == value and type(got) is type(value), key
    assert g.tensors["norm.weight"].data.view("<f4").tolist() == list(range(8))
    w = g.tensors["blk.0.w"]
    assert (w.shape, w.type.name, w.offset, w.n_bytes) == ((32, 2), "Q8_0", 32, 68)
    assert g.data_offset + 32 + 68 == g.file_size
    if version == 3:  # gguf-py reads what we wrote the same way
        r = GGUFReader(path)
        assert r.data_offset == g.data_offset
        assert [t.name for t in r.tensors] == list(g.tensors)
        assert r.fields["t.str"].contents() == "héllo ✓"
        assert r.fields["t.arr_str"].contents() == ["a", "", "ünï"]


def test_gguf_py_writer_output_opens(tmp_path):
    from gguf import GGUFWriter
    path = tmp_path / "w.gguf"
    w = GGUFWriter(path, "qwen2")
    w.add_uint32("qwen2.block_count", 2)
    w.add_array("x.list", [1, 2, 3])
    w.add_tensor("a", np.ones((3, 4), np.float32))
    w.add_tensor("b", np.ones((5,), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    g = GGUFFile.open(path)
    assert g.architecture == "qwen2" and g.arch_get("block_count") == 2
    assert g.tensors["a"].shape == (4, 3) and g.tensors["b"].type.name == "F16"
    assert g.tensors["a"].data.view("<f4").tolist() == [1.0] * 12


def test_vocab_only_file_opens(reference_dir):
    path = reference_dir / "vocab" / "ggml-vocab-gpt-2.gguf"
    g = GGUFFile.open(path)
    assert g.tensors == {} and g.architecture == "gpt2"
    toks = g.metadata["tokenizer.ggml.tokens"]
    assert isinstance(toks, StringArray) and len(toks) == 50257  # GPT-2's vocabulary
    assert (toks[0], toks[256], toks[-1]) == ("!", "Ġt", "<|endoftext|>")
    assert g.metadata["tokenizer.ggml.merges"][0] == "Ġ t"
    # This file ends before the padding that would precede a data section: it is all header.
    assert g.data_offset == g.file_size == path.stat().st_size
    assert g.header_bytes == path.read_bytes()


def test_every_reference_vocab_file_opens(reference_dir):
    for path in sorted((reference_dir / "vocab").glob("*.gguf")):
        g = GGUFFile.open(path)
        assert len(g.metadata["tokenizer.ggml.tokens"]) > 1000, path.name


# ---------------------------------------------------------------------------------------------
# Bad files


def test_empty_file(tmp_path):
    assert_gguf_error(write(tmp_path, "empty.gguf", b""), "empty")


def test_wrong_magic(tmp_path):
    assert_gguf_error(write(tmp_path, "magic.gguf", b"GGML" + small_gguf()[4:]), "not a GGUF file")
    assert_gguf_error(write(tmp_path, "short.gguf", b"GG"), "truncated")


@pytest.mark.parametrize("version", [0, 1, 4, 0x03000000])
def test_unsupported_versions(tmp_path, version):
    data = bytearray(small_gguf())
    data[4:8] = struct.pack("<I", version)
    msg = assert_gguf_error(write(tmp_path, f"v{version}.gguf", bytes(data)), "version")
    if version == 0x03000000:
        assert "big-endian" in msg


def test_not_a_file(tmp_path):
    assert_gguf_error(tmp_path, "directory")
    assert_gguf_error(tmp_path / "missing.gguf", "cannot read")
    write(tmp_path, "plain", b"x")
    assert_gguf_error(tmp_path / "plain" / "below.gguf", "cannot read")
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    assert_gguf_error(fifo, "regular file")  # and does not block waiting for a writer


def test_unreadable_file(tmp_path):
    path = write(tmp_path, "locked.gguf", small_gguf())
    path.chmod(0)
    if os.geteuid() != 0:
        assert_gguf_error(path, "cannot read")
        return
    # Root reads any file whatever its mode; a child without the two capabilities that let it
    # (setpriv drops them from its bounding set) meets the permission check a user would.
    code = ("import sys; from hearth.engine.gguf import GGUFFile; from hearth.engine.errors import GGUFError\n"
            "try: GGUFFile.open(sys.argv[1])\n"
            "except GGUFError as e: print('GGUFError:', e); sys.exit(0)\n"
            "sys.exit(3)\n")
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                        sys.executable, "-c", code, str(path)], cwd=root, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cannot read" in r.stdout and "locked.gguf" in r.stdout


@pytest.fixture(scope="module")
def structure(oracle):
    """Byte positions inside the default model where a cut lands in each part of the file."""
    fields = [f for k, f in oracle.fields.items() if not k.startswith("GGUF.")]
    tokens = oracle.fields["tokenizer.ggml.tokens"]
    infos_start = oracle.tensors[0].field.offset
    return {
        "header": [1, 3, 4, 5, 7, 8, 12, 16, 20, 23],
        "metadata": sorted({fields[0].offset - 1, fields[0].offset + 3, fields[0].offset + 8 + 5,
                            *(f.offset + 9 for f in fields[::4]), tokens.offset + 40,
                            tokens.offset + 50_000, tokens.offset + 400_000, infos_start - 1}),
        "tensor infos": [infos_start + 1, infos_start + 8, infos_start + 30,
                         oracle.tensors[100].field.offset + 20, oracle.data_offset - 1],
    }


@pytest.mark.parametrize("part", ["header", "metadata", "tensor infos"])
def test_truncated_copies_of_the_default_model(tmp_path, default_model_path, structure, part):
    with open(default_model_path, "rb") as f:
        head = f.read(4 << 20)  # the header is < 2 MB; no need to copy the weights
    for cut in structure[part]:
        path = write(tmp_path, f"cut-{cut}.gguf", head[:cut])
        assert_gguf_error(path, "truncated")
        path.unlink()


def test_truncated_in_the_tensor_data(tmp_path, default_model_path, model):
    with open(default_model_path, "rb") as f:
        head = f.read(model.data_offset + 5000)
    for cut in [model.data_offset, model.data_offset + 1, model.data_offset + 4999]:
        msg = assert_gguf_error(write(tmp_path, f"cut-{cut}.gguf", head[:cut]), "beyond the end of the file")
        assert "token_embd.weight" in msg  # the first tensor is the one cut off
    # Full copies missing only their last bytes: a tensor that runs past the end is named.
    raw = default_model_path.read_bytes()
    for missing in [1, 4096, 1 << 20]:
        path = write(tmp_path, f"minus-{missing}.gguf", raw[:-missing])
        msg = assert_gguf_error(path, "beyond the end of the file")
        cut_off = [t.name for t in model.tensors.values()
                   if model.data_offset + t.offset + t.n_bytes > len(raw) - missing]
        assert cut_off and any(f"tensor {name} " in msg for name in cut_off), msg
        path.unlink()


def test_corrupted_copies_of_the_default_model(tmp_path, default_model_path, oracle):
    """One full copy, patched in place and restored between cases: each corruption is refused
    with a message naming the file and what is wrong."""
    path = tmp_path / "corrupt.gguf"
    path.write_bytes(default_model_path.read_bytes())
    first_kv = oracle.fields["general.architecture"].offset
    # tokens: its value type (u32), then item type (u32), count (u64), first string length (u64)
    # At `tokens`: value type u32 | item type u32 | count u64 | first string's length u64 ...
    tokens = oracle.fields["tokenizer.ggml.tokens"].offset + 8 + len("tokenizer.ggml.tokens")
    t0 = oracle.tensors[0]  # token_embd.weight [576, 49152] Q8_0
    t0_type = t0.field.offset + 8 + len(t0.name) + 4 + 8 * len(t0.shape)
    cases = [  # (position, new bytes, exception, words the message must hold)
        (0, b"GGJT", GGUFError, ["not a GGUF file"]),
        (4, struct.pack("<I", 1), GGUFError, ["version 1"]),
        (8, struct.pack("<Q", 2**40), GGUFError, ["absurd"]),
        (16, struct.pack("<Q", 2**50), GGUFError, ["absurd"]),
        (first_kv, struct.pack("<Q", 2**60), GGUFError, ["truncated"]),
        (first_kv + 8 + 20, struct.pack("<I", 77), GGUFError, ["general.architecture", "unknown value type 77"]),
        (tokens + 8, struct.pack("<Q", 2**62), GGUFError, ["tokenizer.ggml.tokens", "more than the file holds"]),
        (tokens + 16, struct.pack("<Q", 2**40), GGUFError, ["string 0 of tokenizer.ggml.tokens", "truncated"]),
        (t0_type, struct.pack("<I", 40), UnsupportedModelError, ["token_embd.weight", "NVFP4"]),
        (t0_type, struct.pack("<I", 17), GGUFError, ["token_embd.weight", "block size"]),  # IQ2_XS, 256 ∤ 576
        (t0_type, struct.pack("<I", 0), GGUFError, ["token_embd.weight", "beyond the end"]),  # as F32: 4x bigger
        (t0_type + 4, struct.pack("<Q", 96 << 20), GGUFError, ["token_embd.weight", "beyond the end"]),
        (t0_type + 4, struct.pack("<Q", 96), GGUFError, ["token_embd.weight", "overlap"]),
        (t0_type + 4, struct.pack("<Q", 8), GGUFError, ["token_embd.weight", "not aligned"]),
    ]
    with open(path, "r+b") as f:
        for pos, patch, exc, words in cases:
            f.seek(pos)
            saved = f.read(len(patch))
            f.seek(pos)
            f.write(patch)
            f.flush()
            msg = assert_gguf_error(path, exc=exc)
            assert all(w in msg for w in words), (pos, msg)
            f.seek(pos)
            f.write(saved)
            f.flush()
    assert len(GGUFFile.open(path).tensors) == 272  # restored intact
    path.unlink()


def test_tensor_data_out_of_bounds(tmp_path):
    kvs = [gkv("general.architecture", STRING, "llama")]
    data = b"\0" * 64
    path = write(tmp_path, "oob.gguf", build(kvs, [ginfo("w", [16], 0, 32)], data))  # needs 32..96
    assert_gguf_error(path, "w data")
    path = write(tmp_path, "far.gguf", build(kvs, [ginfo("w", [4], 0, 2**63)], data))
    assert_gguf_error(path, "beyond the end")
    path = write(tmp_path, "huge.gguf", build(kvs, [ginfo("w", [2**40, 2**40, 2**40], 0, 0)], data))
    assert_gguf_error(path, "w")


def test_tensor_info_errors(tmp_path):
    kvs = [gkv("general.architecture", STRING, "llama")]
    data = b"\0" * 256
    cases = {
        "unaligned": ([ginfo("w", [4], 0, 4)], "not aligned"),
        "dims0": ([ginfo("w", [], 0, 0)], "dimensions"),
        "dims9": ([ginfo("w", [1] * 9, 0, 0)], "dimensions"),
        "zero": ([ginfo("w", [4, 0], 0, 0)], "impossible shape"),
        "rowlen": ([ginfo("w", [40], 8, 0)], "block size"),
        "twice": ([ginfo("w", [4], 0, 0), ginfo("w", [4], 0, 32)], "twice"),
        "overlap": ([ginfo("w", [16], 0, 0), ginfo("v", [4], 0, 32)], "overlap"),
        "badname": ([gstr(b"\xff\xfe") + struct.pack("<IQIQ", 1, 4, 0, 0)], "UTF-8"),
    }
    for name, (infos, match) in cases.items():
        assert_gguf_error(write(tmp_path, f"{name}.gguf", build(kvs, infos, data)), match)
    path = write(tmp_path, "type.gguf", build(kvs, [ginfo("blk.0.q", [32], 200, 0)], data))
    msg = assert_gguf_error(path, "blk.0.q", exc=UnsupportedModelError)
    assert "200" in msg


def test_unknown_value_types(tmp_path):
    for vtype in [13, 99, 2**32 - 1]:
        bad = gstr("my.key") + struct.pack("<I", vtype) + b"\0" * 16
        assert_gguf_error(write(tmp_path, f"vt{vtype}.gguf", build([bad], [])), "unknown value type")
    bad = gstr("my.arr") + struct.pack("<IIQ", ARRAY, 42, 1) + b"\0" * 16
    assert_gguf_error(write(tmp_path, "item.gguf", build([bad], [])), "unknown item type")


def test_absurd_counts(tmp_path):
    ok_kv = gkv("general.architecture", STRING, "llama")
    cases = {
        "tensors": (build([ok_kv], [], n_tensors=2**63), "absurd"),
        "kvs": (build([ok_kv], [], n_kv=2**64 - 1), "absurd"),
        "kvs_small": (build([ok_kv], [], n_kv=1000), "truncated"),
        "strlen": (build([gstr("k") + struct.pack("<IQ", STRING, 2**64 - 1)], []), "truncated"),
        "keylen": (build([struct.pack("<Q", 2**62) + b"abc"], []), "truncated"),
        "arr_u8": (build([gstr("k") + struct.pack("<IIQ", ARRAY, UINT8, 2**63)], []), "truncated"),
        "arr_i64": (build([gstr("k") + struct.pack("<IIQ", ARRAY, INT64, 2**61)], []), "truncated"),
        "arr_str": (build([gstr("k") + struct.pack("<IIQ", ARRAY, STRING, 2**60)], []), "more than the file"),
        "arr_str_len": (build([gstr("k") + struct.pack("<IIQQ", ARRAY, STRING, 1, 2**64 - 1)], []), "truncated"),
        "arr_arr": (build([gstr("k") + struct.pack("<IIQ", ARRAY, ARRAY, 2**62)], []), "more than the file"),
        "tensor_name": (build([ok_kv], [struct.pack("<Q", 2**63)]), "truncated"),
    }
    for name, (data, match) in cases.items():
        assert_gguf_error(write(tmp_path, f"{name}.gguf", data + b"\0" * 64), match)


def test_deeply_nested_arrays_are_refused_not_a_recursion_error(tmp_path):
    nest = b"".join(struct.pack("<IQ", ARRAY, 1) for _ in range(5000)) + struct.pack("<IQ", UINT8, 0)
    data = build([gstr("k") + struct.pack("<I", ARRAY) + nest], [])
    assert_gguf_error(write(tmp_path, "nest.gguf", data), "nests arrays")


def test_metadata_errors(tmp_path):
    dup = [gkv("a", UINT8, 1), gkv("a", UINT8, 2)]
    assert_gguf_error(write(tmp_path, "dup.gguf", build(dup, [])), "twice")
    badkey = gstr(b"\xc3\x28") + struct.pack("<IB", UINT8, 1)
    assert_gguf_error(write(tmp_path, "utf8.gguf", build([badkey], [])), "UTF-8")


@pytest.mark.parametrize("alignment", [0, 3, 48, 100])
def test_alignment_must_be_a_power_of_two(tmp_path, alignment):
    kvs = [gkv("general.alignment", UINT32, alignment)]
    path = write(tmp_path, f"align{alignment}.gguf", build(kvs, [ginfo("w", [4], 0, 0)], b"\0" * 16))
    assert_gguf_error(path, "power of two")


def test_other_alignments(tmp_path):
    kvs = [gkv("general.alignment", UINT32, 64)]
    data = build(kvs, [ginfo("w", [4], 0, 0), ginfo("v", [2], 0, 64)], b"\1" * 72, alignment=64)
    g = GGUFFile.open(write(tmp_path, "a64.gguf", data))
    assert g.alignment == 64 and g.data_offset % 64 == 0
    assert g.tensors["v"].data.size == 8
    kvs = [gkv("general.alignment", STRING, "32")]
    assert_gguf_error(write(tmp_path, "astr.gguf", build(kvs, [])), "power of two")


# ---------------------------------------------------------------------------------------------
# Fuzz: flipped bytes anywhere before the data section


SMALL = small_gguf()
SMALL_DATA_OFFSET = len(SMALL) - (32 + 68)
_FUZZ_DIR = Path(tempfile.mkdtemp(prefix="hearth-gguf-fuzz-"))


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, SMALL_DATA_OFFSET - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.one_of(st.just(len(SMALL)), st.integers(0, len(SMALL))))
def test_fuzz_flipped_header_bytes_open_or_raise_gguf_errors(flips, cut):
    """Up to six bytes before the data section set to random values, and half the time the file
    also cut short: it opens, or fails with one of our errors naming the file, within 2 s."""
    data = bytearray(SMALL)
    for pos, val in flips:
        data[pos] = val
    path = _FUZZ_DIR / "fuzz.gguf"
    path.write_bytes(bytes(data[:cut]))
    try:
        g = GGUFFile.open(path)
    except (GGUFError, UnsupportedModelError) as e:
        assert path.name in str(e)
        return
    # It opened: everything it claims must be readable.
    for v in g.metadata.values():
        if isinstance(v, StringArray):
            v.tolist()
    for t in g.tensors.values():
        assert t.data.size == t.n_bytes
        assert g.data_offset + t.offset + t.n_bytes <= g.file_size
    assert len(g.header_bytes) == g.data_offset


def test_from_header_reads_the_start_of_a_file(reference_dir):
    path = reference_dir / "tiny" / "llama" / "tiny-llama.gguf"
    whole = GGUFFile.open(path)
    data = path.read_bytes()
    head = GGUFFile.from_header("tiny-llama.gguf", data[:whole.data_offset], len(data))
    assert head.metadata_types == whole.metadata_types and head.file_size == whole.file_size
    assert [(t.name, t.shape, t.type, t.offset, t.n_bytes) for t in head.tensors.values()] == [
        (t.name, t.shape, t.type, t.offset, t.n_bytes) for t in whole.tensors.values()]
    assert all(len(t.data) == 0 for t in head.tensors.values())
    assert head.metadata_spans == whole.metadata_spans
    with pytest.raises(GGUFError, match="truncated"):
        GGUFFile.from_header("tiny-llama.gguf", data[:whole.data_offset // 2], len(data))
    with pytest.raises(GGUFError, match="beyond the end of the file"):
        GGUFFile.from_header("tiny-llama.gguf", data[:whole.data_offset], len(data) - 4096)
