"""hearth.engine.library.split_gguf: a model cut into gguf-split parts and joined back is the same file."""

from __future__ import annotations

import hashlib

import pytest

from hearth.engine.errors import GGUFError
from hearth.engine.gguf import GGUFFile
from hearth.engine.library.split_gguf import join_split, split_model
from hub_fixtures import tiny_models  # noqa: F401


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_split_then_join_is_byte_identical(tiny_models, tmp_path, arch):
    src = tmp_path / f"tiny-{arch}.gguf"
    src.write_bytes(tiny_models[arch].read_bytes())
    parts = split_model(src, 3, tmp_path)
    assert [p.name for p in parts] == [f"tiny-{arch}-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    heads = [GGUFFile.open(p, check_types=False) for p in parts]
    assert [g.get("split.no") for g in heads] == [0, 1, 2]
    assert {g.get("split.count") for g in heads} == {3}
    n = sum(len(g.tensors) for g in heads)
    assert n == heads[0].get("split.tensors.count") == len(GGUFFile.open(src).tensors)
    assert "general.architecture" in heads[0].metadata and "general.architecture" not in heads[1].metadata
    for g in heads:
        g.close()
    want = _sha(src)
    src.unlink()
    joined = join_split(parts[0])
    assert joined.name == f"tiny-{arch}.gguf" and _sha(joined) == want
    assert not any(p.exists() for p in parts)


def test_a_missing_part_is_named_and_nothing_is_written(tiny_models, tmp_path):
    src = tmp_path / "m.gguf"
    src.write_bytes(tiny_models["llama"].read_bytes())
    parts = split_model(src, 3, tmp_path)
    src.unlink()
    parts[1].unlink()
    with pytest.raises(GGUFError, match="parts missing: m-00002-of-00003.gguf"):
        join_split(parts[0])
    assert not (tmp_path / "m.gguf").exists() and parts[0].exists()


def test_parts_of_different_models_are_refused(tiny_models, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "m.gguf").write_bytes(tiny_models["llama"].read_bytes())
    (b / "m.gguf").write_bytes(tiny_models["qwen2"].read_bytes())
    pa = split_model(a / "m.gguf", 2, a)
    split_model(b / "m.gguf", 3, b)
    (b / "m-00002-of-00003.gguf").rename(a / "m-00002-of-00002.gguf")  # the wrong second part
    with pytest.raises(GGUFError, match="split.no=1, split.count=3"):
        join_split(pa[0], out=a / "joined.gguf")
    assert not (a / "joined.gguf").exists()
