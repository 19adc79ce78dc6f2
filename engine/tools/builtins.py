"""The built-in tools' implementations and definitions: calculator, date/time, unit conversion,
reading a file the user picked, fetching a URL (off unless the user turns it on).

Each implementation is `run(arguments: dict, context: ToolContext) -> str` and raises ToolError
with a message meant for the model (and shown to the user) when it cannot do what was asked.
"""

from __future__ import annotations

import datetime as dt
import html.parser
import os
import urllib.error
import urllib.request
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .calculator import CalculatorError, calculate
from .units import UnitError, convert_units


class ToolError(Exception):
    """A tool could not do what was asked; the message goes back to the model as an error result."""


@dataclass
class ToolContext:
    """What the app allows for one chat. The defaults allow nothing that reaches outside."""
    allowed_files: frozenset = frozenset()          # paths the user picked; nothing else is readable
    max_file_bytes: int = 64 * 1024
    allow_fetch: bool = False                       # the user must turn "fetch URL" on
    fetch_timeout_s: float = 10.0
    fetch_max_bytes: int = 256 * 1024
    now: Callable[[], dt.datetime] | None = None    # a fixed clock for tests; None is the real one
    ask_user: Callable[..., str | None] | None = None   # for tools that need the user to type a result
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# calculator

CALCULATOR = {"type": "function", "function": {
    "name": "calculator",
    "description": ("Evaluate an arithmetic expression exactly. Supports + - * / // % ** and "
                    "parentheses, the functions sqrt, sin, cos, tan (radians), log (base 10, or "
                    "log(x, base)), ln, exp, abs, round, floor, ceil, min, max, and the constants "
                    "pi and e."),
    "parameters": {"type": "object",
                   "properties": {"expression": {"type": "string",
                                                 "description": "The expression, e.g. 2 * (3 + 4)",
                                                 "examples": ["2 * (3 + 4)"]}},
                   "required": ["expression"]}}}


def run_calculator(args: dict, context: ToolContext) -> str:
    try:
        return calculate(args["expression"])
    except CalculatorError as e:
        raise ToolError(f"cannot evaluate {args['expression'][:80]!r}: {e}") from None


# ---------------------------------------------------------------------------------------------
# date and time

CURRENT_DATETIME = {"type": "function", "function": {
    "name": "current_datetime",
    "description": "The current date and time, in a given time zone or in UTC.",
    "parameters": {"type": "object",
                   "properties": {"timezone": {"type": "string",
                                               "description": "An IANA time zone name such as "
                                                              "Europe/Paris or America/New_York; "
                                                              "UTC when omitted"}},
                   "required": []}}}


def run_current_datetime(args: dict, context: ToolContext) -> str:
    name = (args.get("timezone") or "UTC").strip()
    try:
        tz = dt.timezone.utc if name.upper() in ("UTC", "Z", "GMT") else zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"unknown time zone {name!r}: use an IANA name such as Europe/Paris, "
                        "Asia/Tokyo or America/New_York") from None
    now = context.now() if context.now else dt.datetime.now(dt.timezone.utc)
    local = now.astimezone(tz)
    return (f"{local.strftime('%A %d %B %Y, %H:%M:%S')} in {name} "
            f"(ISO 8601: {local.isoformat(timespec='seconds')})")


# ---------------------------------------------------------------------------------------------
# units

CONVERT_UNITS = {"type": "function", "function": {
    "name": "convert_units",
    "description": ("Convert a value between units of length, mass, temperature, volume, speed, "
                    "data size or time, e.g. 5 mi to km, 100 F to C, 2 GiB to MB."),
    "parameters": {"type": "object",
                   "properties": {
                       "value": {"type": "number", "description": "The amount to convert"},
                       "from_unit": {"type": "string", "description": "The unit of the value, e.g. mi"},
                       "to_unit": {"type": "string", "description": "The unit wanted, e.g. km"}},
                   "required": ["value", "from_unit", "to_unit"]}}}


def run_convert_units(args: dict, context: ToolContext) -> str:
    try:
        return convert_units(args["value"], args["from_unit"], args["to_unit"])
    except UnitError as e:
        raise ToolError(str(e)) from None


# ---------------------------------------------------------------------------------------------
# read a file the user picked

READ_FILE = {"type": "function", "function": {
    "name": "read_file",
    "description": "Read a text file that the user has shared in this chat (read-only).",
    "parameters": {"type": "object",
                   "properties": {"path": {"type": "string",
                                           "description": "The file's path or name, as shared"}},
                   "required": ["path"]}}}


