"""hearth.engine.tools.schema: tool definitions checked, and call arguments checked against them."""

import copy

import pytest

from hearth.engine.tools import (ToolRegistry, ToolSchemaError, normalize_tool_definition,
                          validate_arguments, validate_tool_set)

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Weather at a place.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "minLength": 1},
                                  "unit": {"type": "string", "enum": ["C", "F"]},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                  "hourly": {"type": "boolean"},
                                  "fields": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                                  "near": {"type": "object",
                                           "properties": {"lat": {"type": "number"},
                                                          "lon": {"type": "number"}},
                                           "required": ["lat", "lon"],
                                           "additionalProperties": False},
                                  "note": {"type": ["string", "null"]}},
                   "required": ["city"],
                   "additionalProperties": False}}}


def test_builtin_definitions_are_valid():
    validate_tool_set(ToolRegistry.builtin(["calculator", "current_datetime", "convert_units",
                                            "read_file", "fetch_url"]).definitions())


def test_a_valid_definition_is_returned_wrapped_and_copied():
    out = normalize_tool_definition(WEATHER)
    assert out == WEATHER and out is not WEATHER
    out["function"]["parameters"]["required"].append("x")
    assert WEATHER["function"]["parameters"]["required"] == ["city"]


def test_the_bare_function_form_is_wrapped_and_parameters_default_to_empty():
    out = normalize_tool_definition({"name": "ping"})
    assert out == {"type": "function", "function": {"name": "ping",
                                                     "parameters": {"type": "object", "properties": {}}}}


def _broken(path, value=None, delete=False):
    d = copy.deepcopy(WEATHER)
    *parents, last = path
    node = d
    for p in parents:
        node = node[p]
    if delete:
        del node[last]
    else:
        node[last] = value
    return d


P = ("function", "parameters")


@pytest.mark.parametrize("definition, where, fix", [
    ("not an object", "tools[0]", "must be a JSON object"),
    (_broken(("type",), "tool"), "tools[0].type", 'must be "function"'),
    (_broken(("function",), []), "tools[0].function", "must be a JSON object"),
    (_broken(("function", "name"), "get weather!"), "tools[0].function.name", "letters, digits"),
    (_broken(("function", "name"), "a/b"), "tools[0].function.name", "letters, digits"),
    (_broken(("function", "name"), "x" * 65), "tools[0].function.name", "1-64"),
    (_broken(("function", "name"), delete=True), "tools[0].function.name", "letters"),
    (_broken(("function", "description"), 5), "tools[0].function.description", "string"),
    (_broken(("function", "params"), {}), "tools[0].function", "unexpected key(s) 'params'"),
    (_broken(P, "city"), "tools[0].function.parameters", "JSON Schema object"),
    (_broken(P + ("type",), "array"), "tools[0].function.parameters.type", 'type "object"'),
    (_broken(P + ("required",), ["town"]), "tools[0].function.parameters.required",
     "'town' not defined in properties"),
    (_broken(P + ("required",), "city"), "tools[0].function.parameters.required", "list of property names"),
    (_broken(P + ("required",), ["city", "city"]), "tools[0].function.parameters.required", "twice"),
    (_broken(P + ("properties",), ["city"]), "tools[0].function.parameters.properties", "object mapping"),
    (_broken(P + ("properties", "unit", "enum"), []), "properties.unit.enum", "non-empty list"),
    (_broken(P + ("properties", "unit", "enum"), ["C", 3]), "properties.unit.enum", "3 is not of type string"),
    (_broken(P + ("properties", "unit", "type"), "str"), "properties.unit.type", "unknown type 'str'"),
    (_broken(P + ("properties", "fields", "items"), "string"), "properties.fields.items", "must be a JSON object"),
    (_broken(P + ("properties", "near", "additionalProperties"), "no"), "near.additionalProperties",
     "must be a JSON object"),
    (_broken(P + ("properties", "days", "minimum"), "1"), "properties.days.minimum", "must be a number"),
    (_broken(P + ("properties", "city", "minLength"), -1), "properties.city.minLength", "non-negative"),
    (_broken(P + ("properties", "city", "pattern"), "(["), "properties.city.pattern", "not a valid regular"),
])
def test_bad_definitions_name_the_field_and_the_fix(definition, where, fix):
    with pytest.raises(ToolSchemaError) as info:
        validate_tool_set([definition])
    assert where in str(info.value) and fix in str(info.value), str(info.value)


def test_unknown_keywords_are_ignored_unless_strict():
    typo = _broken(P + ("requried",), ["city"])
    assert validate_tool_set([typo])[0] == typo                  # JSON Schema ignores unknown keywords
    with pytest.raises(ToolSchemaError, match=r"tools\[0\].function.parameters: unknown keyword\(s\) 'requried'"):
        validate_tool_set([typo], strict=True)
    deep = _broken(P + ("properties", "near", "minProperties"), 1)
    with pytest.raises(ToolSchemaError, match="properties.near: unknown keyword"):
        validate_tool_set([deep], strict=True)


def test_names_with_dots_and_boolean_schemas_are_accepted():
    d = {"name": "files.search", "parameters": {"type": "object", "properties": {"anything": True,
                                                                                   "nothing": False}}}
    params = normalize_tool_definition(d)["function"]["parameters"]
    assert validate_arguments({"anything": [1, {"x": None}]}, params) == []
    assert validate_arguments({"nothing": 1}, params) == ["arguments.nothing: no value is allowed here"]


