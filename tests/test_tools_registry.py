"""hearth.engine.tools.registry and builtins: the tools a chat can call, run safely, never raising."""

import datetime as dt
import http.server
import os
import threading
import time

import pytest

from hearth.engine.tools import (BUILTIN_TOOLS, MalformedToolCall, ToolCall, ToolContext, ToolRegistry,
                          ToolResult, ToolSchemaError, convert, html_to_text)
from hearth.engine.tools.units import UnitError, find_unit

ALL = ToolRegistry.builtin(list(BUILTIN_TOOLS))


def call(name, **arguments):
    return ToolCall("call_1", name, arguments, raw="")


def run(name, context=None, **arguments):
    return ALL.execute(call(name, **arguments), context or ToolContext())


# ---------------------------------------------------------------------------------------------
# the registry

def test_default_builtins_leave_out_the_tools_that_reach_outside():
    assert ToolRegistry.builtin().names == ["calculator", "current_datetime", "convert_units"]
    assert set(ALL.names) == {"calculator", "current_datetime", "convert_units", "read_file", "fetch_url"}
    with pytest.raises(ValueError, match="no built-in tool 'shell'"):
        ToolRegistry.builtin(["shell"])


def test_calculator_through_the_registry():
    assert run("calculator", expression="23*47") == ToolResult("1081", False)
    r = run("calculator", expression="__import__('os')")
    assert r.is_error and "strings are not allowed" in r.content


def test_execute_checks_arguments_and_names_and_never_raises():
    r = ALL.execute(ToolCall("c", "calculator", {"expr": "1"}, ""))
    assert r.is_error and "'expression' is missing" in r.content
    r = ALL.execute(ToolCall("c", "rm_rf", {}, ""))
    assert r.is_error and "there is no tool named 'rm_rf'" in r.content
    r = ALL.execute(MalformedToolCall("c", "<tool_call>{", "the call is not valid JSON (x)"))
    assert r.is_error and "not valid JSON" in r.content and '"name"' in r.content


def test_a_bug_in_a_tool_is_an_error_result():
    from hearth.engine.tools import Tool

    def broken(args, ctx):
        return 1 / 0

    reg = ToolRegistry([Tool({"type": "function", "function": {"name": "broken", "parameters":
                                                                {"type": "object", "properties": {}}}}, broken)])
    r = reg.execute(ToolCall("c", "broken", {}, ""))
    assert r.is_error and "ZeroDivisionError" in r.content


def test_preset_tool_set_builtins_get_their_code_and_custom_tools_need_the_user():
    preset = [{"type": "function", "function": {"name": "calculator", "description": "maths",
                                                 "parameters": {"type": "object", "properties": {
                                                     "expression": {"type": "string"}},
                                                     "required": ["expression"]}}},
              {"type": "function", "function": {"name": "lookup_order", "description": "An order's status",
                                                 "parameters": {"type": "object", "properties": {
                                                     "order_id": {"type": "string"}},
                                                     "required": ["order_id"]}}}]
    reg = ToolRegistry.for_tool_set(preset)
    assert reg.names == ["calculator", "lookup_order"]
    assert not reg.needs_user_result("calculator") and reg.needs_user_result("lookup_order")
    assert reg.execute(call("calculator", expression="2+2")).content == "4"
    r = reg.execute(call("lookup_order", order_id="A1"))
    assert r.is_error and "no implementation" in r.content
    asked = []
    ctx = ToolContext(ask_user=lambda c: asked.append(c) or "shipped on Monday")
    assert reg.execute(call("lookup_order", order_id="A1"), ctx) == ToolResult("shipped on Monday")
    assert asked[0].arguments == {"order_id": "A1"}
    r = reg.execute(call("lookup_order", order_id="A1"), ToolContext(ask_user=lambda c: None))
    assert r.is_error and "declined" in r.content
    # the arguments are still checked before the user is asked
    assert reg.execute(call("lookup_order"), ctx).is_error and len(asked) == 1


def test_a_broken_preset_tool_set_is_refused():
    with pytest.raises(ToolSchemaError, match=r"tools\[0\].parameters.required"):
        ToolRegistry.for_tool_set([{"name": "f", "parameters": {"type": "object", "required": ["x"]}}])


# ---------------------------------------------------------------------------------------------
# date and time

FIXED = dt.datetime(2026, 3, 29, 0, 30, tzinfo=dt.timezone.utc)   # the night Europe/Paris moves to CEST