def run_read_file(args: dict, context: ToolContext) -> str:
    path = _allowed_path(args["path"], context.allowed_files)
    try:
        with open(path, "rb") as f:                     # read-only, and no more than the cap
            size = os.fstat(f.fileno()).st_size
            data = f.read(context.max_file_bytes + 1)
    except IsADirectoryError:
        raise ToolError(f"{args['path']} is a folder, not a file") from None
    except OSError as e:
        raise ToolError(f"cannot read {args['path']}: {e.strerror or e}") from None
    if b"\0" in data[:8192]:
        raise ToolError(f"{path.name} is not a text file")
    truncated = len(data) > context.max_file_bytes
    text = data[:context.max_file_bytes].decode("utf-8", errors="replace")
    if truncated:
        if text.endswith("\ufffd"):                     # a character cut in two at the cap
            text = text[:-1]
        text += (f"\n[truncated: {path.name} is {size:,} bytes; only the first "
                 f"{context.max_file_bytes:,} are shown]")
    return text


def _allowed_path(asked: str, allowed: frozenset) -> Path:
    """The allowed file the model means: its exact path, or the name of exactly one allowed file.
    Paths are compared after resolving links and '..', so no spelling reaches another file."""
    if not allowed:
        raise ToolError("no files are shared in this chat; the user can attach one")
    resolved = {Path(os.path.realpath(p)): Path(p) for p in allowed}
    asked_path = Path(os.path.realpath(os.path.expanduser(asked)))
    if asked_path in resolved:
        return asked_path
    by_name = [r for r, p in resolved.items() if p.name == asked or r.name == asked]
    if len(by_name) == 1:
        return by_name[0]
    names = ", ".join(sorted(p.name for p in resolved.values()))
    raise ToolError(f"{asked!r} is not a file shared in this chat; the shared files are: {names}")


# ---------------------------------------------------------------------------------------------
# fetch a URL (off unless enabled)

FETCH_URL = {"type": "function", "function": {
    "name": "fetch_url",
    "description": "Fetch a web page or text file over http(s) and return its text.",
    "parameters": {"type": "object",
                   "properties": {"url": {"type": "string", "description": "An http or https URL"}},
                   "required": ["url"]}}}


def run_fetch_url(args: dict, context: ToolContext) -> str:
    if not context.allow_fetch:
        raise ToolError("fetching URLs is turned off; the user can turn it on in the settings")
    url = args["url"].strip()
    if not url.lower().startswith(("http://", "https://")):
        raise ToolError(f"only http and https URLs can be fetched, not {url[:80]!r}")
    req = urllib.request.Request(url, headers={"User-Agent": "Hearth/0.1 (fetch_url tool)"})
    try:
        with urllib.request.urlopen(req, timeout=context.fetch_timeout_s) as resp:
            ctype = resp.headers.get_content_type()
            charset = resp.headers.get_content_charset() or "utf-8"
            data = resp.read(context.fetch_max_bytes + 1)
            status = resp.status
    except urllib.error.HTTPError as e:
        raise ToolError(f"{url} answered HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise ToolError(f"cannot fetch {url}: {reason}") from None
    if not (ctype.startswith("text/") or ctype in ("application/json", "application/xml",
                                                   "application/xhtml+xml")):
        raise ToolError(f"{url} is {ctype}, not text")
    truncated = len(data) > context.fetch_max_bytes
    text = data[:context.fetch_max_bytes].decode(charset, errors="replace")
    if ctype in ("text/html", "application/xhtml+xml"):
        text = html_to_text(text)
    note = f"\n[truncated at {context.fetch_max_bytes:,} bytes]" if truncated else ""
    return f"HTTP {status}, {ctype}\n\n{text}{note}"


class _TextExtractor(html.parser.HTMLParser):
    SKIP = {"script", "style", "noscript", "template", "svg"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
             "article", "header", "footer", "pre", "blockquote", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.skipping:
            self.skipping -= 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)


def html_to_text(source: str) -> str:
    """Visible text of an HTML page, one line per block, scripts and styles left out."""
    p = _TextExtractor()
    p.feed(source)
    p.close()
    lines = (" ".join(line.split()) for line in "".join(p.parts).splitlines())
    return "\n".join(line for line in lines if line)


BUILTIN_TOOLS = {   # name: (definition, implementation)
    "calculator": (CALCULATOR, run_calculator),
    "current_datetime": (CURRENT_DATETIME, run_current_datetime),
    "convert_units": (CONVERT_UNITS, run_convert_units),
    "read_file": (READ_FILE, run_read_file),
    "fetch_url": (FETCH_URL, run_fetch_url),
}
