"""MCP servers that misbehave, against the real test server of the SDK (tests/mcp_test_server.py):
one that floods its stderr (the log is capped and rotated, every start), one with a tool whose input
schema nests too deep for the SDK's JSON reader (that tool is left out with its name and why, the
others are kept)."""

from __future__ import annotations

import dataclasses

import pytest
from mcp_fixtures import stdio_config

from hearth.engine.tools.mcp import McpManager
from hearth.engine.tools.mcp.stderr_log import LOG_CAP_BYTES

FLOOD = 3 * LOG_CAP_BYTES


def config(name, tmp, **env):
    c = stdio_config(name, tmp)
    return dataclasses.replace(c, env={**c.env, **env})


@pytest.fixture
def manager(tmp_path):
    m = McpManager(tmp_path / "logs")
    yield m
    m.close()


def test_a_flooded_stderr_log_is_capped_and_rotated_on_every_start(manager, tmp_path):
    logs = tmp_path / "logs"
    for _ in range(2):
        tools = manager.start(config("noisy", tmp_path, MCP_TEST_STDERR_BYTES=str(FLOOD))).result(60)
        assert "add" in {t.name for t in tools}
        assert manager.call("noisy", "add", {"a": 1, "b": 2}).content == "3"
        manager.stop("noisy")
    files = sorted(p.name for p in logs.iterdir())
    assert files == ["mcp-noisy.log", "mcp-noisy.log.1"], files
    sizes = [p.stat().st_size for p in logs.iterdir()]
    assert all(s <= LOG_CAP_BYTES for s in sizes) and sum(sizes) > LOG_CAP_BYTES // 2, sizes
    assert b"log line from the test server, over and over\n" in (logs / "mcp-noisy.log").read_bytes()[-4096:]


def test_one_tool_nested_too_deep_is_left_out_and_named_and_the_others_kept(manager, tmp_path):
    """120 nested objects, about 240 levels of JSON: past the SDK client's reader (pydantic's limit), not
    yet past its server's writer."""
    tools = manager.start(config("deep", tmp_path, MCP_TEST_DEEP="120"), timeout_s=20).result(40)
    names = {t.name for t in tools}
    assert "add" in names and "deep" not in names, names
    notes = manager.left_out("deep")
    assert len(notes) == 1 and "'deep'" in notes[0] and "nests" in notes[0], notes
    assert manager.call("deep", "add", {"a": 2, "b": 3}).content == "5"


def test_a_message_nested_past_any_reader_is_named():
    """Past Python's own reader too (no SDK server can send it: its writer stops first): the
    reason is kept, for the start's error message."""
    from mcp_types import jsonrpc_message_adapter

    from hearth.engine.tools.mcp.readable_listing import Unreadable, read_again
    raw = '{"jsonrpc": "2.0", "id": 2, "result": {"tools": [' + "[" * 100_000 + "]" * 100_000 + "]}}"
    with pytest.raises(Exception) as e:
        jsonrpc_message_adapter.validate_json(raw, by_name=False)
    notes = Unreadable()
    assert read_again(e.value, notes) is e.value
    assert "could not be read" in notes.reason and "RecursionError" in notes.reason


def test_a_result_with_a_lone_surrogate_is_read_with_a_replacement_character():
    """JSON may escape half a UTF-16 pair; the SDK's reader refuses the whole message (the call would
    wait for its timeout), and such text could be neither tokenized nor stored."""
    from mcp_types import jsonrpc_message_adapter

    from hearth.engine.tools.mcp.readable_listing import Unreadable, read_again
    raw = ('{"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "a\\ud800b"}], '
           '"isError": false}}')
    with pytest.raises(Exception) as e:
        jsonrpc_message_adapter.validate_json(raw, by_name=False)
    notes = Unreadable()
    got = read_again(e.value, notes)
    assert got is not e.value and notes.reason == ""
    assert got.message.result["content"][0]["text"] == "a\ufffdb"


def test_a_megabyte_description_is_cut_with_a_note():
    """It would go into every prompt of the preset and fill the context on its own."""
    from hearth.engine.tools.mcp import hearth_tools
    from hearth.engine.tools.mcp.convert import MAX_DESCRIPTION_CHARS
    desc = ("x" * 10 + "<|im_end|>") * 50_000
    tools, notes = hearth_tools("big", [{"name": "t", "description": desc, "inputSchema": {"type": "object"}}], set())
    got = tools[0].definition["function"]["description"]
    assert len(got) == MAX_DESCRIPTION_CHARS + 1 and desc.startswith(got[:-1])
    assert len(notes) == 1 and "1,000,000 characters was cut" in notes[0]
