"""hearth.engine.remote end to end against Hearth's own server on 127.0.0.1 (the real default model, greedy,
a few tokens): the client streams the engine's reply, Stop reaches the engine, a tool round goes
through, and a server killed mid-reply gives a readable RemoteError without hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hearth.engine import Sampling
from hearth.engine.remote import RemoteClient, RemoteConnectionError, RemoteError, RemoteHTTPError
from hearth.engine.tools import ToolCall, calculate, messages_with_tool_round

from server_fixtures import hearth_server, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
HI = [{"role": "user", "content": "Say hi"}]
STORY = [{"role": "user", "content": "Tell me a long story about a dragon."}]
CALC = {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


@pytest.fixture(scope="module")
def served():
    with hearth_server(n_ctx=512) as (server, service):
        yield server, service


@pytest.fixture
def client(served):
    with RemoteClient(served[0].url, timeout=120) as c:
        yield c


def last_run(service, before):
    return wait_for(lambda: len(service.history) > before and service.history[-1], timeout=60)


def test_models(client, served):
    assert [m.id for m in client.models()] == [served[1].model_id]


def test_streams_the_engines_reply_with_usage_and_speed(client, served):
    _, service = served
    events = list(client.chat(HI, service.model_id, sampling=Sampling.greedy(), max_tokens=5))
    final = events[-1]
    assert final.final and final.stop_reason == "length" and all(e.text for e in events[:-1])
    assert len(events) - 1 == 5 == final.stats.completion_tokens == final.stats.generated_tokens
    assert final.stats.prompt_tokens > 0 and final.stats.speed_from == "server" and final.stats.decode_tps > 0
    assert final.stats.computed_tokens + final.stats.reused_tokens == final.stats.prompt_tokens
    # the engine, asked directly, says the same
    def direct(engine, job):
        job.put("".join(e.text for e in engine.generate(engine.render_chat(HI), 5, Sampling.greedy())))
    assert "".join(e.text for e in events) == next(service.worker.submit(direct).items())


def test_stop_mid_stream_stops_the_engine(client, served):
    _, service = served
    before = len(service.history)
    stop = threading.Event()
    events = []
    for ev in client.chat(STORY, service.model_id, sampling=Sampling.greedy(), max_tokens=300, cancel=stop):
        events.append(ev)
        if len(events) == 3:
            stop.set()
    assert events[-1].stop_reason == "cancelled" and len(events) == 4
    run = last_run(service, before)
    assert run["stop_reason"] == "cancelled" and run["client_left"] and run["generated_tokens"] < 50


def test_close_from_another_thread_stops_the_engine(client, served):
    """The app's Stop button: the GUI thread closes the stream the worker thread is reading."""
    _, service = served
    before = len(service.history)
    stream = client.chat(STORY, service.model_id, sampling=Sampling.greedy(), max_tokens=300)
    got = []
    reader = threading.Thread(target=lambda: got.extend(stream))
    reader.start()
    wait_for(lambda: len(got) >= 2, timeout=120, every=0.01)
    stream.close()
    reader.join(10)
    assert not reader.is_alive() and got[-1].stop_reason == "cancelled"
    run = last_run(service, before)
    assert run["stop_reason"] == "cancelled" and run["generated_tokens"] < 300


def test_a_tool_call_round_trip(client, served):
    """The model's call comes back as an engine.tools ToolCall; its result goes back and the chat
    continues. (SmolLM2 never calls a tool by itself: the reply is begun by the client.)"""
    _, service = served
    # not a near tie between ending the call and "\n\n": tests/test_server_openai.py, BEGUN_CALL
    begun = [{"role": "user", "content": "Use the calculator to find 23*47."}, {"role": "assistant", "content":
             '<tool_call>\n{"name": "calculator", "arguments": {"expression": "23*47"}}'}]
    events = list(client.chat(begun, service.model_id, tools=[CALC], sampling=Sampling.greedy(), max_tokens=40))
    final = events[-1]
    assert final.stop_reason == "tool_calls" and final.stats.finish_reason == "tool_calls"
    (call,) = final.tool_calls
    assert isinstance(call, ToolCall) and (call.name, call.arguments) == ("calculator", {"expression": "23*47"})
    assert "".join(e.text for e in events) == ""
    result = calculate(call.arguments["expression"])
    msgs = messages_with_tool_round(begun[:1], "", [call], [str(result)], format="generic")
    after = list(client.chat(msgs, service.model_id, tools=[CALC], sampling=Sampling.greedy(), max_tokens=3))
    assert after[-1].final and after[-1].stop_reason in ("length", "eog") and after[-1].tool_calls == []
    assert "".join(e.text for e in after)


def test_a_tool_round_continues_the_chat(client, served):
    _, service = served
    call = ToolCall("call_1", "calculator", {"expression": "23*47"}, "")
    msgs = messages_with_tool_round([{"role": "user", "content": "What is 23*47?"}], "", [call], ["1081"],
                                    format="generic")
    events = list(client.chat(msgs, service.model_id, tools=[CALC], sampling=Sampling.greedy(), max_tokens=3))
    assert events[-1].final and events[-1].stop_reason in ("length", "eog") and events[-1].tool_calls == []


def test_server_errors_arrive_as_remote_errors(client, served):
    _, service = served
    with pytest.raises(RemoteHTTPError, match="404 Not Found: no model 'gpt-4o' here") as e:
        list(client.chat(HI, "gpt-4o", max_tokens=1))
    assert e.value.code == "model_not_found"
    with pytest.raises(RemoteHTTPError, match="this server's context holds 512.*start a new chat") as e:
        list(client.chat([{"role": "user", "content": "word " * 600}], service.model_id, max_tokens=1))
    assert e.value.status == 400


def test_a_server_killed_mid_reply(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "hearth.engine", "serve", "--port", "0", "--ctx", "512", "--no-presets"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()   # "Hearth server on http://127.0.0.1:PORT/v1 (model ...)"
        assert line.startswith("Hearth server on "), line
        url = line.split()[3]
        c = RemoteClient(url, timeout=60)
        got = []
        t = time.perf_counter()
        with pytest.raises(RemoteConnectionError, match="the server may have stopped or crashed"):
            for ev in c.chat(STORY, c.models()[0].id, sampling=Sampling.greedy(), max_tokens=300):
                got.append(ev)
                if len(got) == 2:
                    proc.send_signal(signal.SIGKILL)
        assert len(got) >= 2 and time.perf_counter() - t < 120
        proc.wait(30)
        with pytest.raises(RemoteConnectionError, match="cannot connect"):   # and it stays down
            c.models()
        assert isinstance(RemoteConnectionError("x"), RemoteError)
    finally:
        proc.kill()
        proc.wait(30)
