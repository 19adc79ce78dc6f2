"""engine/server/chat.py and presets.py: requests on the real engine through ChatService (no HTTP):
the prompt the template sees, tool calls assembled from the model's text, the saved presets' prefix
images, the history. SmolLM2's template has no tool support ("generic" format)."""

from __future__ import annotations

import json
import threading

import pytest

from hearth.engine import Engine
from hearth.engine.chat.chat_turn import prefix_text, template_messages
from hearth.engine.prefix import PrefixStore
from hearth.engine.server import ChatService, RequestError
from hearth.engine.server.chat import ReplyAssembler
from hearth.engine.server.presets import PresetPrefixes, read_presets, tools_key
from hearth.engine.server.protocol import parse_chat_request
from hearth.engine.server.worker import JobFailed

pytestmark = pytest.mark.slow
CALC = {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "23*47"}}\n</tool_call>'


@pytest.fixture(scope="module")
def engine():
    e = Engine.load(n_ctx=1024)
    yield e
    e.close()


def request(messages, **fields):
    return parse_chat_request(json.dumps({"messages": messages, "temperature": 0, **fields}).encode())


def run(service, req):
    items = list(service.submit("chatcmpl-test", req).items())
    return items, items[-1][1]


# --- tool calls from the model's text --------------------------------------------------------------

@pytest.mark.parametrize("split", [1, 3, 7, 1000])
def test_a_call_in_the_models_text_becomes_an_openai_tool_call(split):
    text = "Let me compute that. " + CALL
    reply = ReplyAssembler("generic", [CALC])
    items = [i for k in range(0, len(text), split) for i in reply.feed(text[k:k + split])] + reply.finish()
    assert "".join(v for k, v in items if k == "text") == "Let me compute that. " == reply.content
    calls = [v for k, v in items if k == "tool_call"]
    assert calls == reply.tool_calls == [{"index": 0, "id": "call_1", "type": "function", "function": {
        "name": "calculator", "arguments": '{"expression": "23*47"}'}}]


def test_a_malformed_call_is_shown_as_text_and_no_tools_means_no_parsing():
    bad = '<tool_call>{"name": "calculator", "arguments": {"expression": 5}}</tool_call>'
    reply = ReplyAssembler("hermes", [CALC])
    items = reply.feed(bad) + reply.finish()
    assert items == [("text", bad)] and reply.tool_calls == []
    plain = ReplyAssembler("generic", [])
    assert plain.feed(CALL) + plain.finish() == [("text", CALL)] and plain.tool_calls == []


def test_a_template_without_tools_gets_them_in_the_system_prompt():
    req = request([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "23*47?"},
                   {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                       "name": "calculator", "arguments": '{"expression": "23*47"}'}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "1081"}], tools=[CALC])
    msgs = template_messages(req, "generic")
    assert msgs[0]["content"].startswith("Be brief.\n\nYou can call tools") and '"calculator"' in msgs[0]["content"]
    assert "tool_calls" not in msgs[2] and msgs[2]["content"] == CALL
    assert msgs[3] == {"role": "tool", "content": "1081", "tool_call_id": "c1", "name": "calculator"}
    assert template_messages(req, "hermes") == req.messages  # such templates render tools themselves
    no_system = template_messages(request([{"role": "user", "content": "x"}], tools=[CALC]), "generic")
    assert no_system[0]["role"] == "system" and no_system[0]["content"].startswith("You can call tools")


# --- requests on the engine ------------------------------------------------------------------------

def test_a_request_puts_start_text_and_done(engine):
    service = ChatService(engine)
    try:
        items, out = run(service, request([{"role": "user", "content": "Say hi"}], max_tokens=3))
        kinds = [k for k, _ in items]
        assert kinds[0] == "start" and kinds[-1] == "done" and set(kinds[1:-1]) == {"text"}
        assert items[0][1]["prompt_tokens"] == out.prompt_tokens > 0
        assert out.content == "".join(v for k, v in items if k == "text") and out.content
        assert (out.stop_reason, out.finish_reason, out.stats.generated_tokens) == ("length", "length", 3)
        assert service.stats()["generations"][-1]["stop_reason"] == "length"
    finally:
        service.close()


