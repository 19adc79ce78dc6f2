"""hearth.app.store.chat_store, app.preset_store, app.tool_schema: the app's Qt-free storage."""

from __future__ import annotations

import json
import sqlite3

import pytest

from hearth.app.store.chat_store import SCHEMA_VERSION, ChatStore, ChatStoreError, Message
from hearth.app.store.preset_store import PresetStore
from hearth.engine.chat.preset_format import FORMAT, Preset, PresetError, check_sampling
from hearth.engine.tools import ToolSchemaError as ToolError
from hearth.engine.tools import normalize_tool_definition as validate_tool
from hearth.engine.tools import validate_tool_set as validate_tools

CALC = {"type": "function", "function": {"name": "calculator", "description": "math",
                                         "parameters": {"type": "object",
                                                        "properties": {"expression": {"type": "string"}},
                                                        "required": ["expression"]}}}


# -- chats --------------------------------------------------------------------------------------------
def test_chats_survive_reopen_with_messages_and_stats(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    c = s.create_chat("First", "assistant")
    s.add_message(c.id, Message("user", "hello"))
    s.add_message(c.id, Message("assistant", "hi", stats={"decode_tps": 30.5}, model="m"))
    s.close()
    s = ChatStore(tmp_path / "c.db")
    assert [ch.title for ch in s.chats()] == ["First"]
    msgs = s.messages(c.id)
    assert [(m.role, m.content) for m in msgs] == [("user", "hello"), ("assistant", "hi")]
    assert msgs[1].stats == {"decode_tps": 30.5} and msgs[1].model == "m"
    assert s.version == SCHEMA_VERSION


def test_truncate_from_removes_the_message_and_all_after(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    c = s.create_chat()
    ids = [s.add_message(c.id, Message("user" if i % 2 == 0 else "assistant", str(i))).id for i in range(5)]
    s.truncate_from(c.id, ids[2])
    assert [m.content for m in s.messages(c.id)] == ["0", "1"]


def test_delete_is_undoable_until_reopen(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    a, _ = s.create_chat("a"), s.create_chat("b")
    s.delete_chat(a.id)
    assert [c.title for c in s.chats()] == ["b"]
    s.undelete_chat(a.id)
    assert {c.title for c in s.chats()} == {"a", "b"}
    s.delete_chat(a.id)
    s.close()
    s = ChatStore(tmp_path / "c.db")
    assert [c.title for c in s.chats()] == ["b"]
    assert s.chat(a.id) is None


def test_search_finds_titles_and_message_text(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    a, b = s.create_chat("Cooking"), s.create_chat("Other")
    s.add_message(b.id, Message("user", "How do I bake bread?"))
    assert set(s.search("cook")) == {a.id}
    assert set(s.search("BREAD")) == {b.id}


def test_migrates_a_version_1_database(tmp_path):
    db = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    from hearth.app.store.chat_store import MIGRATIONS
    MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO chats(title, preset_id, created, updated) VALUES ('old', '', 0, 0)")
    db.execute("INSERT INTO messages(chat_id, seq, role, content, created) VALUES (1, 0, 'user', 'x', 0)")
    db.close()
    s = ChatStore(tmp_path / "c.db")
    assert s.version == SCHEMA_VERSION
    assert [c.title for c in s.chats()] == ["old"]
    assert s.messages(1)[0].tool_calls == []


def test_refuses_a_newer_database(tmp_path):
    db = sqlite3.connect(tmp_path / "c.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(ChatStoreError, match="newer"):
        ChatStore(tmp_path / "c.db")


def test_an_unreadable_database_is_moved_aside_with_a_notice(tmp_path):
    (tmp_path / "c.db").write_bytes(b"this is not sqlite" * 100)
    s, notice = ChatStore.open_or_move_aside(tmp_path / "c.db")
    aside = list(tmp_path.glob("c.corrupt-*.db"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not sqlite")
    assert str(aside[0]) in notice
    assert s.chats() == [] and s.create_chat("fresh").id
    s2, notice2 = ChatStore.open_or_move_aside(tmp_path / "c.db")
    assert notice2 == "" and [c.title for c in s2.chats()] == ["fresh"]


def test_a_failed_write_rolls_back(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    c = s.create_chat()
    with pytest.raises(sqlite3.IntegrityError):
        s.add_message(c.id + 99, Message("user", "orphan"))   # foreign key: no such chat
    assert s.messages(c.id + 99) == []
    s.add_message(c.id, Message("user", "fine"))
    assert len(s.messages(c.id)) == 1


# -- tools --------------------------------------------------------------------------------------------
def test_valid_tools_are_normalised():
    bare = {"name": "now", "description": "time", "parameters": {"type": "object", "properties": {}}}
    out = validate_tools([CALC, bare])
    assert out[1] == {"type": "function", "function": bare}


@pytest.mark.parametrize("tool, error", [
    ({"type": "function", "function": {"name": "bad name"}}, "not a valid function name"),
    ({"name": "f", "parameters": {"type": "strin"}}, "'strin' is not a JSON Schema type"),
    ({"name": "f", "parameters": {"type": "array"}}, "must be an object schema"),
    ({"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}},
                                  "required": ["b"]}}, "b not in properties"),
    ({"name": "f", "parameters": {"type": "object", "properties": {"a": 3}}}, "properties.a"),
    ({"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}},
     "not a valid regular expression"),
    ({"name": "f", "paramters": {}}, "unknown field"),
    ("calculator", "expected an object"),
])
def test_bad_tools_are_refused_with_where_and_why(tool, error):
    with pytest.raises(ToolError, match=error):
        validate_tool(tool)


def test_duplicate_tool_names_are_refused():
    with pytest.raises(ToolError, match="defined twice"):
        validate_tools([CALC, CALC])


# -- presets ------------------------------------------------------------------------------------------
def test_first_run_gets_the_shipped_presets_with_valid_tools(tmp_path):
    s = PresetStore(tmp_path / "presets.json")
    assert len(s.presets) >= 3 and s.notice == ""
    assert any(p.tools for p in s.presets)
    doc = json.loads((tmp_path / "presets.json").read_text())
    assert doc["format"] == FORMAT and doc["version"] == 1


def test_crud_reorder_and_persist(tmp_path):
    path = tmp_path / "presets.json"
    s = PresetStore(path)
    p = s.add(Preset("mine", "Mine", "Be terse.", [CALC], check_sampling({"temperature": 0})))
    d = s.duplicate(p.id)
    assert d.name == "Mine (copy)" and d.id != p.id and s.index(d.id) == s.index(p.id) + 1
    p.name = "Renamed"
    s.update(p)
    s.move(p.id, 0)
    s.remove(d.id)
    s2 = PresetStore(path)
    assert s2.presets[0].name == "Renamed" and s2.presets[0].tools == [CALC]
    assert s2.get(d.id) is None
    assert s2.presets[0].sampling["temperature"] == 0.0


def test_update_with_a_bad_tool_saves_nothing(tmp_path):
    path = tmp_path / "presets.json"
    s = PresetStore(path)
    before = path.read_text()
    p = s.presets[0].copy()
    p.tools = [{"name": "x y"}]
    with pytest.raises(PresetError, match="not a valid function name"):
        s.update(p)
    assert path.read_text() == before


def test_export_import_round_trip_gives_new_ids_on_collision(tmp_path):
    s = PresetStore(tmp_path / "presets.json")
    s.export([s.presets[0].id, s.presets[1].id], tmp_path / "out.json")
    added = s.import_file(tmp_path / "out.json")
    assert [p.name for p in added] == [s.presets[0].name, s.presets[1].name]
    assert len({p.id for p in s.presets}) == len(s.presets)


def test_import_of_an_invalid_file_adds_nothing(tmp_path):
    s = PresetStore(tmp_path / "presets.json")
    n = len(s.presets)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": FORMAT, "version": 1,
                               "presets": [{"name": "ok"}, {"name": "bad", "tools": [{"name": "x y"}]}]}))
    with pytest.raises(PresetError):
        s.import_file(bad)
    assert len(s.presets) == n


@pytest.mark.parametrize("content", ["{ not json", json.dumps({"format": "other"}),
                                     json.dumps({"format": FORMAT, "version": 99, "presets": []}),
                                     "\xff\xfe garbage"])
def test_corrupt_file_is_moved_aside_with_a_notice(tmp_path, content):
    path = tmp_path / "presets.json"
    path.write_text(content, encoding="latin-1")
    s = PresetStore(path)
    aside = list(tmp_path.glob("presets.corrupt-*.json"))
    assert len(aside) == 1 and aside[0].read_text(encoding="latin-1") == content
    assert "moved to" in s.notice and str(aside[0]) in s.notice
    assert s.presets  # the shipped presets
    assert json.loads(path.read_text())["format"] == FORMAT


def test_partly_invalid_file_keeps_the_valid_presets(tmp_path):
    path = tmp_path / "presets.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 1, "presets": [
        {"id": "good", "name": "Good"}, {"id": "bad", "name": ""}]}))
    s = PresetStore(path)
    assert [p.id for p in s.presets] == ["good"]
    assert "kept 1 preset" in s.notice
    assert list(tmp_path.glob("presets.corrupt-*.json"))


def test_sampling_is_checked():
    with pytest.raises(PresetError, match="outside"):
        check_sampling({"temperature": 9})
    with pytest.raises(PresetError, match="unknown"):
        check_sampling({"temprature": 1})
    assert check_sampling({"top_k": 5})["top_k"] == 5
