"""MCP client side, engine level: configs and the mcpServers import, tool lists as definitions,
results, and real sessions with the test server (tests/mcp_test_server.py, written with the SDK)
over stdio and streamable HTTP: calls, timeout, result cap, error and image results, a crash mid-call,
a server that hangs at start, a missing command, a tool list that changes between runs, stop."""

from __future__ import annotations

import sys

import mcp_types
import pytest
from mcp_fixtures import HttpServer, alive, pid_of, stdio_config, wait_gone

from hearth.engine.tools import ToolRegistry
from hearth.engine.tools.mcp import McpConfigError, McpError, McpManager, McpServerConfig, hearth_tools, parse_mcp_servers, \
    tool_result
from hearth.engine.tools.parser import ToolCall


# -- configs ----------------------------------------------------------------------------------------

def test_mcp_servers_json_is_imported_with_env_and_token():
    found = parse_mcp_servers("""{"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-files", "/my dir"], "env": {"ROOT": "/tmp x"}},
        "search": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer s3cret"}}}}""")
    (files, t1), (search, t2) = found
    assert files == McpServerConfig("files", "npx", ("-y", "server-files", "/my dir"), {"ROOT": "/tmp x"})
    assert files.kind == "stdio" and t1 == ""
    assert files.command_line() == "ROOT='/tmp x' npx -y server-files '/my dir'"
    assert search.kind == "http" and search.url == "http://127.0.0.1:9/mcp" and t2 == "s3cret"
    assert McpServerConfig.from_json(files.to_json()) == files


@pytest.mark.parametrize("doc, words", [
    ('{"mcpServers": {"a": {"command": "x", "url": "http://h/"}}}', "not both"),
    ('{"mcpServers": {"a": {}}}', "not neither"),
    ('{"mcpServers": {"bad name": {"command": "x"}}}', "must be 1-32"),
    ('{"mcpServers": {"a": {"command": "x", "env": {"K": ["no"]}}}}', "mcpServers.a.env"),
    ('{"mcpServers": {"a": {"url": "ftp://h/"}}}', "http:// or https://"),
    ("not json", "not JSON"),
])
def test_a_bad_server_config_is_refused_with_its_field(doc, words):
    with pytest.raises(McpConfigError, match=words):
        parse_mcp_servers(doc)


# -- tool lists and results -------------------------------------------------------------------------

def test_tool_names_get_the_server_prefix_only_where_they_collide():
    listed = [{"name": "calculator", "description": "theirs", "inputSchema": {"type": "object"}},
              {"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}}},
              {"name": "bad", "inputSchema": {"type": "object", "properties": {"x": {"type": "nope"}}}}]
    taken = {"calculator"}
    tools, notes = hearth_tools("math", listed, taken)
    assert [t.name for t in tools] == ["math_calculator", "add"]
    assert [t.mcp_name for t in tools] == ["calculator", "add"]
    assert tools[0].definition["function"]["description"] == "theirs"
    assert len(notes) == 1 and "'bad' left out" in notes[0]
    more, _ = hearth_tools("other", listed[1:2], taken)      # a second server's `add` collides now
    assert [t.name for t in more] == ["other_add"]


def test_results_text_image_error_and_cap():
    text = mcp_types.TextContent(type="text", text="hello")
    img = mcp_types.ImageContent(type="image", data="AAAA" * 10, mime_type="image/png")
    r = tool_result(mcp_types.CallToolResult(content=[text, img]))
    assert r.content == "hello\n[image: image/png, 30 bytes, not shown to the model]" and not r.is_error
    r = tool_result(mcp_types.CallToolResult(content=[text], is_error=True))
    assert r.is_error and r.content == "Error: hello"
    r = tool_result(mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="x" * 500)]), 100)
    assert r.content.startswith("x" * 100 + "\n[... 400 more characters cut")


