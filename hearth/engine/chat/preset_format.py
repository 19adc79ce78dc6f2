"""The presets file format, `hearth-presets` version 1: parse, validate, dump (no file I/O).

One owner for the format: the app's PresetStore (which reads and writes the user's file, moves a
corrupt one aside and says so) and the server's preset matching both parse with `parse`.

    {
      "format": "hearth-presets",
      "version": 1,
      "presets": [
        {
          "id": "assistant",                      # stable, unique; images and chats refer to it
          "name": "Assistant",
          "system_prompt": "You are ...",
          "tools": [ {"type": "function", "function": {"name", "description", "parameters"}} ],
          "sampling": {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
                       "repeat_penalty": 1.1, "seed": -1, "max_tokens": 1024},   # seed -1: random
          "model": "",                            # preferred model path, "" = any
          "context_policy": "stop",               # or "truncate_middle", "rolling_window"
          "mcp_servers": ["files"]                # names of the app's MCP servers whose tools join
        }                                         # (the app runs them; the server ignores this)
      ]
    }

`context_policy` is optional (default "stop"); engine/chat/context_policy.py says what each does.
The order of `presets` is the order in the app's picker. A preset's tools are checked by
engine.tools' validator, the one the server uses for requests.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import asdict, dataclass, field

from .context_policy import DEFAULT_POLICY, POLICIES
from ..errors import EngineError
from ..tools import ToolSchemaError, validate_tool_set

FORMAT = "hearth-presets"
VERSION = 1

DEFAULT_SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
                    "repeat_penalty": 1.1, "seed": -1, "max_tokens": 1024}
_SAMPLING_TYPES = {"temperature": float, "top_p": float, "top_k": int, "min_p": float,
                   "repeat_penalty": float, "seed": int, "max_tokens": int}
_SAMPLING_RANGES = {"temperature": (0, 5), "top_p": (0, 1), "top_k": (0, 100000), "min_p": (0, 1),
                    "repeat_penalty": (0.5, 3), "seed": (-1, 2**31 - 1), "max_tokens": (1, 1 << 20)}


# A reasoning model's effort (gpt-oss's template variable `reasoning_effort`); "" leaves the template's default.
REASONING_EFFORTS = ("", "low", "medium", "high")


class PresetError(EngineError, ValueError):
    """A preset or presets file that cannot be used; the message says which field and why."""


@dataclass
class Preset:
    id: str
    name: str
    system_prompt: str = ""
    tools: list = field(default_factory=list)
    sampling: dict = field(default_factory=lambda: dict(DEFAULT_SAMPLING))
    model: str = ""
    context_policy: str = DEFAULT_POLICY
    mcp_servers: list = field(default_factory=list)
    reasoning_effort: str = ""    # "low" / "medium" / "high" for templates that take it (gpt-oss); "": theirs

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d, where: str = "preset") -> "Preset":
        if not isinstance(d, dict):
            raise PresetError(f"{where}: expected an object")
        name = d.get("name")
        if not isinstance(name, str) or not name.strip():
            raise PresetError(f"{where}.name: a preset needs a non-empty name")
        pid = d.get("id") or new_id()
        if not isinstance(pid, str):
            raise PresetError(f"{where}.id: must be a string")
        system = d.get("system_prompt", "")
        if not isinstance(system, str):
            raise PresetError(f"{where}.system_prompt: must be a string")
        try:
            tools = validate_tool_set(d.get("tools", []))
        except ToolSchemaError as e:
            raise PresetError(f"{where}.{e}") from None
        sampling = check_sampling(d.get("sampling", {}), f"{where}.sampling")
        model = d.get("model", "") or ""
        if not isinstance(model, str):
            raise PresetError(f"{where}.model: must be a path string")
        policy = d.get("context_policy", DEFAULT_POLICY)
        if policy not in POLICIES:
            raise PresetError(f"{where}.context_policy: {policy!r} is not one of {', '.join(POLICIES)}")
        mcp = d.get("mcp_servers", []) or []
        if not isinstance(mcp, list) or not all(isinstance(n, str) and n for n in mcp):
            raise PresetError(f"{where}.mcp_servers: must be a list of MCP server names")
        effort = d.get("reasoning_effort", "") or ""
        if effort not in REASONING_EFFORTS:
            raise PresetError(f"{where}.reasoning_effort: {effort!r} is not one of low, medium, high")
        return cls(pid, name.strip(), system, tools, sampling, model, policy, list(dict.fromkeys(mcp)), effort)

    def copy(self) -> "Preset":
        return copy.deepcopy(self)


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def check_sampling(s, where: str = "sampling") -> dict:
    if not isinstance(s, dict):
        raise PresetError(f"{where}: expected an object")
    out = dict(DEFAULT_SAMPLING)
    for k, v in s.items():
        if k not in _SAMPLING_TYPES:
            raise PresetError(f"{where}.{k}: unknown setting (known: {', '.join(_SAMPLING_TYPES)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise PresetError(f"{where}.{k}: must be a number")
        if _SAMPLING_TYPES[k] is int and v != int(v):
            raise PresetError(f"{where}.{k}: must be a whole number")
        lo, hi = _SAMPLING_RANGES[k]
        if not lo <= v <= hi:
            raise PresetError(f"{where}.{k}: {v} is outside {lo}..{hi}")
        out[k] = _SAMPLING_TYPES[k](v)
    return out


def dumps(presets: list[Preset]) -> str:
    return json.dumps({"format": FORMAT, "version": VERSION, "presets": [p.to_json() for p in presets]},
                      indent=2, ensure_ascii=False) + "\n"


def parse(text: str, source: str) -> tuple[list[Preset], list[str]]:
    """Presets of a file's text and the problems met. Raises PresetError when nothing is usable."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PresetError(f"{source}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PresetError(f"{source}: not a Hearth presets file (expected \"format\": \"{FORMAT}\")")
    v = doc.get("version")
    if not isinstance(v, int) or v < 1:
        raise PresetError(f"{source}: missing or invalid \"version\"")
    if v > VERSION:
        raise PresetError(f"{source}: version {v} is newer than this Hearth reads ({VERSION}); update Hearth")
    items = doc.get("presets")
    if not isinstance(items, list):
        raise PresetError(f"{source}: \"presets\" must be a list")
    out, problems, ids = [], [], set()
    for i, d in enumerate(items):
        try:
            p = Preset.from_json(d, f"presets[{i}]")
        except PresetError as e:
            problems.append(str(e))
            continue
        if p.id in ids:
            p.id = new_id()
        ids.add(p.id)
        out.append(p)
    return out, problems
