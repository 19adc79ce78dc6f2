"""Validation of tool definitions: OpenAI-style functions whose `parameters` are a JSON Schema.

Accepted shapes (the second is normalised to the first):
    {"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}
    {"name": ..., "description": ..., "parameters": {...}}

`parameters` must be an object schema. The schema check covers the JSON Schema keywords chat templates
and tool-calling models use (type, properties, required, items, enum, description, default, minimum,
maximum, minLength, maxLength, pattern, format, additionalProperties, anyOf/oneOf/allOf); an unknown
`type`, a `required` name missing from `properties`, a non-object where a schema is expected, or an
invalid `pattern` is an error naming the path of the offending part ("tools[2].parameters.properties.
unit.type: 'strin' is not a JSON Schema type").
"""

from __future__ import annotations

import re

JSON_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class ToolError(ValueError):
    """A tool definition that cannot be used; the message names where and why."""


def validate_tool(tool, where: str = "tool") -> dict:
    """Return the tool in the canonical {"type": "function", "function": {...}} shape, or raise ToolError."""
    if not isinstance(tool, dict):
        raise ToolError(f"{where}: expected an object, got {type(tool).__name__}")
    if "function" in tool:
        if tool.get("type", "function") != "function":
            raise ToolError(f"{where}.type: only 'function' tools are supported, not {tool.get('type')!r}")
        fn, where = tool["function"], f"{where}.function"
        if not isinstance(fn, dict):
            raise ToolError(f"{where}: expected an object")
    else:
        fn = tool
    name = fn.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ToolError(f"{where}.name: {name!r} is not a valid function name "
                        "(letters, digits, _ . -, starting with a letter or _, at most 64)")
    desc = fn.get("description", "")
    if not isinstance(desc, str):
        raise ToolError(f"{where}.description: must be a string")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    _check_schema(params, f"{where}.parameters")
    if params.get("type") != "object":
        raise ToolError(f"{where}.parameters.type: a function's parameters must be an object schema "
                        f"(\"type\": \"object\"), not {params.get('type')!r}")
    unknown = set(fn) - {"name", "description", "parameters", "strict"}
    if unknown:
        raise ToolError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


def validate_tools(tools) -> list[dict]:
    """Validate a tool set (a list of tools); names must be unique."""
    if not isinstance(tools, list):
        raise ToolError(f"tools: expected a list of tool definitions, got {type(tools).__name__}")
    out, seen = [], set()
    for i, t in enumerate(tools):
        c = validate_tool(t, f"tools[{i}]")
        n = c["function"]["name"]
        if n in seen:
            raise ToolError(f"tools[{i}].name: {n!r} is defined twice")
        seen.add(n)
        out.append(c)
    return out


def _check_schema(s, where: str) -> None:
    if isinstance(s, bool):
        return  # true/false are valid schemas
    if not isinstance(s, dict):
        raise ToolError(f"{where}: a JSON Schema must be an object, got {type(s).__name__}")
    t = s.get("type")
    types = t if isinstance(t, list) else [t] if t is not None else []
    for one in types:
        if one not in JSON_TYPES:
            raise ToolError(f"{where}.type: {one!r} is not a JSON Schema type "
                            f"({', '.join(sorted(JSON_TYPES))})")
    if "properties" in s:
        props = s["properties"]
        if not isinstance(props, dict):
            raise ToolError(f"{where}.properties: must be an object mapping names to schemas")
        for k, v in props.items():
            _check_schema(v, f"{where}.properties.{k}")
    if "required" in s:
        req = s["required"]
        if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
            raise ToolError(f"{where}.required: must be a list of property names")
        missing = [r for r in req if r not in s.get("properties", {})]
        if missing:
            raise ToolError(f"{where}.required: {', '.join(missing)} not in properties")
    if "items" in s:
        _check_schema(s["items"], f"{where}.items")
    if "additionalProperties" in s and not isinstance(s["additionalProperties"], bool):
        _check_schema(s["additionalProperties"], f"{where}.additionalProperties")
    for key in ("anyOf", "oneOf", "allOf"):
        if key in s:
            if not isinstance(s[key], list) or not s[key]:
                raise ToolError(f"{where}.{key}: must be a non-empty list of schemas")
            for i, sub in enumerate(s[key]):
                _check_schema(sub, f"{where}.{key}[{i}]")
    if "enum" in s and (not isinstance(s["enum"], list) or not s["enum"]):
        raise ToolError(f"{where}.enum: must be a non-empty list")
    if "description" in s and not isinstance(s["description"], str):
        raise ToolError(f"{where}.description: must be a string")
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in s and (isinstance(s[key], bool) or not isinstance(s[key], (int, float))):
            raise ToolError(f"{where}.{key}: must be a number")
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if key in s and (isinstance(s[key], bool) or not isinstance(s[key], int) or s[key] < 0):
            raise ToolError(f"{where}.{key}: must be a non-negative integer")
    if "pattern" in s:
        try:
            re.compile(s["pattern"])
        except (re.error, TypeError) as e:
            raise ToolError(f"{where}.pattern: not a valid regular expression ({e})") from None
