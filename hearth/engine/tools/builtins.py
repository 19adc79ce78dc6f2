"""The built-in tools' implementations and definitions: calculator, date/time, unit conversion,
reading a file the user picked, fetching a URL (off unless the user turns it on).

Each implementation is `run(arguments: dict, context: ToolContext) -> str` and raises ToolError
with a message meant for the model (and shown to the user) when it cannot do what was asked.
"""

from __future__ import annotations

import datetime as dt
import os
import zoneinfo
from pathlib import Path

from ..system.files import NotRegularFile, open_regular
from .calculator import CalculatorError, calculate
from .context import ToolContext, ToolError
from .fetch import FETCH_URL, run_fetch_url
from .html_text import html_to_text
from .units import UnitError, convert_units

__all__ = ["BUILTIN_TOOLS", "ToolContext", "ToolError", "html_to_text"]


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
        # read-only, no more than the cap, and only a regular file: a FIFO or a device picked by
        # mistake would otherwise block the tool thread for ever
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(context.max_file_bytes + 1)
    except NotRegularFile as e:
        what = "a folder" if e.kind == "a directory" else e.kind
        raise ToolError(f"{args['path']} is {what}, not a file") from None
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


BUILTIN_TOOLS = {   # name: (definition, implementation)
    "calculator": (CALCULATOR, run_calculator),
    "current_datetime": (CURRENT_DATETIME, run_current_datetime),
    "convert_units": (CONVERT_UNITS, run_convert_units),
    "read_file": (READ_FILE, run_read_file),
    "fetch_url": (FETCH_URL, run_fetch_url),
}