def test_a_name_starting_with_a_digit_is_one_rule_for_requests_and_presets():
    """'2fa' is a valid name (OpenAI's rule allows a leading digit), so a tool the server accepts in a
    request can be saved in a preset; a name with a space is refused by both."""
    from hearth.engine.chat.preset_format import Preset, PresetError
    tool = {"type": "function", "function": {"name": "2fa", "parameters": {"type": "object", "properties": {}}}}
    assert validate_tool_set([tool])[0]["function"]["name"] == "2fa"
    assert Preset.from_json({"name": "Codes", "tools": [tool]}).tools == validate_tool_set([tool])
    bad = {"name": "two fa"}
    with pytest.raises(ToolSchemaError, match="not a valid function name"):
        validate_tool_set([bad])
    with pytest.raises(PresetError, match=r"presets\[0\]\.tools\[0\]\.name: 'two fa' is not a valid function name"):
        Preset.from_json({"name": "Codes", "tools": [bad]}, "presets[0]")


def test_duplicate_names_are_refused():
    with pytest.raises(ToolSchemaError, match=r"tools\[1\].function.name: 'get_weather' is already"):
        validate_tool_set([WEATHER, WEATHER])


def test_a_tool_set_must_be_a_list():
    with pytest.raises(ToolSchemaError, match="must be a list"):
        validate_tool_set({"tools": []})


def test_absurdly_deep_schemas_are_refused_not_recursed():
    schema = {"type": "object", "properties": {}}
    node = schema
    for _ in range(200):
        node["properties"]["x"] = {"type": "object", "properties": {}}
        node = node["properties"]["x"]
    with pytest.raises(ToolSchemaError, match="nested more than"):
        normalize_tool_definition({"name": "deep", "parameters": schema})


PARAMS = WEATHER["function"]["parameters"]


def test_valid_arguments():
    assert validate_arguments({"city": "Oslo"}, PARAMS) == []
    assert validate_arguments({"city": "Oslo", "unit": "C", "days": 3, "hourly": False,
                               "fields": ["wind"], "near": {"lat": 59.9, "lon": 10}, "note": None},
                              PARAMS) == []
    assert validate_arguments({"city": "Oslo", "days": 3.0}, PARAMS) == []   # 3.0 is an integer in JSON


@pytest.mark.parametrize("args, error", [
    ({}, "arguments: the required argument 'city' is missing"),
    ({"city": 5}, "arguments.city: expected string, got integer 5"),
    ({"city": ""}, "arguments.city: must be at least 1 characters long"),
    ({"city": "Oslo", "unit": "K"}, "arguments.unit: 'K' is not one of 'C', 'F'"),
    ({"city": "Oslo", "days": 2.5}, "arguments.days: expected integer, got number"),
    ({"city": "Oslo", "days": True}, "arguments.days: expected integer, got boolean"),
    ({"city": "Oslo", "days": 0}, "arguments.days: must be >= 1"),
    ({"city": "Oslo", "days": 8}, "arguments.days: must be <= 7"),
    ({"city": "Oslo", "hourly": "yes"}, "arguments.hourly: expected boolean, got string"),
    ({"city": "Oslo", "fields": "wind"}, "arguments.fields: expected array"),
    ({"city": "Oslo", "fields": ["wind", 3]}, "arguments.fields[1]: expected string"),
    ({"city": "Oslo", "fields": ["a", "b", "c", "d"]}, "allows at most 3"),
    ({"city": "Oslo", "near": {"lat": 1}}, "arguments.near: the required argument 'lon' is missing"),
    ({"city": "Oslo", "near": {"lat": 1, "lon": 2, "alt": 3}}, "arguments.near: unexpected argument 'alt'"),
    ({"city": "Oslo", "country": "NO"}, "arguments: unexpected argument 'country' (allowed: city, unit"),
    ({"city": "Oslo", "note": 1}, "arguments.note: expected string or null"),
    ("Oslo", "arguments: expected object, got string"),
])
def test_invalid_arguments_are_explained(args, error):
    errors = validate_arguments(args, PARAMS)
    assert any(error in e for e in errors), errors


def test_all_errors_are_reported_not_just_the_first():
    errors = validate_arguments({"city": 1, "unit": "K", "days": 99}, PARAMS)
    assert len(errors) == 3


def test_non_finite_numbers_are_refused():
    assert validate_arguments({"x": float("nan")}, {"type": "object", "properties": {"x": {"type": "number"}}})


def test_any_of_one_of_all_of_and_const():
    s = {"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                                          "a": {"allOf": [{"type": "integer"}, {"minimum": 3}]},
                                          "w": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
                                          "k": {"const": "fixed"}}}
    assert validate_arguments({"v": "a"}, s) == [] and validate_arguments({"v": 1}, s) == []
    assert validate_arguments({"v": 1.5}, s)
    assert validate_arguments({"w": 1.5}, s) == []
    assert validate_arguments({"w": 1}, s)           # matches both: oneOf needs exactly one
    assert validate_arguments({"k": "fixed"}, s) == [] and validate_arguments({"k": "other"}, s)
    assert validate_arguments({"a": 4}, s) == []
    assert validate_arguments({"a": 2}, s) == ["arguments.a: must be >= 3, got 2"]


def test_additional_properties_schema_applies_to_extra_keys():
    s = {"type": "object", "properties": {}, "additionalProperties": {"type": "number"}}
    assert validate_arguments({"a": 1, "b": 2.5}, s) == []
    assert "arguments.b: expected number" in validate_arguments({"a": 1, "b": "x"}, s)[0]


def test_annotations_are_accepted():
    normalize_tool_definition({"name": "f", "parameters": {
        "type": "object", "title": "F", "properties": {"x": {"type": "string", "format": "date",
                                                             "default": "2024-01-01", "examples": ["x"]}}}})