def test_datetime_in_utc_and_named_zones_with_a_fixed_clock():
    ctx = ToolContext(now=lambda: FIXED)
    assert run("current_datetime", ctx).content == \
        "Sunday 29 March 2026, 00:30:00 in UTC (ISO 8601: 2026-03-29T00:30:00+00:00)"
    assert "01:30:00 in Europe/Paris (ISO 8601: 2026-03-29T01:30:00+01:00)" in \
        run("current_datetime", ctx, timezone="Europe/Paris").content
    assert "Saturday 28 March 2026, 20:30:00 in America/New_York" in \
        run("current_datetime", ctx, timezone="America/New_York").content
    assert "+09:00" in run("current_datetime", ctx, timezone="Asia/Tokyo").content


def test_datetime_with_the_real_clock_is_now():
    r = run("current_datetime", timezone="UTC")
    stamp = dt.datetime.fromisoformat(r.content.split("ISO 8601: ")[1].rstrip(")"))
    assert abs((dt.datetime.now(dt.timezone.utc) - stamp).total_seconds()) < 5


@pytest.mark.parametrize("tz", ["Mars/Olympus", "../../etc/passwd", "", "Europe/"])
def test_unknown_time_zones_are_errors(tz):
    r = run("current_datetime", timezone=tz)
    if tz == "":       # empty means the default, UTC
        assert not r.is_error
    else:
        assert r.is_error and "unknown time zone" in r.content


# ---------------------------------------------------------------------------------------------
# units

@pytest.mark.parametrize("value, a, b, want", [
    (5, "mi", "km", 8.04672),
    (5, "miles", "kilometres", 8.04672),
    (1, "ft", "in", 12),
    (1, "nmi", "m", 1852),
    (3.5, "pounds", "g", 1587.573295),
    (1, "kg", "lb", 2.2046226218),
    (1, "st", "lb", 14),
    (100, "F", "C", 37.777777778),
    (100, "degrees Fahrenheit", "celsius", 37.777777778),
    (0, "K", "°C", -273.15),
    (-40, "C", "F", -40),
    (1, "gal", "l", 3.785411784),
    (1, "cup", "ml", 236.5882365),
    (3, "tsp", "tbsp", 1),
    (100, "km/h", "mph", 62.137119224),
    (1, "knot", "m/s", 0.514444444),
    (1, "GiB", "MB", 1073.741824),
    (1, "MB", "kB", 1000),
    (8, "Mb", "MB", 1),            # megabits vs megabytes: the case matters for data symbols
    (1, "byte", "bits", 8),
    (2, "days", "hours", 48),
    (90, "min", "h", 1.5),
    (1, "year", "months", 12),
    (1, "week", "s", 604800),
])
def test_conversions(value, a, b, want):
    assert convert(value, a, b) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("a, b, error", [
    ("mi", "kg", "cannot convert length (mi) to mass (kg)"),
    ("furlong", "m", "unknown unit 'furlong'"),
    ("", "m", "the unit is empty"),
])
def test_conversion_errors(a, b, error):
    with pytest.raises(UnitError, match=error.replace("(", r"\(").replace(")", r"\)")):
        convert(1, a, b)


def test_below_absolute_zero_and_bad_values():
    with pytest.raises(UnitError, match="below absolute zero"):
        convert(-500, "C", "K")
    with pytest.raises(UnitError, match="finite number"):
        convert(float("inf"), "m", "km")
    with pytest.raises(UnitError, match="too large"):
        convert(1e308, "PB", "bit")


def test_unit_tool_result_text():
    assert run("convert_units", value=5, from_unit="mi", to_unit="km").content == "5 mi = 8.04672 km"
    r = run("convert_units", value=5, from_unit="mi", to_unit="kg")
    assert r.is_error and "cannot convert" in r.content
    assert find_unit("°F") == ("temperature", "F")
    assert run("convert_units", value=212, from_unit="fahrenheit", to_unit="C").content == "212 °F = 100 °C"


# ---------------------------------------------------------------------------------------------
# read_file: only what the user picked, read-only, capped

@pytest.fixture
def files(tmp_path):
    picked = tmp_path / "notes.txt"
    picked.write_text("line one\nline two\n", encoding="utf-8")
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read", encoding="utf-8")
    big = tmp_path / "big.txt"
    big.write_text("é" * 100_000, encoding="utf-8")         # 200,000 bytes
    binary = tmp_path / "image.bin"
    binary.write_bytes(b"\x89PNG\0\0\0")
    return tmp_path


def test_read_file_reads_a_picked_file_by_path_or_name(files):
    ctx = ToolContext(allowed_files=frozenset({str(files / "notes.txt")}))
    assert run("read_file", ctx, path=str(files / "notes.txt")).content == "line one\nline two\n"
    assert run("read_file", ctx, path="notes.txt").content == "line one\nline two\n"