def test_max_tokens_is_capped_by_the_context_and_overflow_is_refused(engine):
    service = ChatService(engine)
    try:
        with pytest.raises(JobFailed) as e:
            run(service, request([{"role": "user", "content": "word " * 1100}]))
        assert isinstance(e.value.error, RequestError) and e.value.error.code == "context_length_exceeded"
        assert service.stats()["counts"]["stop_error"] == 1
    finally:
        service.close()


# --- presets' prefix images ------------------------------------------------------------------------

def presets_file(path, *presets):
    path.write_text(json.dumps({"format": "hearth-presets", "version": 1, "presets": [
        {"id": f"p{i}", "name": name, "system_prompt": system, "tools": tools, "sampling": {}, "model": ""}
        for i, (name, system, tools) in enumerate(presets)]}))
    return path


def test_presets_are_read_and_matched_on_system_prompt_and_tools(tmp_path):
    bare = {"name": "calculator", "description": "Evaluate arithmetic", "parameters": CALC["function"]["parameters"]}
    f = presets_file(tmp_path / "presets.json", ("Coder", "You write code.", []), ("Calc", "Math.", [bare]))
    pp = PresetPrefixes(f)
    assert [p.name for p in read_presets(f)] == ["Coder", "Calc"]
    assert pp.match("You write code.", []).name == "Coder"
    assert pp.match("Math.", [CALC]).name == "Calc"          # the same tools, spelled another way
    assert pp.match("Math.", []) is None and pp.match("You write code", []) is None
    assert tools_key([CALC]) == tools_key([bare]) != tools_key([])
    presets_file(f, ("Writer", "You write prose.", []))       # the file changed: read again
    assert pp.match("You write code.", []) is None and pp.match("You write prose.", []).name == "Writer"
    f.write_text("{broken")
    assert pp.match("You write prose.", []) is None and "cannot read the presets file" in pp.last_error
    assert PresetPrefixes(tmp_path / "missing.json").presets() == []


def test_prefix_text_is_the_apps(engine):
    from hearth.app.chat_source import LocalBackend  # Qt-free: the app's rule for a preset's prefix
    app = LocalBackend(cache_dir="unused", cap_bytes=0)
    app.engine = engine
    for system, tools in [("You write code.", []), ("", []), ("Math.", [CALC])]:
        msgs = [{"role": "system", "content": system}] if system else []
        assert prefix_text(engine, msgs, tools) == app.prefix_text(system, tools)
    assert prefix_text(engine, [{"role": "system", "content": "Hi."}], []) == "<|im_start|>system\nHi.<|im_end|>\n"


def test_a_matching_request_computes_then_restores_its_preset_prefix(engine, tmp_path):
    f = presets_file(tmp_path / "presets.json", ("Pirate", "You are a pirate. Answer like one.", []))
    store = PrefixStore(tmp_path / "prefixes")
    service = ChatService(engine, presets=PresetPrefixes(f, store))
    pirate = [{"role": "system", "content": "You are a pirate. Answer like one."}, {"role": "user", "content": "Hi"}]
    other = [{"role": "system", "content": "You are a robot."}, {"role": "user", "content": "Hi"}]
    try:
        engine.reset()
        _, first = run(service, request(pirate, max_tokens=1))
        assert first.prefix["action"] == "computed" and first.prefix["preset"] == "Pirate"
        assert len(store.entries()) == 1 and store.entries()[0].label == "Pirate"
        _, unmatched = run(service, request(other, max_tokens=1))
        assert unmatched.prefix is None
        _, again = run(service, request(pirate, max_tokens=1))
        assert again.prefix["action"] == "restored" and again.prefix["tokens"] == first.prefix["tokens"]
        assert again.stats.reused_tokens >= first.prefix["tokens"]     # generation started after the prefix
        assert again.content == first.content
        assert service.stats()["generations"][-1]["prefix"]["action"] == "restored"
    finally:
        service.close()


