"""A tool round as Qwen2.5-Coder-0.5B-Instruct's own chat template expects it (issue 30).

The prompt Hearth builds for the model's second reply (chat_turn.render_prompt over
messages_with_tool_round, as the app, the server and bench.tool_calls build it) must be the text
that the template in the GGUF's header renders for the canonical OpenAI-style messages, rendered
here with plain jinja2 set up as transformers' apply_chat_template sets it up. Only the header of
the joined file is read: no weights, no model run.
"""

from __future__ import annotations

import json

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hearth.engine.chat.chat_template import ChatTemplate
from hearth.engine.chat.chat_turn import ChatTurn, render_prompt
from hearth.engine.gguf import GGUFFile
from hearth.engine.tools import ToolCall, ToolRegistry, ToolResult, detect_format, messages_with_tool_round
from model_paths import QWEN_MISSING, qwen_coder_model_path

REGISTRY = ToolRegistry.builtin()
TOOLS = REGISTRY.definitions()
QUESTION = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Convert 5 miles to kilometers, then multiply the result by 3."}]
# the model wrote its call as a fenced block: the history shows it in the template's own shape
MILES = ToolCall("call_1", "convert_units", {"value": 5, "from_unit": "mi", "to_unit": "km"},
                 '```json\n{"name": "convert_units", "arguments": {"value": 5, "from_unit": "mi", "to_unit": "km"}}\n```')
CALC = ToolCall("call_2", "calculator", {"expression": "8.04672 * 3"}, "")


class _TemplateEngine:
    """What render_prompt needs of an engine: its chat template."""

    def __init__(self, template: ChatTemplate):
        self.template = template

    def render_chat(self, messages, tools=None, add_generation_prompt=True, **variables):
        return self.template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, **variables)


@pytest.fixture(scope="module")
def qwen_source() -> str:
    path = qwen_coder_model_path()
    if path is None:
        pytest.skip(QWEN_MISSING)
    return GGUFFile.open(path, check_types=False).metadata["tokenizer.chat_template"]


def _reference(source: str, messages: list[dict], tools: list[dict]) -> str:
    """The template rendered as transformers renders it: sandboxed, trim/lstrip blocks, loop
    controls, a tojson that keeps non-ASCII and does not escape HTML."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"], undefined=jinja2.Undefined)
    env.filters["tojson"] = lambda v, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        v, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    return env.from_string(source).render(messages=messages, tools=tools, add_generation_prompt=True,
                                          bos_token="", eos_token="<|im_end|>")


def _canonical(calls: list[ToolCall], results: list[str]) -> list[dict]:
    """OpenAI-style messages: the assistant's calls with `arguments` objects, one `tool` message each."""
    return QUESTION + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}
    ] + [{"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(calls, results)]


def _hearth(source: str, calls: list[ToolCall], results: list[str]) -> str:
    msgs = messages_with_tool_round(QUESTION, "", calls, [ToolResult(r) for r in results], format="hermes")
    return render_prompt(_TemplateEngine(ChatTemplate(source)), ChatTurn(msgs, TOOLS), detect_format(source))[0]


def test_the_template_is_qwens_hermes_style(qwen_source):
    assert detect_format(qwen_source) == "hermes"


def test_round_two_prompt_is_what_the_template_renders_for_canonical_messages(qwen_source):
    prompt = _hearth(qwen_source, [MILES], ["5 mi = 8.04672 km"])
    assert prompt == _reference(qwen_source, _canonical([MILES], ["5 mi = 8.04672 km"]), TOOLS)
    # the call in the template's own tags with an arguments object (not a JSON string, not the
    # model's fence), the result wrapped in <tool_response> in a user turn, then the reply opens
    assert prompt.endswith(
        '<|im_start|>assistant\n<tool_call>\n{"name": "convert_units", "arguments": '
        '{"value": 5, "from_unit": "mi", "to_unit": "km"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n5 mi = 8.04672 km\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    assert "```" not in prompt


def test_two_results_share_one_user_turn_in_call_order(qwen_source):
    results = ["5 mi = 8.04672 km", "24.14016"]
    prompt = _hearth(qwen_source, [MILES, CALC], results)
    assert prompt == _reference(qwen_source, _canonical([MILES, CALC], results), TOOLS)
    assert prompt.endswith("<|im_start|>user\n<tool_response>\n5 mi = 8.04672 km\n</tool_response>\n"
                           "<tool_response>\n24.14016\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_the_tools_are_described_once(qwen_source):
    prompt = _hearth(qwen_source, [MILES], ["5 mi = 8.04672 km"])
    assert prompt.count("\n<tools>\n") == 1 and prompt.count("# Tools") == 1   # the list, once
    for d in TOOLS:
        assert prompt.count(json.dumps(d, ensure_ascii=False)) == 1


def test_arguments_sent_as_a_json_string_render_the_same(qwen_source):
    # OpenAI clients send `arguments` as a JSON string; the template applies tojson itself
    wire = _canonical([MILES], ["5 mi = 8.04672 km"])
    wire[2]["tool_calls"][0]["function"]["arguments"] = json.dumps(MILES.arguments)
    assert ChatTemplate(qwen_source).render(wire, tools=TOOLS) == _hearth(qwen_source, [MILES], ["5 mi = 8.04672 km"])