def test_read_file_refuses_everything_not_picked(files):
    ctx = ToolContext(allowed_files=frozenset({str(files / "notes.txt")}))
    for asked in (str(files / "secret.txt"), "secret.txt", "/etc/passwd",
                  str(files / "sub" / ".." / "secret.txt"), str(files)):
        r = run("read_file", ctx, path=asked)
        assert r.is_error and "is not a file shared in this chat" in r.content, asked
    r = run("read_file", ToolContext(), path=str(files / "notes.txt"))
    assert r.is_error and "no files are shared" in r.content


def test_read_file_resolves_links_so_a_link_to_a_secret_is_not_allowed(files):
    link = files / "innocent.txt"
    os.symlink(files / "secret.txt", link)
    ctx = ToolContext(allowed_files=frozenset({str(files / "notes.txt")}))
    assert run("read_file", ctx, path=str(link)).is_error
    # a link the user picked is followed to its target, which is what they picked
    ctx = ToolContext(allowed_files=frozenset({str(link)}))
    assert run("read_file", ctx, path="innocent.txt").content == "do not read"


def test_read_file_is_capped_and_says_so(files):
    ctx = ToolContext(allowed_files=frozenset({str(files / "big.txt")}), max_file_bytes=1001)
    r = run("read_file", ctx, path="big.txt")
    assert not r.is_error
    body, note = r.content.split("\n[truncated: ")
    assert body == "é" * 500                                # the half character at the cap is dropped
    assert note == "big.txt is 200,000 bytes; only the first 1,001 are shown]"


def test_read_file_refuses_binary_and_missing_files(files):
    ctx = ToolContext(allowed_files=frozenset({str(files / "image.bin"), str(files / "gone.txt")}))
    assert "not a text file" in run("read_file", ctx, path="image.bin").content
    r = run("read_file", ctx, path="gone.txt")
    assert r.is_error and "cannot read" in r.content


@pytest.mark.parametrize("make, what", [(os.mkfifo, "a FIFO (named pipe), not a file"),
                                        (os.mkdir, "a folder, not a file")])