def test_a_request_matching_a_preset_with_tools_gets_its_prefix_and_a_reply(engine, tmp_path):
    """The preset's system messages and the reply's head are two things: a match with tools still
    streams a reply (the head is the client's text, not the preset's messages)."""
    f = presets_file(tmp_path / "presets.json", ("Calc", "Math.", [CALC]))
    service = ChatService(engine, presets=PresetPrefixes(f, PrefixStore(tmp_path / "prefixes")))
    try:
        engine.reset()
        items, out = run(service, request([{"role": "system", "content": "Math."},
                                           {"role": "user", "content": "2+2?"}], tools=[CALC], max_tokens=4))
        assert out.prefix["preset"] == "Calc" and out.prefix["action"] == "computed"
        assert out.stop_reason in ("eog", "length", "stop", "tool_calls") and items[0][0] == "start"
    finally:
        service.close()


def test_a_long_prompt_is_read_in_chunks_and_counted_as_computed(engine):
    service = ChatService(engine)
    story = " ".join(f"Line {i} of a long letter about the weather." for i in range(45))
    try:
        engine.reset()
        _, out = run(service, request([{"role": "user", "content": story}], max_tokens=1))
        s = out.stats
        assert out.prompt_tokens > 3 * 128 and s.reused_tokens == 0 and s.computed_tokens == out.prompt_tokens
        assert s.prefill_tps > 0 and s.ttft_s >= s.prefill_s > 0
    finally:
        service.close()


def test_a_client_leaving_before_the_prefill_frees_the_engine(engine):
    service = ChatService(engine)
    story = " ".join(f"Line {i} of another long letter." for i in range(60))
    try:
        engine.reset()
        job = service.submit("chatcmpl-gone", request([{"role": "user", "content": story}], max_tokens=50))
        items = job.items()
        assert next(items)[0] == "start"
        job.cancel.set()
        (kind, out), = list(items)
        assert kind == "done" and out.stop_reason == "cancelled" and out.stats.generated_tokens == 0
        assert len(engine.tokens) < out.prompt_tokens       # the prompt was not read to the end
        assert service.stats()["generations"][-1]["client_left"]
    finally:
        service.close()


def test_text_after_a_call_ends_the_reply():
    reply = ReplyAssembler("generic", [CALC])
    items = reply.feed(CALL + "\n") + reply.feed("The result is 1084.") + reply.feed(" More.") + reply.finish()
    assert [k for k, _ in items] == ["tool_call"] and reply.ended and reply.content == ""


def test_a_reply_begun_by_the_client_is_parsed_but_not_echoed():
    head = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "23*47"}'
    reply = ReplyAssembler("generic", [CALC], head)
    items = reply.feed("}\n</tool_call>") + reply.finish()
    assert items == [("tool_call", reply.tool_calls[0])] and reply.content == ""
    assert json.loads(reply.tool_calls[0]["function"]["arguments"]) == {"expression": "23*47"}


def test_the_service_can_use_an_apps_own_engine_thread(engine):
    from hearth.engine.server.worker import Job

    class AppThread:
        """Stands for the app's engine worker: runs each job on one thread it owns."""
        queued = 0

        def __init__(self):
            self.names = []

        def submit(self, fn):
            job = Job(fn)
            t = threading.Thread(target=lambda: (self.names.append(threading.current_thread().name),
                                                 job.run(engine)), name="app-engine")
            t.start()
            return job

        def close(self):
            pass

    app = AppThread()
    service = ChatService(engine, worker=app)
    _, out = run(service, request([{"role": "user", "content": "Say hi"}], max_tokens=1))
    assert out.stats.generated_tokens == 1 and app.names == ["app-engine"]
    service.close()
