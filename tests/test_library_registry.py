"""hearth.engine.library.registry: the local models list (models folder + opened files), remove, delete."""

from __future__ import annotations

import json
import os

import pytest

from hearth.engine.errors import EngineError
from hearth.engine.library.registry import ModelRegistry, default_models_dir
from hearth.engine.library.split_gguf import split_model
from hub_fixtures import _no_hf_login, tiny_models  # noqa: F401


@pytest.fixture
def reg(tmp_path):
    r = ModelRegistry()
    r.set_models_dir(tmp_path / "models")
    return r


def _copy(src, dst):
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())
    return dst


def test_default_models_dir_is_in_the_data_dir(tmp_path):
    assert default_models_dir() == tmp_path / "data" / "models"  # HEARTH_DATA_DIR from conftest
    assert ModelRegistry().models_dir == default_models_dir()


def test_lists_folder_models_and_opened_files(reg, tiny_models, tmp_path):
    a = _copy(tiny_models["llama"], reg.models_dir / "alice" / "Tiny" / "tiny-llama-Q8_0.gguf")
    elsewhere = _copy(tiny_models["qwen3"], tmp_path / "elsewhere" / "tiny-qwen3.gguf")
    (reg.models_dir / "notes.txt").write_text("not a model")
    assert [m.path for m in reg.models()] == [a]
    reg.add_opened(elsewhere)
    models = {m.path.name: m for m in reg.models()}
    assert set(models) == {"tiny-llama-Q8_0.gguf", "tiny-qwen3.gguf"}
    m = models["tiny-qwen3.gguf"]
    assert (m.source, m.facts.architecture, m.facts.size, m.facts.runs) == ("opened", "qwen3", elsewhere.stat().st_size, True)
    assert models["tiny-llama-Q8_0.gguf"].source == "folder"


def test_last_use_orders_the_list_and_survives_a_restart(reg, tiny_models):
    a = _copy(tiny_models["llama"], reg.models_dir / "a.gguf")
    b = _copy(tiny_models["qwen2"], reg.models_dir / "b.gguf")
    reg.mark_used(b, when=100.0)
    reg.mark_used(a, when=200.0)
    again = ModelRegistry()
    assert again.models_dir == reg.models_dir
    assert [(m.path, m.last_used) for m in again.models()] == [(a, 200.0), (b, 100.0)]


def test_remove_from_list_keeps_the_file(reg, tiny_models, tmp_path):
    a = _copy(tiny_models["llama"], reg.models_dir / "a.gguf")
    o = _copy(tiny_models["qwen2"], tmp_path / "o.gguf")
    reg.add_opened(o)
    reg.remove(a)
    reg.remove(o)
    assert reg.models() == [] and a.exists() and o.exists()
    assert ModelRegistry().models() == []  # remembered
    reg.add_opened(a)  # opening it again brings it back
    assert [m.path for m in reg.models()] == [a]


def test_delete_removes_the_file_and_empty_folders(reg, tiny_models):
    a = _copy(tiny_models["llama"], reg.models_dir / "alice" / "Tiny" / "a.gguf")
    reg.add_downloaded(a, "alice/Tiny")
    reg.delete(a)
    assert not a.exists() and not (reg.models_dir / "alice").exists() and reg.models_dir.is_dir()
    assert reg.models() == []


def test_a_split_model_is_listed_once_and_deleted_whole(reg, tiny_models):
    src = _copy(tiny_models["llama"], reg.models_dir / "m.gguf")
    parts = split_model(src, 3)
    src.unlink()
    [m] = reg.models()
    assert m.path == parts[0] and m.facts.runs is False and "split" in m.facts.reason
    reg.delete(m.path)
    assert not any(p.exists() for p in parts)


def test_facts_are_cached_until_the_file_changes(reg, tiny_models, monkeypatch):
    import hearth.engine.library.registry as registry
    a = _copy(tiny_models["llama"], reg.models_dir / "a.gguf")
    reg.models()
    calls = []
    real = registry.read_facts
    monkeypatch.setattr(registry, "read_facts", lambda p: calls.append(p) or real(p))
    ModelRegistry().models()
    assert calls == []
    a.write_bytes(tiny_models["qwen2"].read_bytes())
    os.utime(a, ns=(1, 1))
    [m] = ModelRegistry().models()
    assert calls == [a] and m.facts.architecture == "qwen2"


def test_a_corrupt_registry_is_set_aside(tmp_path, tiny_models):
    f = tmp_path / "data" / "models.json"
    f.parent.mkdir(parents=True)
    f.write_text("{not json")
    r = ModelRegistry()
    _copy(tiny_models["llama"], r.models_dir / "a.gguf")
    assert len(r.models()) == 1
    assert (tmp_path / "data" / "models.json.bad").read_text() == "{not json"
    assert json.loads(f.read_text())["version"] == 1


def test_an_unwritable_models_dir_is_refused(reg, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(EngineError, match="cannot be the models folder"):
        reg.set_models_dir(blocker / "sub")
    assert reg.models_dir == tmp_path / "models"