def test_read_file_refuses_a_fifo_or_a_folder_without_blocking(files, make, what):
    odd = files / "odd.txt"
    make(odd)
    ctx = ToolContext(allowed_files=frozenset({str(odd)}))
    result: list = []
    t = threading.Thread(target=lambda: result.append(run("read_file", ctx, path="odd.txt")), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():                                   # unblock the reader so the test run can end
        with open(odd, "wb"):
            pass
        pytest.fail("read_file blocked on a FIFO")
    assert result[0].is_error and f"odd.txt is {what}" in result[0].content


def test_read_file_never_writes(files):
    before = (files / "notes.txt").stat()
    ctx = ToolContext(allowed_files=frozenset({str(files / "notes.txt")}))
    run("read_file", ctx, path="notes.txt")
    after = (files / "notes.txt").stat()
    assert (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)


# ---------------------------------------------------------------------------------------------
# fetch_url: off unless enabled; tested against a loopback server only

def test_fetch_is_disabled_by_default():
    r = run("fetch_url", url="http://127.0.0.1:9/")
    assert r.is_error and "turned off" in r.content


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/redirect?"):
            self.send_response(302)
            self.send_header("Location", self.path.split("?", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        routes = {
            "/page": (200, "text/html; charset=utf-8",
                      "<html><head><title>T</title><style>p{}</style><script>evil()</script></head>"
                      "<body><h1>Hello</h1><p>caf\u00e9 &amp; more</p></body></html>".encode()),
            "/plain": (200, "text/plain", b"just text"),
            "/big": (200, "text/plain", b"x" * 5000),
            "/image": (200, "image/png", b"\x89PNG"),
            "/missing": (404, "text/plain", b"nope"),
        }
        if self.path == "/slow":
            time.sleep(2)
        status, ctype, body = routes.get(self.path, (200, "text/plain", b"slow"))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except BrokenPipeError:     # /slow: the client gave up, as it should
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


LOCAL = frozenset({"127.0.0.1"})     # the test server's host, allowed as a user would allow it


def test_fetch_enabled_reads_text_and_strips_html(server):
    ctx = ToolContext(allow_fetch=True, fetch_allowed_hosts=LOCAL)
    assert run("fetch_url", ctx, url=server + "/plain").content == "HTTP 200, text/plain\n\njust text"
    page = run("fetch_url", ctx, url=server + "/page").content
    assert page == "HTTP 200, text/html\n\nT\nHello\ncafé & more"


def test_fetch_is_size_capped(server):
    r = run("fetch_url", ToolContext(allow_fetch=True, fetch_max_bytes=100, fetch_allowed_hosts=LOCAL),
            url=server + "/big")
    assert r.content.endswith("x" * 100 + "\n[truncated at 100 bytes]")


def test_fetch_errors(server):
    ctx = ToolContext(allow_fetch=True, fetch_timeout_s=0.5, fetch_allowed_hosts=LOCAL)
    assert "HTTP 404" in run("fetch_url", ctx, url=server + "/missing").content
    assert "image/png, not text" in run("fetch_url", ctx, url=server + "/image").content
    for url in ("file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)"):
        r = run("fetch_url", ctx, url=url)
        assert r.is_error and "only http and https" in r.content
    start = time.perf_counter()
    r = run("fetch_url", ctx, url=server + "/slow")
    assert r.is_error and "cannot fetch" in r.content and time.perf_counter() - start < 1.9


@pytest.mark.parametrize("host, why", [
    ("127.0.0.1", "a loopback address"), ("localhost", "a loopback address"), ("127.1", "a loopback address"),
    ("2130706433", "a loopback address"), ("0x7f000001", "a loopback address"), ("[::1]", "a loopback address"),
    ("[::ffff:127.0.0.1]", "a loopback address"), ("0.0.0.0", "the unspecified address"),
    ("0", "the unspecified address"), ("[::]", "the unspecified address"),
    ("169.254.169.254", "a cloud metadata service"), ("169.254.1.1", "a link-local address"),
    ("[fe80::1]", "a link-local address"), ("10.0.0.1", "a private network address"),
    ("192.168.1.1", "a private network address"), ("172.16.0.1", "a private network address"),
    ("[fd00::1]", "a private network address"), ("100.64.0.1", "a reserved address"),
])
def test_fetch_refuses_this_machine_and_private_networks(server, host, why):
    port = server.rsplit(":", 1)[1]
    r = run("fetch_url", ToolContext(allow_fetch=True, fetch_timeout_s=2), url=f"http://{host}:{port}/plain")
    assert r.is_error and "refused to fetch" in r.content and why in r.content, r.content
    assert "unless the user allows the host" in r.content


def test_fetch_refuses_hearths_own_server(server):
    r = run("fetch_url", ToolContext(allow_fetch=True), url="http://127.0.0.1:8080/v1/models")
    assert r.is_error and "a loopback address" in r.content


def test_fetch_checks_every_redirect(server):
    port = server.rsplit(":", 1)[1]
    ctx = ToolContext(allow_fetch=True, fetch_timeout_s=2, fetch_allowed_hosts=LOCAL)
    ok = run("fetch_url", ctx, url=f"{server}/redirect?{server}/plain")
    assert ok.content == "HTTP 200, text/plain\n\njust text"   # a redirect within the allowed host
    for target in (f"http://localhost:{port}/plain", f"http://2130706433:{port}/plain",
                   "http://169.254.169.254/latest/meta-data/"):
        r = run("fetch_url", ctx, url=f"{server}/redirect?{target}")
        assert r.is_error and "refused to fetch" in r.content, (target, r.content)
    for target in ("file:///etc/passwd", "ftp://127.0.0.1/x"):
        r = run("fetch_url", ctx, url=f"{server}/redirect?{target}")
        assert r.is_error and "only http and https can be fetched" in r.content, (target, r.content)


def test_fetch_uses_no_environment_proxy(server, monkeypatch):
    """A proxy would be judged instead of the page: fetch_url connects directly."""
    monkeypatch.setenv("http_proxy", server)          # a proxy that would answer "slow" to anything
    ctx = ToolContext(allow_fetch=True, fetch_allowed_hosts=LOCAL)
    assert run("fetch_url", ctx, url=server + "/plain").content.endswith("just text")


def test_a_host_the_user_allows_is_reachable_by_its_own_name(server):
    port = server.rsplit(":", 1)[1]
    # the host as written in the URL is what is compared (case aside), not its addresses
    ctx = ToolContext(allow_fetch=True, fetch_allowed_hosts=frozenset({"LocalHost"}))
    assert run("fetch_url", ctx, url=f"http://localhost:{port}/plain").content.endswith("just text")
    assert run("fetch_url", ctx, url=f"http://127.0.0.1:{port}/plain").is_error


def test_html_to_text():
    assert html_to_text("<p>a<br>b</p><script>x</script><ul><li>c</li></ul>") == "a\nb\nc"


def test_the_shipped_tool_sets_load_with_their_builtin_implementations():
    """resources/toolsets/*.json (the app's shipped tool sets) are what ToolRegistry.for_tool_set reads."""
    import json
    from pathlib import Path

    shipped = sorted((Path(__file__).parent.parent / "hearth" / "resources" / "toolsets").glob("*.json"))
    for path in shipped:
        tools = json.loads(path.read_text(encoding="utf-8"))["tools"]
        reg = ToolRegistry.for_tool_set(tools)
        for name in reg.names:
            assert reg.needs_user_result(name) == (name not in BUILTIN_TOOLS), (path.name, name)
