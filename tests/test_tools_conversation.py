"""hearth.engine.tools.conversation: a tool round appended in the shapes chat templates render.

Rendered with the real templates in the default model (SmolLM2) and the tiny Qwen2/Qwen3 files,
which have no tool support (format "generic"), and with two small templates written here in the
shapes Hermes/Qwen 2.5 and Llama 3.1 templates use, so that the tool_calls and tool messages are
checked where a template does render them: what the template writes back for the assistant's call
must parse again, with the same parser, into the same call.
"""

import pytest

from hearth.engine.chat.chat_template import ChatTemplate
from hearth.engine.chat.chat_turn import ChatTurn, template_messages
from hearth.engine.gguf import GGUFFile
from hearth.engine.tools import (MalformedToolCall, ToolCall, ToolCallParser, ToolContext, ToolRegistry,
                          ToolResult, detect_format, fallback_system_prompt, messages_with_tool_round)

REGISTRY = ToolRegistry.builtin()
QUESTION = [{"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "What is 23*47, and what time is it in Tokyo?"}]
CALC = ToolCall("call_1", "calculator", {"expression": "23*47"},
                '<tool_call>\n{"name": "calculator", "arguments": {"expression": "23*47"}}\n</tool_call>')
CLOCK = ToolCall("call_2", "current_datetime", {"timezone": "Asia/Tokyo"},
                 '<tool_call>\n{"name": "current_datetime", "arguments": {"timezone": "Asia/Tokyo"}}\n</tool_call>')
BROKEN = MalformedToolCall("call_3", "<tool_call>{'name': 'calculator'}</tool_call>",
                           "the call is not valid JSON (Expecting property name)")

HERMES_STYLE = """\
{%- if tools %}<|im_start|>system
{{ messages[0].content if messages[0].role == 'system' else 'You are a helpful assistant.' }}

# Tools
Function signatures, one per line, within <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
To call a function, write <tool_call>{"name": <name>, "arguments": <arguments object>}</tool_call>.<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}
{% endif %}
{%- for tc in message.tool_calls or [] %}
{%- set f = tc.function if tc.function is defined else tc %}<tool_call>
{"name": "{{ f.name }}", "arguments": {{ f.arguments | tojson }}}
</tool_call>
{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user
{% endif %}<tool_response>
{{ message.content }}
</tool_response>
{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>
{% endif %}
{%- elif message.role != 'system' %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

LLAMA3_STYLE = """\
{%- for message in messages %}<|start_header_id|>{{ 'ipython' if message.role == 'tool' else message.role }}<|end_header_id|>

{% if message.role == 'system' and tools %}{{ message.content }}
Respond with a JSON object {"name": function name, "parameters": dictionary of arguments}. Functions:
{% for t in tools %}{{ t | tojson }}
{% endfor %}{% endif %}
{%- if message.tool_calls %}{% for tc in message.tool_calls %}{{ {"name": tc.function.name, "parameters": tc.function.arguments} | tojson }}{% endfor %}
{%- elif message.role != 'system' or not tools %}{{ message.content }}{% endif %}<|eot_id|>
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""


def test_shapes_for_a_template_with_tool_support():
    results = [REGISTRY.execute(CALC), ToolResult("Sunday 29 March 2026, 09:30:00 in Asia/Tokyo")]
    msgs = messages_with_tool_round(QUESTION, "Let me check.", [CALC, CLOCK], results, format="hermes")
    assert msgs[:2] == QUESTION and msgs[:2] is not QUESTION
    assert msgs[2] == {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "23*47"}}},
        {"id": "call_2", "type": "function", "function": {"name": "current_datetime",
                                                          "arguments": {"timezone": "Asia/Tokyo"}}}]}
    assert msgs[3] == {"role": "tool", "tool_call_id": "call_1", "name": "calculator", "content": "1081"}
    assert msgs[4]["tool_call_id"] == "call_2" and msgs[4]["content"].startswith("Sunday")
    assert len(msgs) == 5


def test_the_messages_are_the_same_for_every_format():
    # writing calls into the text for a generic template is chat_turn.template_messages' job alone:
    # a copy here as well showed the model each call twice
    for text in ("", "Sure."):
        msgs = messages_with_tool_round(QUESTION, text, [CALC], [ToolResult("1081")], format="generic")
        assert msgs == messages_with_tool_round(QUESTION, text, [CALC], [ToolResult("1081")], format="hermes")
        assert msgs[2]["content"] == text and msgs[2]["tool_calls"][0]["function"]["name"] == "calculator"


