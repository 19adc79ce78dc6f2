"""Tool definitions as JSON-Schema function definitions, and arguments checked against them.

A tool definition has the shape OpenAI's API and Hugging Face chat templates use:

    {"type": "function",
     "function": {"name": "calculator",
                  "description": "Evaluate an arithmetic expression.",
                  "parameters": {"type": "object",
                                 "properties": {"expression": {"type": "string"}},
                                 "required": ["expression"]}}}

Only the part of JSON Schema that real tool schemas use is implemented (no new dependency):
`type` (object, string, number, integer, boolean, array, null, or a list of them), `properties`,
`required`, `enum`, `const`, `items`, `additionalProperties`, `anyOf`/`oneOf`/`allOf`,
`minimum`/`maximum` (and the exclusive forms), `minLength`/`maxLength`, `minItems`/`maxItems`,
`pattern`, and the schemas `true` and `false`. Annotations (`description`, `title`, `default`,
`examples`, `format`) are accepted and not checked. Other keywords are ignored, as JSON Schema says,
unless `strict=True` (for an editor: then a typo like `"requried"` is reported, not ignored).
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from ..errors import EngineError

JSON_TYPES = ("object", "string", "number", "integer", "boolean", "array", "null")
# OpenAI's rule for function names, with '.' for namespaced tools ("files.search"). A leading digit
# ("2fa") is allowed: the API accepts it and every tool-call format quotes the name.
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
ANNOTATIONS = {"description", "title", "default", "examples", "format", "$comment", "nullable"}
CHECKED = {"type", "properties", "required", "enum", "const", "items", "additionalProperties",
           "anyOf", "oneOf", "allOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
           "minLength", "maxLength", "minItems", "maxItems", "pattern"}
MAX_SCHEMA_DEPTH = 32   # a schema nested deeper than this is refused, not recursed into


class ToolSchemaError(EngineError):
    """A tool definition that is not a valid JSON-Schema function definition.
    The message names the field (`tools[2].function.parameters.properties.unit.enum`) and the fix."""


# ---------------------------------------------------------------------------------------------
# Definitions

def normalize_tool_definition(definition: Any, where: str = "tool", strict: bool = False) -> dict:
    """Check one definition and return it in the wrapped form {"type": "function", "function": {...}}.

    The bare function form {"name": ..., "parameters": ...} is accepted too (some presets and
    tools export it) and wrapped. A missing `parameters` becomes an empty object schema.
    Raises ToolSchemaError naming the field at fault.
    """
    if not isinstance(definition, dict):
        raise ToolSchemaError(f"{where}: expected an object (a tool must be a JSON object), "
                              f"got {_json_type_name(definition)}")
    if "function" in definition or "type" in definition:
        if definition.get("type") != "function":
            raise ToolSchemaError(f"{where}.type: must be \"function\", got {definition.get('type')!r}")
        extra = set(definition) - {"type", "function"}
        if extra:
            raise ToolSchemaError(f"{where}: unexpected key(s) {_names(extra)}; "
                                  "a tool is {\"type\": \"function\", \"function\": {...}}")
        fn, fwhere = definition.get("function"), f"{where}.function"
    else:
        fn, fwhere = definition, where
    if not isinstance(fn, dict):
        raise ToolSchemaError(f"{fwhere}: must be a JSON object with name, description and parameters")
    extra = set(fn) - {"name", "description", "parameters", "strict"}
    if extra:
        raise ToolSchemaError(f"{fwhere}: unexpected key(s) {_names(extra)} (unknown field; "
                              "allowed are name, description, parameters)")
    name = fn.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ToolSchemaError(f"{fwhere}.name: {name!r} is not a valid function name; "
                              "use 1-64 letters, digits, '_', '.' or '-'")
    if "description" in fn and not isinstance(fn["description"], str):
        raise ToolSchemaError(f"{fwhere}.description: must be a string")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    pwhere = f"{fwhere}.parameters"
    if not isinstance(params, dict):
        raise ToolSchemaError(f"{pwhere}: must be a JSON Schema object")
    check_schema(params, pwhere, strict=strict)
    if params.get("type", "object") != "object":
        raise ToolSchemaError(f"{pwhere}.type: the parameters of a tool must be an object schema "
                              f"(type \"object\"), got {params.get('type')!r}")
    out = {"name": name}
    if "description" in fn:
        out["description"] = fn["description"]
    out["parameters"] = copy.deepcopy(params)
    return {"type": "function", "function": out}


def validate_tool_set(definitions: Any, where: str = "tools", strict: bool = False) -> list[dict]:
    """Check a list of tool definitions (a preset's tool set); names must be unique.
    Returns the normalized (wrapped) definitions."""
    if not isinstance(definitions, list):
        raise ToolSchemaError(f"{where}: must be a list of tool definitions, "
                              f"got {_json_type_name(definitions)}")
    out, seen = [], {}
    for i, d in enumerate(definitions):
        norm = normalize_tool_definition(d, f"{where}[{i}]", strict)
        name = norm["function"]["name"]
        if name in seen:
            raise ToolSchemaError(f"{where}[{i}].function.name: {name!r} is already the name of "
                                  f"{where}[{seen[name]}] (defined twice); tool names must be unique")
        seen[name] = i
        out.append(norm)
    return out


def check_schema(schema: Any, where: str, depth: int = 0, strict: bool = False) -> None:
    """Raise ToolSchemaError if `schema` is not a JSON Schema of the supported subset
    (with strict=True, an unknown keyword is an error too)."""
    if depth > MAX_SCHEMA_DEPTH:
        raise ToolSchemaError(f"{where}: nested more than {MAX_SCHEMA_DEPTH} levels deep")
    if isinstance(schema, bool):
        return                                  # true accepts anything, false nothing
    if not isinstance(schema, dict):
        raise ToolSchemaError(f"{where}: a schema must be a JSON object, got {_json_type_name(schema)}")
    unknown = set(schema) - CHECKED - ANNOTATIONS
    if unknown and strict:
        raise ToolSchemaError(f"{where}: unknown keyword(s) {_names(unknown)}; supported are "
                              f"{', '.join(sorted(CHECKED))} (and annotations such as description)")
    types = _schema_types(schema, where)
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise ToolSchemaError(f"{where}.properties: must be an object mapping names to schemas")
        for key, sub in props.items():
            check_schema(sub, f"{where}.properties.{key}", depth + 1, strict)
    if "required" in schema:
        req = schema["required"]
        if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
            raise ToolSchemaError(f"{where}.required: must be a list of property names")
        if len(set(req)) != len(req):
            raise ToolSchemaError(f"{where}.required: lists a name twice")
        missing = [r for r in req if props is None or r not in props]
        if missing:
            raise ToolSchemaError(f"{where}.required: {_names(missing)} not defined in properties "
                                  f"({', '.join(missing)} not in properties); "
                                  "add them to properties or remove them from required")
    if "enum" in schema:
        enum = schema["enum"]
        if not isinstance(enum, list) or not enum:
            raise ToolSchemaError(f"{where}.enum: must be a non-empty list of allowed values")
        if types:
            bad = [v for v in enum if not any(_is_type(v, t) for t in types)]
            if bad:
                raise ToolSchemaError(f"{where}.enum: value {bad[0]!r} is not of type {'/'.join(types)}")
    if "items" in schema:
        check_schema(schema["items"], f"{where}.items", depth + 1, strict)
    if "additionalProperties" in schema:
        ap = schema["additionalProperties"]
        if not isinstance(ap, bool):
            check_schema(ap, f"{where}.additionalProperties", depth + 1, strict)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            alts = schema[key]
            if not isinstance(alts, list) or not alts:
                raise ToolSchemaError(f"{where}.{key}: must be a non-empty list of schemas")
            for i, sub in enumerate(alts):
                check_schema(sub, f"{where}.{key}[{i}]", depth + 1, strict)
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema and not _is_type(schema[key], "number"):
            raise ToolSchemaError(f"{where}.{key}: must be a number")
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if key in schema and not (_is_type(schema[key], "integer") and schema[key] >= 0):
            raise ToolSchemaError(f"{where}.{key}: must be a non-negative integer")
    if "pattern" in schema:
        if not isinstance(schema["pattern"], str):
            raise ToolSchemaError(f"{where}.pattern: must be a regular expression string")
        try:
            re.compile(schema["pattern"])
        except re.error as e:
            raise ToolSchemaError(f"{where}.pattern: not a valid regular expression ({e})") from None


def _schema_types(schema: dict, where: str) -> list[str]:
    t = schema.get("type")
    if t is None:
        return []
    types = [t] if isinstance(t, str) else t
    if not isinstance(types, list) or not types or not all(isinstance(x, str) for x in types):
        raise ToolSchemaError(f"{where}.type: must be a type name or a list of them")
    for x in types:
        if x not in JSON_TYPES:
            raise ToolSchemaError(f"{where}.type: unknown type {x!r} ({x!r} is not a JSON Schema type); "
                                  f"use one of {', '.join(JSON_TYPES)}")
    return types


# ---------------------------------------------------------------------------------------------
# Arguments

def validate_arguments(arguments: Any, parameters: dict, where: str = "arguments") -> list[str]:
    """Check a call's arguments against its tool's `parameters` schema (already checked with
    check_schema). Returns readable errors, empty when the arguments are valid."""
    errors: list[str] = []
    _validate(arguments, parameters, where, errors)
    return errors


def _validate(value: Any, schema: dict | bool, where: str, errors: list[str]) -> None:
    if schema is True:
        return
    if schema is False:
        errors.append(f"{where}: no value is allowed here")
        return
    types = _schema_types(schema, where)
    if types and not any(_is_type(value, t) for t in types):
        errors.append(f"{where}: expected {' or '.join(types)}, got {_json_type_name(value)} {_short(value)}")
        return
    if "const" in schema and not _json_equal(value, schema["const"]):
        errors.append(f"{where}: must be {schema['const']!r}, got {_short(value)}")
    if "enum" in schema and not any(_json_equal(value, v) for v in schema["enum"]):
        allowed = ", ".join(repr(v) for v in schema["enum"])
        errors.append(f"{where}: {_short(value)} is not one of {allowed}")
    for key in ("anyOf", "oneOf"):
        if key in schema:
            matches = sum(1 for sub in schema[key] if not validate_arguments(value, sub, where))
            if matches == 0 or (key == "oneOf" and matches > 1):
                errors.append(f"{where}: {_short(value)} matches {matches} of the allowed forms "
                              f"({key} needs {'exactly one' if key == 'oneOf' else 'at least one'})")
    for sub in schema.get("allOf", []):
        _validate(value, sub, where, errors)
    if isinstance(value, dict):
        _validate_object(value, schema, where, errors)
    elif isinstance(value, list):
        if "items" in schema:
            for i, item in enumerate(value):
                _validate(item, schema["items"], f"{where}[{i}]", errors)
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{where}: needs at least {schema['minItems']} item(s), got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: allows at most {schema['maxItems']} item(s), got {len(value)}")
    elif isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{where}: must be at least {schema['minLength']} characters long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: must be at most {schema['maxLength']} characters long")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {_short(value)} does not match the pattern {schema['pattern']!r}")
    elif _is_type(value, "number"):
        _validate_number(value, schema, where, errors)


def _validate_object(value: dict, schema: dict, where: str, errors: list[str]) -> None:
    props = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            errors.append(f"{where}: the required argument {name!r} is missing")
    extra_schema = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            _validate(item, props[key], f"{where}.{key}", errors)
        elif extra_schema is False:
            known = ", ".join(props) or "none"
            errors.append(f"{where}: unexpected argument {key!r} (allowed: {known})")
        elif isinstance(extra_schema, dict):
            _validate(item, extra_schema, f"{where}.{key}", errors)


def _validate_number(value: float, schema: dict, where: str, errors: list[str]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        errors.append(f"{where}: must be a finite number, got {value}")
        return
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{where}: must be >= {schema['minimum']}, got {value}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{where}: must be <= {schema['maximum']}, got {value}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        errors.append(f"{where}: must be > {schema['exclusiveMinimum']}, got {value}")
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        errors.append(f"{where}: must be < {schema['exclusiveMaximum']}, got {value}")


def _is_type(value: Any, t: str) -> bool:
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "null":
        return value is None
    if isinstance(value, bool):     # JSON true/false are not numbers, though Python's bool is an int
        return False
    if t == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if t == "number":
        return isinstance(value, (int, float))
    return False


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _json_type_name(value: Any) -> str:
    for t in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is_type(value, t):
            return t
    return type(value).__name__


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _names(names) -> str:
    return ", ".join(repr(n) for n in sorted(names))
