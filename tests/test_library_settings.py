"""hearth.engine.library.model_settings: per-model context length, backend and sampling, remembered."""

from __future__ import annotations

import json

import pytest

from hearth.engine.errors import EngineError
from hearth.engine.library.model_facts import read_facts
from hearth.engine.library.model_settings import ModelSettingsStore
from hearth.engine.sampling import Sampling
from hub_fixtures import _no_hf_login, write_gguf  # noqa: F401


def test_settings_survive_a_restart_in_a_versioned_file(tmp_path):
    s = ModelSettingsStore()
    m = tmp_path / "m.gguf"
    s.set_n_ctx(m, 2048, trained=8192)
    s.set_backend(m, "gpu")
    again = ModelSettingsStore()
    assert (again.get(m).n_ctx, again.get(m).backend) == (2048, "gpu")
    d = json.loads((tmp_path / "data" / "model_settings.json").read_text())
    assert d["version"] == 1 and d["models"][str(m.resolve())]["n_ctx"] == 2048
    assert again.get(tmp_path / "other.gguf").n_ctx is None


def test_context_length_is_bounded_by_the_trained_length(tmp_path):
    s = ModelSettingsStore()
    with pytest.raises(EngineError, match="more than the model was trained for \\(4096\\)"):
        s.set_n_ctx(tmp_path / "m.gguf", 8192, trained=4096)
    with pytest.raises(EngineError, match="at least 16"):
        s.set_n_ctx(tmp_path / "m.gguf", 0)
    assert s.get(tmp_path / "m.gguf").n_ctx is None
    with pytest.raises(EngineError, match="backend 'tpu'"):
        s.set_backend(tmp_path / "m.gguf", "tpu")


def test_sampling_layers_hearth_then_gguf_then_user(tmp_path):
    p = write_gguf(tmp_path / "m.gguf", extra={"general.sampling.temp": 0.6, "general.sampling.top_k": 20})
    gguf_defaults = read_facts(p).sampling
    s = ModelSettingsStore()
    base = s.sampling_for(p, gguf_defaults)
    assert (base.temperature, base.top_k, base.top_p) == (pytest.approx(0.6), 20, Sampling().top_p)
    s.set_sampling(p, Sampling(temperature=0.6, top_k=20, top_p=0.5), gguf_defaults)
    assert s.get(p).sampling == {"top_p": 0.5}  # only what differs from the model's own defaults
    after = ModelSettingsStore().sampling_for(p, gguf_defaults)
    assert (after.temperature, after.top_k, after.top_p) == (pytest.approx(0.6), 20, 0.5)


def test_an_unreadable_or_other_version_file_starts_empty(tmp_path):
    f = tmp_path / "data" / "model_settings.json"
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps({"version": 99, "models": {}}))
    s = ModelSettingsStore()
    assert s.get(tmp_path / "m.gguf").n_ctx is None
    assert (f.parent / "model_settings.json.bad").exists()
    s.set_n_ctx(tmp_path / "m.gguf", 512)
    assert ModelSettingsStore().get(tmp_path / "m.gguf").n_ctx == 512
