"""hearth.engine.remote against a scripted loopback server: what a remote OpenAI-compatible server may send,
good and bad, and what the client makes of it. No model needed; Hearth's own server is in
test_remote_hearth.py."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from hearth.engine import EngineError, Sampling
from hearth.engine.remote import (RemoteAuthError, RemoteClient, RemoteConnectionError, RemoteError, RemoteHTTPError,
                           RemoteProtocolError, RemoteTimeout, error_detail, normalize_base_url, wire_messages)
from hearth.engine.remote.stream import sse_data
from hearth.engine.tools import MalformedToolCall, ToolCall, messages_with_tool_round

from server_fixtures import Reply, ScriptedServer, chunk, sse

CALC = {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic",
                                         "parameters": {"type": "object", "properties": {
                                             "expression": {"type": "string"}}, "required": ["expression"]}}}
HELLO = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
            chunk({}, "stop"), {"id": "c1", "object": "chat.completion.chunk", "choices": [],
                                "usage": {"prompt_tokens": 12, "completion_tokens": 2}}, "[DONE]")
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def scripted():
    s = ScriptedServer()
    yield s
    s.close()


def client(scripted, name, reply=None, **kw) -> RemoteClient:
    if reply is not None:
        scripted.script[name] = reply
    return RemoteClient(scripted.url(name), **kw)


def collect(stream):
    events = list(stream)
    assert events[-1].final and all(not e.final for e in events[:-1])
    return "".join(e.text for e in events), events[-1]


# --- the happy path --------------------------------------------------------------------------------

def test_streams_text_deltas_then_a_final_event_with_usage(scripted):
    c = client(scripted, "hello", Reply(HELLO))
    text, final = collect(c.chat(USER, "m", sampling=Sampling(temperature=0.0, seed=7), max_tokens=9))
    assert text == "Hello"
    assert final.stop_reason == "eog" and final.stats.finish_reason == "stop"
    assert final.stats.prompt_tokens == 12 and final.stats.completion_tokens == 2
    assert final.stats.speed_from == "client" and final.stats.ttft_s > 0
    method, path, body, headers = scripted.requests[-1]
    assert (method, path) == ("POST", "/hello/v1/chat/completions")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 9 and body["temperature"] == 0.0 and body["seed"] == 7
    assert body["messages"] == USER and "Authorization" not in headers


def test_api_key_is_sent_as_a_bearer_token(scripted):
    c = client(scripted, "hello", Reply(HELLO), api_key="s3cret")
    collect(c.chat(USER, "m"))
    assert scripted.requests[-1][3]["Authorization"] == "Bearer s3cret"


def test_models_are_listed(scripted):
    doc = {"object": "list", "data": [{"id": "llama-3-8b", "object": "model", "owned_by": "me", "created": 5},
                                      {"id": "qwen", "object": "model"}, {"no id": 1}]}
    c = client(scripted, "models", Reply(json.dumps(doc), ctype="application/json"))
    ms = c.models()
    assert [m.id for m in ms] == ["llama-3-8b", "qwen"] and ms[0].owned_by == "me" and ms[0].created == 5
    assert scripted.requests[-1][:2] == ("GET", "/models/v1/models")


def test_llama_cpp_timings_give_the_server_measured_speed(scripted):
    t = {"prompt_n": 10, "prompt_ms": 50.0, "prompt_per_second": 200.0, "predicted_n": 2,
         "predicted_ms": 40.0, "predicted_per_second": 50.0, "cache_n": 30}
    body = sse(chunk({"content": "a"}), chunk({"content": "b"}), chunk({}, "length", timings=t), "[DONE]")
    _, final = collect(client(scripted, "timed", Reply(body)).chat(USER, "m"))
    s = final.stats
    assert final.stop_reason == "length"
    assert (s.speed_from, s.decode_tps, s.prefill_tps, s.reused_tokens) == ("server", 50.0, 200.0, 30)


def test_tool_calls_are_assembled_from_fragments(scripted):
    body = sse(chunk({"role": "assistant", "content": None}),
               chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                      "function": {"name": "calculator", "arguments": ""}}]}),
               chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"expres'}}]}),
               chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'sion": "23*47"}'}}]}),
               chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "calculator",
                                                                               "arguments": "{oops"}}]}),
               chunk({}, "tool_calls"), "[DONE]")
    c = client(scripted, "tools", Reply(body))
    text, final = collect(c.chat(USER, "m", tools=[CALC]))
    assert text == "" and final.stop_reason == "tool_calls"
    good, bad = final.tool_calls
    assert good == ToolCall("call_a", "calculator", {"expression": "23*47"}, good.raw)
    assert isinstance(bad, MalformedToolCall) and bad.id == "call_b" and "not valid JSON" in bad.error
    assert scripted.requests[-1][2]["tools"] == [CALC]


def test_a_tool_round_goes_back_in_the_wire_format(scripted):
    """The app continues with engine.tools' template-shaped messages; the server must get OpenAI's."""
    call = ToolCall("call_a", "calculator", {"expression": "23*47"}, "")
    msgs = messages_with_tool_round(USER, "", [call], ["1081"], format="hermes")
    c = client(scripted, "hello", Reply(HELLO))
    collect(c.chat(msgs, "m", tools=[CALC]))
    sent = scripted.requests[-1][2]["messages"]
    assert sent[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "calculator",
                                                          "arguments": '{"expression": "23*47"}'}}]}
    assert sent[2] == {"role": "tool", "content": "1081", "tool_call_id": "call_a"}


def test_arguments_failing_the_schema_or_unknown_tools_are_malformed(scripted):
    body = sse(chunk({"tool_calls": [{"index": 0, "id": "x", "function": {"name": "calculator",
                                                                          "arguments": '{"expression": 5}'}}]}),
               chunk({"tool_calls": [{"index": 1, "id": "y", "function": {"name": "nope", "arguments": "{}"}}]}),
               chunk({}, "tool_calls"), "[DONE]")
    _, final = collect(client(scripted, "badargs", Reply(body)).chat(USER, "m", tools=[CALC]))
    a, b = final.tool_calls
    assert isinstance(a, MalformedToolCall) and "wrong arguments" in a.error
    assert isinstance(b, MalformedToolCall) and "no tool named 'nope'" in b.error


def test_a_server_ignoring_stream_true_is_read_as_one_completion(scripted):
    doc = {"id": "x", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    text, final = collect(client(scripted, "whole", Reply(json.dumps(doc), ctype="application/json"))
                          .chat(USER, "m"))
    assert text == "whole" and final.stop_reason == "eog" and final.stats.prompt_tokens == 3


def test_a_finish_reason_without_done_is_complete(scripted):
    text, final = collect(client(scripted, "nodone", Reply(sse(chunk({"content": "x"}), chunk({}, "stop"))))
                          .chat(USER, "m"))
    assert text == "x" and final.stop_reason == "eog"


def test_event_stream_parsing_follows_the_spec():
    lines = [": keep-alive", "event: message", "data: a", "data:b", "", "", "id: 3", "data: [DONE]"]
    assert list(sse_data(iter(lines))) == ["a\nb", "[DONE]"]


def test_base_urls_are_normalized():
    assert normalize_base_url("127.0.0.1:8080") == "http://127.0.0.1:8080/v1"
    assert normalize_base_url(" https://h/v1/ ") == "https://h/v1"
    assert normalize_base_url("http://h/openai/v2") == "http://h/openai/v2"
    with pytest.raises(RemoteError, match="http:// or https://"):
        normalize_base_url("ftp://h")
    with pytest.raises(RemoteError, match="empty"):
        normalize_base_url("  ")


def test_wire_messages_keep_only_api_fields():
    msgs = [{"role": "system", "content": "s", "extra": 1}, {"role": "user", "content": None},
            {"role": "tool", "content": "r", "tool_call_id": "c", "name": "calculator"}]
    assert wire_messages(msgs) == [{"role": "system", "content": "s"}, {"role": "user", "content": ""},
                                   {"role": "tool", "content": "r", "tool_call_id": "c"}]


# --- stop ------------------------------------------------------------------------------------------

def test_cancel_between_events_ends_with_cancelled_and_closes_the_connection(scripted):
    parts = [sse(chunk({"content": f"t{i} "})) for i in range(50)] + [sse(chunk({}, "stop"), "[DONE]")]
    c = client(scripted, "slow", Reply(parts=parts, pause=0.05))
    stop = threading.Event()
    events = []
    for ev in c.chat(USER, "m", cancel=stop):
        events.append(ev)
        if len(events) == 2:
            stop.set()
    assert [e.text for e in events[:2]] == ["t0 ", "t1 "]
    assert events[-1].final and events[-1].stop_reason == "cancelled" and len(events) == 3


def test_close_from_another_thread_unblocks_a_silent_server(scripted):
    """Stop while the server is still thinking (no bytes yet): the reader must not wait for it."""
    c = client(scripted, "silent", Reply(parts=[b": hi\n\n", sse(chunk({}, "stop"))], pause=30))
    stream = c.chat(USER, "m")
    got = []
    reader = threading.Thread(target=lambda: got.extend(stream))
    reader.start()
    time.sleep(0.5)
    t = time.perf_counter()
    stream.close()
    reader.join(5)
    assert not reader.is_alive() and time.perf_counter() - t < 5
    assert got and got[-1].stop_reason == "cancelled"


def test_cancel_before_the_request_sends_nothing(scripted):
    n = len(scripted.requests)
    events = list(client(scripted, "hello", Reply(HELLO)).chat(USER, "m", cancel=lambda: True))
    assert [e.stop_reason for e in events] == ["cancelled"] and len(scripted.requests) == n


# --- errors: readable RemoteErrors -----------------------------------------------------------------

def test_connection_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    c = RemoteClient(f"http://127.0.0.1:{port}")
    with pytest.raises(RemoteConnectionError, match=rf"cannot connect to http://127.0.0.1:{port}/v1.*running"):
        c.models()
    with pytest.raises(RemoteConnectionError):
        list(c.chat(USER, "m"))


def test_non_json_event(scripted):
    c = client(scripted, "nonjson", Reply(sse(chunk({"content": "ok"}), "<html>oops</html>")))
    events = []
    with pytest.raises(RemoteProtocolError, match="not JSON: '<html>oops</html>'"):
        for ev in c.chat(USER, "m"):
            events.append(ev)
    assert [e.text for e in events] == ["ok"]  # what came before the garbage was delivered


def test_truncated_stream_is_an_error_not_a_short_reply(scripted):
    c = client(scripted, "truncated", Reply(sse(chunk({"content": "half"}))[:-1] + b'data: {"id": "c1", "cho'))
    with pytest.raises(RemoteError, match="not JSON|stopped in the middle"):
        list(c.chat(USER, "m"))
    c = client(scripted, "cut", Reply(sse(chunk({"content": "half"}))))
    with pytest.raises(RemoteConnectionError, match="stopped in the middle.*no finish_reason and no \\[DONE\\]"):
        list(c.chat(USER, "m"))


def test_wrong_content_type(scripted):
    c = client(scripted, "html200", Reply("<html><title>Login</title><body>Please sign in</body></html>",
                                          ctype="text/html"))
    with pytest.raises(RemoteProtocolError, match="answered text/html, not an event stream: 'Login Please sign in'"):
        list(c.chat(USER, "m"))


def test_500_with_html(scripted):
    page = "<html><head><style>p {}</style><title>502 Bad Gateway</title></head><body><h1>nginx</h1></body></html>"
    c = client(scripted, "html500", Reply(page, status=500, ctype="text/html"))
    with pytest.raises(RemoteHTTPError) as e:
        list(c.chat(USER, "m"))
    assert e.value.status == 500
    assert "answered 500 Internal Server Error: 502 Bad Gateway nginx (the server failed" in str(e.value)
    assert isinstance(e.value, EngineError)


def test_401_says_check_the_api_key(scripted):
    body = json.dumps({"error": {"message": "Invalid API key", "type": "invalid_request_error",
                                 "code": "invalid_api_key"}})
    c = client(scripted, "auth", Reply(body, status=401, ctype="application/json"))
    with pytest.raises(RemoteAuthError, match="401 Unauthorized: Invalid API key \\(check the API key\\)") as e:
        c.models()
    assert e.value.code == "invalid_api_key"


def test_context_length_error_says_what_to_do(scripted):
    body = json.dumps({"error": {"message": "too long", "code": "context_length_exceeded"}})
    c = client(scripted, "ctx", Reply(body, status=400, ctype="application/json"))
    with pytest.raises(RemoteHTTPError, match="too long \\(the conversation is longer than the server's context"):
        list(c.chat(USER, "m"))


def test_error_event_in_the_stream(scripted):
    c = client(scripted, "errev", Reply(sse(chunk({"content": "a"}), {"error": {"message": "CUDA out of memory"}})))
    with pytest.raises(RemoteHTTPError, match="reported an error during the reply: CUDA out of memory"):
        list(c.chat(USER, "m"))


def test_models_that_are_not_json_or_not_a_list(scripted):
    with pytest.raises(RemoteProtocolError, match="did not answer JSON.*It works"):
        client(scripted, "m1", Reply("<h1>It works!</h1>", ctype="text/html")).models()
    with pytest.raises(RemoteProtocolError, match="did not list models"):
        client(scripted, "m2", Reply('{"models": []}', ctype="application/json")).models()


def test_timeout_when_the_server_never_answers(scripted):
    c = client(scripted, "hang", Reply(HELLO, hang=5), timeout=0.5)
    t = time.perf_counter()
    with pytest.raises(RemoteTimeout, match="sent nothing for 0.5 s"):
        list(c.chat(USER, "m"))
    assert time.perf_counter() - t < 3


def test_timeout_when_the_server_goes_silent_mid_reply(scripted):
    c = client(scripted, "stall", Reply(parts=[sse(chunk({"content": "a"})), sse(chunk({}, "stop"))], pause=5),
               timeout=0.5)
    events = []
    with pytest.raises(RemoteTimeout):
        for ev in c.chat(USER, "m"):
            events.append(ev)
    assert [e.text for e in events] == ["a"]


@pytest.mark.parametrize("body, message, code", [
    (b'{"error": {"message": "bad", "code": "x"}}', "bad", "x"),
    (b'{"error": "model not found"}', "model not found", None),                      # Ollama
    (b'{"detail": [{"msg": "field required"}, {"msg": "wrong type"}]}', "field required; wrong type", None),
    (b'{"object": "error", "message": "vllm says no", "code": 400}', "vllm says no", "400"),
    (b"plain words", "plain words", None),
])
def test_error_bodies_of_real_servers(body, message, code):
    assert error_detail(body) == (message, code)


@pytest.mark.parametrize("how", ["close", "cancel event", "cancel callable"])
def test_stop_before_the_server_answers_at_all(scripted, how):
    """A server still reading a long prompt has sent no headers yet: Stop must not wait for them."""
    c = client(scripted, "noheaders", Reply(HELLO, hang=30))
    flag = threading.Event()
    cancel = {"close": None, "cancel event": flag, "cancel callable": flag.is_set}[how]
    stream = c.chat(USER, "m", cancel=cancel)
    got = []
    reader = threading.Thread(target=lambda: got.extend(stream))
    reader.start()
    time.sleep(0.5)
    t = time.perf_counter()
    stream.close() if how == "close" else flag.set()
    reader.join(5)
    assert not reader.is_alive() and time.perf_counter() - t < 2
    assert [e.stop_reason for e in got] == ["cancelled"]


def test_reasoning_sent_apart_comes_back_inline_in_think_tags(scripted):
    body = sse(chunk({"role": "assistant", "reasoning_content": "Let me "}), chunk({"reasoning_content": "think."}),
               chunk({"content": "Hi"}), chunk({}, "stop"), "[DONE]")
    events = list(client(scripted, "think", Reply(body)).chat(USER, "m"))
    assert "".join(e.text for e in events) == "<think>\nLet me think.\n</think>\n\nHi"
    assert [e.reasoning for e in events[:3]] == ["Let me ", "think.", ""]
    # Ollama's field name, a reply that ends while still thinking: the block is closed at the end
    body = sse(chunk({"reasoning": "Hmm"}), chunk({}, "length"), "[DONE]")
    text, final = collect(client(scripted, "think2", Reply(body)).chat(USER, "m"))
    assert text == "<think>\nHmm\n</think>\n\n" and final.stop_reason == "length"