def test_a_registry_runs_the_tools_given_runs():
    defs = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}}}]
    reg = ToolRegistry.for_tool_set(defs, {"add": lambda args, ctx: str(args["a"] + 1)})
    assert not reg.needs_user_result("add")
    assert reg.execute(ToolCall("1", "add", {"a": 2}, "")).content == "3"
    assert reg.execute(ToolCall("1", "add", {}, "")).is_error          # the schema still holds


# -- real sessions ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    m = McpManager(tmp_path_factory.mktemp("mcp-logs"))
    yield m
    m.close()


@pytest.fixture(scope="module")
def stdio(manager, tmp_path_factory):
    """One stdio server for the calls that leave it running."""
    tmp = tmp_path_factory.mktemp("mcp-stdio")
    exits = []
    tools = manager.start(stdio_config("calc", tmp), on_exit=lambda n, m: exits.append(m)).result(60)
    return {"tools": tools, "tmp": tmp, "exits": exits}


def test_stdio_server_lists_its_tools_and_adds(manager, stdio):
    assert {t.name for t in stdio["tools"]} == {"add", "slow_echo", "huge", "crash", "picture", "fail", "grow"}
    add = next(t for t in stdio["tools"] if t.name == "add")
    assert add.description == "Add two numbers and return the sum."
    r = manager.call("calc", "add", {"a": 2, "b": 40})
    assert r.content == "42" and not r.is_error
    assert "calc" in manager.running()


def test_a_call_past_the_timeout_is_an_error_and_the_server_goes_on(manager, stdio):
    r = manager.call("calc", "slow_echo", {"text": "late", "seconds": 5}, timeout_s=1)
    assert r.is_error and "did not answer within 1 s" in r.content
    assert manager.call("calc", "add", {"a": 1, "b": 1}).content == "2"


def test_a_huge_result_is_cut(manager, stdio):
    r = manager.call("calc", "huge", {"n": 100_000}, max_chars=1000)
    assert r.content.startswith("0123456789" * 100 + "\n[... 99000 more characters cut")


def test_image_and_error_results(manager, stdio):
    assert manager.call("calc", "picture", {}).content.startswith("[image: image/png, ")
    r = manager.call("calc", "fail", {"reason": "why"})
    # the SDK sends only "Error executing tool fail"; the exception's text comes from the server's log
    assert r.is_error and r.content == "Error executing tool fail: ValueError: failed on purpose: why"
    r = manager.call("calc", "no_such_tool", {})
    assert r.is_error


def test_a_server_not_running_is_an_error_result(manager):
    r = manager.call("nobody", "add", {})
    assert r.is_error and "not running" in r.content


def test_a_crash_mid_call_is_an_error_result_and_ends_the_session(manager, tmp_path):
    exits = []
    manager.start(stdio_config("crashy", tmp_path), on_exit=lambda n, m: exits.append((n, m))).result(60)
    pid = pid_of("crashy", tmp_path)
    r = manager.call("crashy", "crash", {})
    assert r.is_error and "crashy" in r.content
    assert wait_gone(pid)
    import time
    end = time.monotonic() + 15
    while not exits and time.monotonic() < end:
        time.sleep(0.05)
    assert exits and exits[0][0] == "crashy" and "ended unexpectedly" in exits[0][1]
    assert "crashy" not in manager.running()


def test_stop_ends_the_process_and_the_tool_list_changes_between_runs(manager, tmp_path):
    cfg = stdio_config("changing", tmp_path)
    first = manager.start(cfg).result(60)
    pid = pid_of("changing", tmp_path)
    assert "multiply" not in {t.name for t in first}
    manager.stop("changing")
    assert wait_gone(pid) and "changing" not in manager.running()
    (tmp_path / "changing.pid").unlink()
    (tmp_path / "changing.state").write_text("v2")
    second = manager.start(cfg).result(60)
    assert {t.name for t in second} == {t.name for t in first} | {"multiply"}
    pid2 = pid_of("changing", tmp_path)
    manager.stop("changing")
    assert wait_gone(pid2)


