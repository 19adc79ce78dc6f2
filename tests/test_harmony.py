"""gpt-oss's harmony channels (engine/chat/harmony.py) as the reply streams: analysis is the thinking,
final the answer, a commentary message to a function a tool call the tool parser reads; through
ThinkingSplitter as the app uses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hearth.engine.chat.chat_template import ChatTemplate
from hearth.engine.chat.harmony import HarmonyStream
from hearth.engine.chat.preset_format import Preset, PresetError, dumps, parse
from hearth.engine.chat.reasoning import HARMONY_ANALYSIS, ThinkingSplitter, open_tag_at_end
from hearth.engine.tools.parser import ToolCall, ToolCallParser, detect_format

HARMONY = (Path(__file__).parent / "data" / "templates" / "gpt-oss-harmony.jinja").read_text(encoding="utf-8")

REPLY = ("<|channel|>analysis<|message|>User asks the weather. Use the tool.<|end|>"
         "<|start|>assistant<|channel|>final<|message|>It is sunny in Oslo.<|return|>")
CALL = ("<|channel|>analysis<|message|>Need the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Oslo"}<|call|>')
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def split(pieces, splitter):
    thinking = answer = ""
    for p in pieces:
        t, a = splitter.feed(p)
        thinking, answer = thinking + t, answer + a
    t, a = splitter.finish()
    return thinking + t, answer + a


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_analysis_is_thinking_and_final_is_the_answer_in_pieces_of_any_size(size):
    s = ThinkingSplitter()
    thinking, answer = split([REPLY[i:i + size] for i in range(0, len(REPLY), size)], s)
    assert thinking == "User asks the weather. Use the tool."
    assert answer == "It is sunny in Oslo."
    assert s.thinking_done and s.state == "answer"


def test_the_end_of_generation_token_may_never_arrive():
    """The engine stops on <|return|> / <|call|> without passing their text on."""
    s = HarmonyStream()
    assert split([REPLY.removesuffix("<|return|>")], s) == ("User asks the weather. Use the tool.",
                                                               "It is sunny in Oslo.")


def test_a_commentary_call_becomes_a_tool_call_the_parser_reads():
    for text in (CALL, CALL.removesuffix("<|call|>")):
        thinking, answer = split(list(text), ThinkingSplitter())
        assert thinking == "Need the weather."
        assert detect_format(HARMONY) == "hermes"    # the template renders the tools itself
        parser = ToolCallParser(detect_format(HARMONY), [WEATHER])
        events = parser.feed(answer) + parser.finish()
        calls = [e for e in events if isinstance(e, ToolCall)]
        assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Oslo"})]


def test_a_recipient_before_the_channel_and_a_preamble_to_the_user():
    text = ("<|channel|>commentary<|message|>Checking the weather now.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{}")
    thinking, answer = split(list(text), ThinkingSplitter())
    assert thinking == ""
    assert answer == 'Checking the weather now.<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'


def test_a_reply_begun_inside_the_analysis_channel():
    prompt = ChatTemplate(HARMONY, model_name="gpt-oss").render([{"role": "user", "content": "Hi"}])
    assert open_tag_at_end(prompt) == HARMONY_ANALYSIS
    s = ThinkingSplitter()   # the app's: the reply's first piece is the prompt's open tag and a newline
    thinking, answer = split([HARMONY_ANALYSIS + "\n", "hmm, a greeting", "<|end|><|start|>assistant",
                              "<|channel|>final<|message|>Hello!"], s)
    assert (thinking, answer) == ("hmm, a greeting", "Hello!")
    s = ThinkingSplitter(HARMONY_ANALYSIS)   # or told where the prompt left off
    assert split(["still thinking"], s) == ("still thinking", "") and not s.thinking_done


def test_plain_text_and_think_tags_are_unchanged():
    assert split(["Hello", " there"], ThinkingSplitter()) == ("", "Hello there")
    assert split(["<think>a</think>b"], ThinkingSplitter()) == ("a", "b")
    assert split(["<|chan", "nel|>final<|message|>Hi"], ThinkingSplitter()) == ("", "Hi")


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
def test_reasoning_effort_reaches_the_prompt(effort):
    t = ChatTemplate(HARMONY, model_name="gpt-oss")
    prompt = t.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                      tools=[WEATHER], reasoning_effort=effort)
    assert f"Reasoning: {effort}\n" in prompt and "type get_weather" in prompt and "Be brief." in prompt


def test_the_preset_keeps_its_reasoning_effort_and_refuses_others():
    p = Preset("p1", "Deep", reasoning_effort="high")
    back, problems = parse(dumps([p]), "presets.json")
    assert back[0].reasoning_effort == "high" and not problems
    assert Preset.from_json({"name": "Plain"}).reasoning_effort == ""
    with pytest.raises(PresetError, match=r"preset.reasoning_effort: 'extreme' is not one of low, medium, high"):
        Preset.from_json({"name": "Bad", "reasoning_effort": "extreme"})