def test_a_malformed_call_goes_back_as_an_error_with_its_raw_text_kept():
    msgs = messages_with_tool_round(QUESTION, "", [CALC, BROKEN], [ToolResult("1081"), None], format="hermes")
    assert msgs[2]["content"] == BROKEN.raw
    assert [tc["id"] for tc in msgs[2]["tool_calls"]] == ["call_1"]
    assert msgs[4]["role"] == "tool" and msgs[4]["tool_call_id"] == "call_3"
    assert msgs[4]["content"].startswith("Error: your tool call could not be used: the call is not valid JSON")


def test_results_must_match_calls():
    with pytest.raises(ValueError, match="2 calls but 1 results"):
        messages_with_tool_round(QUESTION, "", [CALC, CLOCK], [ToolResult("1")])
    with pytest.raises(ValueError, match="no result for the call call_1"):
        messages_with_tool_round(QUESTION, "", [CALC], [None])


def _model_template(path) -> ChatTemplate:
    return ChatTemplate.from_gguf(GGUFFile.open(path))


@pytest.fixture(scope="module")
def real_templates(default_model_path, reference_dir):
    return {"smollm2": _model_template(default_model_path),
            "qwen2": _model_template(reference_dir / "tiny" / "qwen2" / "tiny-qwen2.gguf"),
            "qwen3": _model_template(reference_dir / "tiny" / "qwen3" / "tiny-qwen3.gguf")}


@pytest.mark.parametrize("name", ["smollm2", "qwen2", "qwen3"])
def test_real_templates_without_tool_support_render_a_full_round(real_templates, name):
    template = real_templates[name]
    fmt = detect_format(template.source)
    assert fmt == "generic"
    msgs = messages_with_tool_round(QUESTION, "", [CALC, BROKEN], [REGISTRY.execute(CALC), None], format=fmt)
    shown = template_messages(ChatTurn(msgs, REGISTRY.definitions()), fmt)   # as every prompt is built
    prompt = template.render(shown, tools=REGISTRY.definitions())
    assert shown[0]["content"] == "You are helpful.\n\n" + fallback_system_prompt(REGISTRY)
    assert prompt.count("<tools>") == 1 and '"name": "calculator"' in prompt
    assert "<|im_start|>assistant\n" + BROKEN.raw + "\n" + CALC.raw + "<|im_end|>" in prompt
    assert prompt.count('"expression": "23*47"') == 1          # the call shown once
    assert "<|im_start|>tool\n1081<|im_end|>" in prompt
    assert "<|im_start|>tool\nError: your tool call could not be used" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    # the assistant turn as rendered parses back into the same calls
    turn = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    p = ToolCallParser(fmt, REGISTRY)
    events = p.feed(turn) + p.finish()
    assert [(e.name, e.arguments) for e in events if isinstance(e, ToolCall)] == [("calculator", {"expression": "23*47"})]
    assert any(isinstance(e, MalformedToolCall) for e in events)


def test_hermes_style_template_renders_calls_and_responses_that_parse_back():
    template = ChatTemplate(HERMES_STYLE)
    fmt = detect_format(template.source)
    assert fmt == "hermes"
    results = [REGISTRY.execute(CALC), REGISTRY.execute(CLOCK, ToolContext())]
    msgs = messages_with_tool_round(QUESTION, "Let me check.", [CALC, CLOCK], results, format=fmt)
    prompt = template.render(msgs, tools=REGISTRY.definitions())
    assert "<tool_response>\n1081\n</tool_response>" in prompt
    assert prompt.count("<|im_start|>user\n") == 2            # both responses in one user turn
    turn = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    p = ToolCallParser(fmt, REGISTRY)
    events = p.feed(turn) + p.finish()
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [(CALC.name, CALC.arguments), (CLOCK.name, CLOCK.arguments)]
    assert "".join(e.text for e in events if not isinstance(e, (ToolCall, MalformedToolCall))).strip() == "Let me check."


def test_llama3_style_template_renders_calls_that_parse_back():
    template = ChatTemplate(LLAMA3_STYLE)
    fmt = detect_format(template.source)
    assert fmt == "llama3"
    msgs = messages_with_tool_round(QUESTION, "", [CALC], [REGISTRY.execute(CALC)], format=fmt)
    prompt = template.render(msgs, tools=REGISTRY.definitions())
    assert "<|start_header_id|>ipython<|end_header_id|>\n\n1081<|eot_id|>" in prompt
    turn = prompt.split("<|start_header_id|>assistant<|end_header_id|>\n\n")[1].split("<|eot_id|>")[0]
    p = ToolCallParser(fmt, REGISTRY)
    assert p.feed(turn) + p.finish() == [ToolCall("call_1", "calculator", {"expression": "23*47"}, turn)]
