"""engine/server/protocol.py: the OpenAI request checked field by field, wire messages turned into
template messages, and the reply bodies. No model, no sockets."""

from __future__ import annotations

import json

import pytest

from hearth.engine.generation import GenerationStats
from hearth.engine.server.protocol import (RequestError, chunk_body, completion_body, error_body, parse_chat_request,
                                    timings, tool_call_to_wire, usage, wire_to_template_messages)
from hearth.engine.tools import ToolCall

CALC = {"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def parse(**fields):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return parse_chat_request(json.dumps(body).encode())


def refused(body, match, code=None, param=None):
    with pytest.raises(RequestError, match=match) as e:
        parse_chat_request(body if isinstance(body, bytes) else json.dumps(body).encode())
    assert e.value.status == 400
    if code:
        assert e.value.code == code
    if param:
        assert e.value.param == param
    return e.value


def test_a_minimal_request_gets_hearths_defaults():
    r = parse()
    assert r.model == "m" and r.messages == [{"role": "user", "content": "hi"}]
    assert not r.stream and not r.include_usage and r.max_tokens is None and r.stop == [] and r.tools == []
    assert r.sampling.temperature == 0.7 and r.sampling.seed is None


def test_sampling_fields():
    r = parse(temperature=0, top_p=0.5, seed=42, presence_penalty=0.5, frequency_penalty=-1, max_tokens=7,
              stop="END", stream=True, stream_options={"include_usage": True})
    s = r.sampling
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == (0.0, 0, 1.0, 0.0)  # temperature 0: greedy, no filters
    assert (s.seed, s.presence_penalty, s.frequency_penalty) == (42, 0.5, -1.0)
    assert r.max_tokens == 7 and r.stop == ["END"] and r.stream and r.include_usage
    assert parse(max_completion_tokens=3).max_tokens == 3
    assert parse(temperature=1.2, top_p=0.9).sampling.top_p == 0.9


@pytest.mark.parametrize("body, match, param", [
    (b"{not json", "not valid JSON", None),
    (b"[1, 2]", "must be a JSON object", None),
    ({"messages": []}, "'messages' must be a non-empty list", "messages"),
    ({"messages": "hi"}, "'messages' must be a non-empty list", "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, r"messages\[0\].role is 'robot'", "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "'image_url' cannot be read",
     "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "needs its 'tool_call_id'", "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "'temperature' must be a number",
     "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "outside 0..2", "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "'max_tokens' is 0", "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5}, "whole number", "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "'n' must be 1", "n"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": ["a", "b", "c", "d", "e"]}, "at most 4", "stop"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "'tools'", "tools"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "cannot force", "tool_choice"),
    ({"messages": [{"role": "user", "content": "x"}], "model": 5}, "'model' must be a string", "model"),
])
def test_bad_requests_are_400_naming_the_field(body, match, param):
    refused(body, match, param=param)


def test_invalid_json_has_its_own_code():
    assert refused(b"{", "not valid JSON").code == "invalid_json"


@pytest.mark.parametrize("field, value, name", [
    ("stream", "false", "stream"), ("stream", 0, "stream"), ("stream", [], "stream"),
    ("stream_options", {"include_usage": "yes"}, "stream_options.include_usage"),
])
def test_flags_must_be_booleans_not_strings(field, value, name):
    body = {"messages": [{"role": "user", "content": "x"}], field: value}
    refused(body, f"'{name}' must be true or false", param=name)
    assert parse(stream=False).stream is False and parse(stream=True).stream is True
    assert parse(stream=None).stream is False


def test_json_nested_100k_deep_is_a_400_not_a_crash():
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert refused(deep, "nests deeper than").code == "invalid_json"


def test_json_nested_past_the_limit_names_the_field():
    nested: list = []
    for _ in range(200):
        nested = [nested]
    refused({"messages": [{"role": "user", "content": "x"}], "tools": nested}, "'tools' nests deeper than 64",
            param="tools")
    shallow = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": shallow}}
    assert parse(tools=[tool]).tools[0]["function"]["name"] == "f"


def test_messages_become_template_messages():
    wire = [{"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "23"}, {"type": "text", "text": "*47?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "calculator", "arguments": '{"expression": "23*47"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "1081"}]
    assert wire_to_template_messages(wire) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "23*47?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "calculator", "arguments": {"expression": "23*47"}}}]},
        {"role": "tool", "content": "1081", "tool_call_id": "call_1", "name": "calculator"}]


def test_call_arguments_that_are_not_a_json_object_are_refused():
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
    with pytest.raises(RequestError, match="arguments is a string that is not JSON"):
        wire_to_template_messages([{"role": "assistant", "content": None, "tool_calls": [call]}])
    call["function"]["arguments"] = "[1]"
    with pytest.raises(RequestError, match="must be a JSON object"):
        wire_to_template_messages([{"role": "assistant", "content": None, "tool_calls": [call]}])


def test_tools_are_normalized_and_tool_choice_none_drops_them():
    bare = {"name": "calculator", "parameters": CALC["function"]["parameters"]}
    assert parse(tools=[bare]).tools == [CALC]
    assert parse(tools=[CALC], tool_choice="none").tools == []


def test_reply_bodies():
    st = GenerationStats(reused_tokens=3, computed_tokens=5, generated_tokens=2, prefill_s=0.5, decode_s=0.25,
                         prefill_tps=10.0, decode_tps=4.0)
    call = tool_call_to_wire(ToolCall("call_1", "calculator", {"expression": "1+1"}, "raw"), 0)
    assert call == {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'}}
    u = usage(8, 2, 3)
    assert u == {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10,
                 "prompt_tokens_details": {"cached_tokens": 3}}
    body = completion_body("id1", 1, "m", "", [call], "tool_calls", u, timings(st))
    msg = body["choices"][0]["message"]
    assert msg["content"] is None and msg["tool_calls"][0] == {k: v for k, v in call.items() if k != "index"}
    assert body["choices"][0]["finish_reason"] == "tool_calls" and body["object"] == "chat.completion"
    assert body["timings"]["predicted_per_second"] == 4.0 and body["timings"]["prompt_ms"] == 500.0
    c = chunk_body("id1", 1, "m", {"content": "x"})
    assert c["object"] == "chat.completion.chunk" and c["choices"][0]["delta"] == {"content": "x"}
    assert c["choices"][0]["finish_reason"] is None
    assert error_body("no", code="x") == {"error": {"message": "no", "type": "invalid_request_error",
                                                    "param": None, "code": "x"}}


@pytest.mark.parametrize("body, param", [
    ('{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages[0].content"),
    ('{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": '
     '[{"type": "text", "text": "\\udfff"}]}]}', "messages[1].content[0].text"),
    ('{"messages": [{"role": "user", "content": "hi"}], "stop": ["\\ud83d"]}', "stop[0]"),
    ('{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": '
     '{"name": "f", "description": "x\\udc00", "parameters": {"type": "object"}}}]}', "tools[0].function.description"),
])
def test_a_lone_surrogate_is_a_400_naming_the_field(body, param):
    """JSON may escape half a UTF-16 pair; such a string has no UTF-8 form and would fail in the
    tokenizer with a 500."""
    e = refused(body.encode(), "lone surrogate", param=param)
    assert param in str(e)


def test_a_paired_surrogate_escape_is_one_character():
    r = parse_chat_request(b'{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}')
    assert r.messages[0]["content"] == "\U0001F600"
