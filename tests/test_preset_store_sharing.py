"""app/store/preset_store.py with two stores on one file (as two Hearth processes would have): every save
re-reads the file under a lock and merges, so neither side's changes are lost; corrupt files moved
aside never overwrite each other; temporary files of dead writers go at load."""

from __future__ import annotations

import os
import time

from hearth.app.store.preset_store import PresetStore
from hearth.engine.chat.preset_format import Preset


def ids(store: PresetStore) -> list[str]:
    return [p.id for p in store.presets]


def test_presets_added_by_two_stores_are_both_kept(tmp_path):
    path = tmp_path / "presets.json"
    a, b = PresetStore(path), PresetStore(path)
    shipped = ids(a)
    a.add(Preset("from-a", "From A", "a"))
    b.add(Preset("from-b", "From B", "b"))                # b never saw from-a: it must not drop it
    assert ids(PresetStore(path)) == shipped + ["from-b", "from-a"]
    a.update(Preset("from-a", "From A, edited", "a2"))    # and a keeps b's
    assert {p.id: p.name for p in PresetStore(path).presets}["from-b"] == "From B"
    b.move("from-b", 0)
    fresh = PresetStore(path)
    assert ids(fresh)[0] == "from-b" and fresh.get("from-a").name == "From A, edited"


def test_deletions_and_edits_on_either_side_are_kept(tmp_path):
    path = tmp_path / "presets.json"
    a, b = PresetStore(path), PresetStore(path)
    a.add(Preset("x", "X", "x"))
    a.add(Preset("y", "Y", "y"))
    b = PresetStore(path)
    a.remove("x")
    edited = b.get("y").copy()
    edited.name = "Y edited"
    b.update(edited)                                      # b still holds x, untouched: a's deletion stands
    final = PresetStore(path)
    assert final.get("x") is None and final.get("y").name == "Y edited"


def test_two_corrupt_files_in_one_second_are_both_kept(tmp_path):
    path = tmp_path / "presets.json"
    for content in ("{not json", "{still not json"):
        path.write_text(content)
        store = PresetStore(path)
        assert "could not be read" in store.notice
    aside = sorted(p.read_text() for p in tmp_path.glob("presets.corrupt-*.json"))
    assert aside == ["{not json", "{still not json"]


def test_temporary_files_of_a_dead_writer_are_removed_at_load(tmp_path):
    path = tmp_path / "presets.json"
    PresetStore(path)
    left = tmp_path / ".presets.json.k2j3.tmp"
    left.write_text("half a write")
    old = time.time() - 120
    os.utime(left, (old, old))
    PresetStore(path)
    assert not left.exists()