def test_a_missing_command_fails_to_start_readably(manager):
    with pytest.raises(McpError, match="could not be started.*was not found"):
        manager.start(McpServerConfig("ghost", "/no/such/mcp-server")).result(30)


def test_a_server_that_hangs_at_start_times_out_and_is_stopped(manager, tmp_path):
    pidfile = tmp_path / "hang.pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    with pytest.raises(McpError, match="did not answer within 2 s of starting"):
        manager.start(McpServerConfig("hang", sys.executable, ("-c", code)), timeout_s=2).result(30)
    assert wait_gone(int(pidfile.read_text()))


def test_streamable_http_server_with_a_token(manager):
    srv = HttpServer(token="t0k")
    try:
        with pytest.raises(McpError, match=r"web refused the connection \(HTTP 401\): its token is wrong"):
            manager.start(McpServerConfig("web", url=srv.url), token="wrong").result(60)
        with pytest.raises(McpError, match="its token is missing"):
            manager.start(McpServerConfig("web", url=srv.url)).result(60)
        tools = manager.start(McpServerConfig("web", url=srv.url), token="t0k").result(60)
        assert "add" in {t.name for t in tools}
        assert manager.call("web", "add", {"a": 0.5, "b": 2}).content == "2.5"
        r = manager.call("web", "slow_echo", {"text": "x", "seconds": 4}, timeout_s=1)
        assert r.is_error and "did not answer" in r.content
        manager.stop("web")
        assert "web" not in manager.running()
    finally:
        srv.close()


def test_close_stops_every_server(tmp_path):
    m = McpManager()
    m.start(stdio_config("a", tmp_path)).result(60)
    m.start(stdio_config("b", tmp_path)).result(60)
    pids = [pid_of("a", tmp_path), pid_of("b", tmp_path)]
    assert all(alive(p) for p in pids)
    m.close()
    assert all(wait_gone(p) for p in pids)


# -- presets and the server -------------------------------------------------------------------------

def test_a_preset_names_its_mcp_servers():
    from hearth.engine.chat.preset_format import Preset, PresetError
    p = Preset.from_json({"name": "P", "mcp_servers": ["files", "files", "web"]})
    assert p.mcp_servers == ["files", "web"]
    assert Preset.from_json(p.to_json()).mcp_servers == ["files", "web"]
    assert Preset.from_json({"name": "Q"}).mcp_servers == []
    with pytest.raises(PresetError, match="mcp_servers"):
        Preset.from_json({"name": "P", "mcp_servers": "files"})


def test_the_server_never_loads_the_mcp_client():
    import subprocess
    code = ("import sys, hearth.engine.server, hearth.engine.server.cli, hearth.engine.tools; "
            "bad = [m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'hearth.engine.tools.mcp'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_server_that_dies_while_idle_is_noticed(manager, tmp_path):
    import os
    import signal
    import time
    exits = []
    manager.start(stdio_config("idle", tmp_path), on_exit=lambda n, m: exits.append(m)).result(60)
    os.kill(pid_of("idle", tmp_path), signal.SIGKILL)
    end = time.monotonic() + 30                      # the next ping (every 5 s) finds it gone
    while not exits and time.monotonic() < end:
        time.sleep(0.1)
    assert exits and "idle ended unexpectedly" in exits[0]
    assert "idle" not in manager.running()


def test_a_running_server_lists_its_tools_again(manager, stdio):
    assert "grown" not in {t.name for t in manager.list_tools("calc").result(30)}
    assert manager.call("calc", "grow", {}).content == "ok"
    assert "grown" in {t.name for t in manager.list_tools("calc").result(30)}
    assert manager.call("calc", "grown", {}).content == "grown"
    with pytest.raises(McpError, match="not running"):
        manager.list_tools("nobody").result(30)
