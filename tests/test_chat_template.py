"""engine/chat/chat_template.py: real models' chat templates render what transformers' apply_chat_template
renders; a file without a template gets ChatML; every failure is a TemplateError naming the model.

The templates in tests/data/templates/ are the public ones (tokenizer_config.json of SmolLM2-135M-
Instruct, Qwen2.5-Instruct, Qwen3, Llama 3.1/3.3 and 3.2 Instruct, Gemma 3 it). The expected
renders below are written out by hand from the templates' text.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from hearth.engine.chat.chat_template import CHATML_TEMPLATE, ChatTemplate
from hearth.engine.errors import TemplateError
from hearth.engine.gguf import GGUFFile
from hearth.engine.paths import default_model_path
from model_paths import gemma3_model_path

TEMPLATES = Path(__file__).parent / "data" / "templates"
MARCH_1 = datetime(2025, 3, 1, 12, 0)

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
WEATHER_JSON = ('{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", '
                '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}')
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": "18 C"},
    {"role": "assistant", "content": "It is 18 C."},
    {"role": "user", "content": "Thanks"},
]


def template(name: str, **kw) -> ChatTemplate:
    kw.setdefault("model_name", name)
    kw.setdefault("clock", lambda: MARCH_1)
    return ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"), **kw)


# --- SmolLM2: the default model --------------------------------------------------------------------
def test_smollm2_reference_chat_prompt(smollm2_reference):
    """The `chat` prompt of reference.json is this template's render of its recorded messages."""
    rendering = smollm2_reference["chat_template_rendering"]
    chat = next(p for p in smollm2_reference["prompts"] if p["name"] == "chat")
    text = ChatTemplate.from_gguf(default_model_path()).render(rendering["messages"])
    assert text == chat["text"] == rendering["jinja2_llama_cpp_python"]


def test_smollm2_reference_chat_prompt_tokenizes_to_the_reference_ids(smollm2_reference):
    from hearth.engine.tokenizer import Tokenizer
    g = GGUFFile.open(default_model_path())
    rendering = smollm2_reference["chat_template_rendering"]
    chat = next(p for p in smollm2_reference["prompts"] if p["name"] == "chat")
    assert Tokenizer.from_gguf(g).encode(ChatTemplate.from_gguf(g).render(rendering["messages"])) == chat["ids"]


def test_smollm2_test_copy_is_the_gguf_template():
    meta = GGUFFile.open(default_model_path()).metadata
    assert (TEMPLATES / "smollm2.jinja").read_text(encoding="utf-8") == meta["tokenizer.chat_template"]


def test_smollm2_default_system_prompt_and_multi_turn():
    t = ChatTemplate.from_gguf(default_model_path())
    text = t.render([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                     {"role": "user", "content": "Bye"}])
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                    "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")
    assert not t.render([{"role": "user", "content": "Hi"}], add_generation_prompt=False).endswith("assistant\n")


# --- Qwen2.5 ------------------------------------------------------------------------------------------
def test_qwen25_default_system_prompt():
    assert template("qwen2.5").render([{"role": "user", "content": "Hi"}]) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_qwen25_tools_tool_calls_and_results():
    messages = [{"role": "system", "content": "Be brief."}] + TOOL_CONVERSATION[:3] + [
        {"role": "tool", "content": "(cached)"}] + TOOL_CONVERSATION[3:]
    assert template("qwen2.5").render(messages, tools=[WEATHER_TOOL]) == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + WEATHER_JSON +
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18 C\n</tool_response>\n<tool_response>\n(cached)\n</tool_response>"
        "<|im_end|>\n"
        "<|im_start|>assistant\nIt is 18 C.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n")


def test_tool_call_arguments_given_as_a_json_string_are_parsed():
    as_string = {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    t = template("qwen2.5")
    msgs = lambda call: [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    assert t.render(msgs(as_string)) == t.render(msgs(CALL))
    broken = {"type": "function", "function": {"name": "f", "arguments": "not json"}}
    assert '"arguments": "not json"' in t.render(msgs(broken))      # kept as given, then tojson'd


# --- Qwen3 ---------------------------------------------------------------------------------------------
def test_qwen3_system_prompt_and_thinking_switch():
    t = template("qwen3")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert t.render(messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert t.render(messages, enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_multi_turn_drops_old_reasoning_and_keeps_the_last():
    t = template("qwen3")
    messages = [{"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
                {"role": "user", "content": "3+3?"},
                {"role": "assistant", "content": "6", "reasoning_content": "add again"}]
    assert t.render(messages, add_generation_prompt=False) == (
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\nadd again\n</think>\n\n6<|im_end|>\n")


def test_qwen3_tool_calls():
    text = template("qwen3").render(TOOL_CONVERSATION, tools=[WEATHER_TOOL])
    assert text.startswith("<|im_start|>system\n# Tools\n\n")
    assert ("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
            "\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>\n") in text


# --- Llama 3.1 / 3.2 ------------------------------------------------------------------------------------
def test_llama31_system_and_multi_turn():
    t = template("llama3.1", bos_token="<|begin_of_text|>")
    text = t.render([{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}])
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_llama31_tools_go_in_the_first_user_message():
    text = template("llama3.1", bos_token="<|begin_of_text|>").render(TOOL_CONVERSATION[:3], tools=[WEATHER_TOOL])
    indented = json.dumps(WEATHER_TOOL, indent=4)
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for "
        "a function call with its proper arguments that best answers the given prompt.\n\n"
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}."
        "Do not use variables.\n\n" + indented + "\n\nWeather in Paris?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
        "{\"city\": \"Paris\"}}<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\n\"18 C\"<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_llama31_refuses_two_tool_calls_at_once():
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [CALL, CALL]}]
    with pytest.raises(TemplateError, match=r"llama3\.1.*single tool-calls"):
        template("llama3.1").render(messages)


def test_llama32_takes_today_from_strftime_now():
    text = template("llama3.2", bos_token="<|begin_of_text|>").render([{"role": "user", "content": "Hi"}])
    assert text == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                    "Cutting Knowledge Date: December 2023\nToday Date: 01 Mar 2025\n\n<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_extra_variables_reach_the_template():
    text = template("llama3.2").render([{"role": "user", "content": "Hi"}], date_string="1 Jan 2030")
    assert "Today Date: 1 Jan 2030\n" in text


# --- Gemma 3 --------------------------------------------------------------------------------------------
def test_gemma3_system_folds_into_the_first_user_turn():
    t = template("gemma3", bos_token="<bos>")
    text = t.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
                     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}])
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                    "<start_of_turn>model\nHello!<end_of_turn>\n"
                    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")


def test_gemma3_content_parts():
    text = template("gemma3").render([{"role": "user", "content": [{"type": "text", "text": "Look: "},
                                                                    {"type": "image"}]}])
    assert text == "<start_of_turn>user\nLook:<start_of_image><end_of_turn>\n<start_of_turn>model\n"


def test_gemma3_roles_must_alternate():
    with pytest.raises(TemplateError, match=r"^gemma3: .*must alternate"):
        template("gemma3").render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


# --- files: templates, fallback, tokens ----------------------------------------------------------------
def test_gguf_template_with_its_own_tokens(reference_dir):
    t = ChatTemplate.from_gguf(reference_dir / "vocab/ggml-vocab-phi-3.gguf")
    assert (t.bos_token, t.eos_token, t.is_fallback) == ("<s>", "<|endoftext|>", False)
    assert t.render([{"role": "user", "content": "Hi"}]) == "<s><|user|>\nHi<|end|>\n<|assistant|>\n"


def test_missing_template_falls_back_to_chatml(reference_dir):
    t = ChatTemplate.from_gguf(reference_dir / "tiny/llama/tiny-llama.gguf")
    assert t.is_fallback and t.source == CHATML_TEMPLATE and t.bos_token == "<|begin_of_text|>"
    assert t.render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n")


def test_gemma3_base_model_has_no_template():
    path = gemma3_model_path()
    if path is None:
        pytest.skip("Gemma 3 270M is not installed (./dev test installs it)")
    t = ChatTemplate.from_gguf(path)
    assert t.is_fallback and t.bos_token == "<bos>"


# --- errors and the sandbox ------------------------------------------------------------------------------
def test_syntax_error_names_the_model():
    with pytest.raises(TemplateError, match=r"^Broken 1B: the chat template does not parse \(line 1"):
        ChatTemplate("{% for m in messages %}", model_name="Broken 1B")


def test_from_gguf_names_the_model_in_errors(reference_dir):
    t = ChatTemplate.from_gguf(reference_dir / "tiny/qwen2/tiny-qwen2.gguf", model_name="Tiny Qwen")
    with pytest.raises(TemplateError, match="^Tiny Qwen: "):
        t.render([{"role": "user", "content": None}])       # str + None inside the template


def test_raise_exception_becomes_a_template_error():
    t = ChatTemplate("{{ raise_exception('no system role here') }}", model_name="M")
    with pytest.raises(TemplateError, match="^M: the chat template refused the conversation: no system role here$"):
        t.render([])


def test_a_message_that_is_not_a_mapping_is_a_template_error():
    with pytest.raises(TemplateError):
        ChatTemplate.chatml().render(["hi"])


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ messages.append(1) }}",
    "{{ messages[0].update({'role': 'x'}) }}",
    "{{ 1 / 0 }}",
    "{{ messages[5].content }}",
])
def test_the_sandbox_refuses_unsafe_and_failing_operations(source):
    with pytest.raises(TemplateError, match="^M: "):
        ChatTemplate(source, model_name="M").render([{"role": "user", "content": "x"}])


def test_tojson_has_transformers_semantics():
    t = ChatTemplate("{{ x | tojson }}|{{ x | tojson(indent=2, sort_keys=true) }}|{{ x | tojson(ensure_ascii=true) }}")
    x = {"b": "<tag> & 'q' é", "a": [1]}
    assert t.render([], x=x) == (json.dumps(x, ensure_ascii=False) + "|" + json.dumps(x, ensure_ascii=False, indent=2, sort_keys=True)
                                 + "|" + json.dumps(x))


def test_generation_tag_and_loop_controls():
    src = ("{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
           "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}")
    assert ChatTemplate(src).render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]) == "U"


# --- the tiny reference models' chat prompts ---------------------------------------------------------------
CONCISE = [{"role": "system", "content": "You are a concise assistant."},
           {"role": "user", "content": "What is the capital of France?"}]


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_tiny_qwen_chat_prompt_is_their_gguf_template(reference_dir, arch):
    manifest = json.loads((reference_dir / f"tiny/{arch}/manifest.json").read_text())
    chat = next(p for p in manifest["prompts"] if p["name"] == "chat")
    assert ChatTemplate.from_gguf(reference_dir / f"tiny/{arch}" / manifest["file"]).render(CONCISE) == chat["text"]


def test_tiny_gemma3_chat_prompt_is_the_gemma3_template(reference_dir):
    """The tiny Gemma 3 file carries no template; its prompt is Gemma 3's, BOS left to the tokenizer."""
    manifest = json.loads((reference_dir / "tiny/gemma3/manifest.json").read_text())
    chat = next(p for p in manifest["prompts"] if p["name"] == "chat")
    assert template("gemma3").render(CONCISE[1:]) == chat["text"]


def test_gemma4_template_from_its_vocabulary_renders(reference_dir):
    """A 12,000-character modern template (tools, tool calls, thinking channel) runs in our sandbox."""
    t = ChatTemplate.from_gguf(reference_dir / "vocab/ggml-vocab-gemma-4.gguf")
    text = t.render([{"role": "system", "content": "Be brief."}] + TOOL_CONVERSATION[:3], tools=[WEATHER_TOOL])
    assert text.startswith("<bos><|turn>system\nBe brief.")
    assert "declaration:get_weather" in text and "<|turn>user\nWeather in Paris?<turn|>" in text
    assert "call:get_weather{city:" in text


# --- hostile templates: bounded in time and size -----------------------------------------------------

HI = [{"role": "user", "content": "hi"}]


def test_nested_range_loops_are_stopped_by_the_time_bound():
    t = ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     model_name="hostile", time_limit_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(TemplateError, match="hostile: the chat template ran for more than 0.5 s and was stopped"):
        t.render(HI)
    assert time.monotonic() - t0 < 5


def test_a_render_that_ends_in_time_is_never_interrupted_later():
    t = ChatTemplate(CHATML_TEMPLATE, time_limit_s=0.2)
    assert t.render(HI).startswith("<|im_start|>user")
    deadline = time.monotonic() + 0.6          # past the limit: nothing may be raised here
    while time.monotonic() < deadline:
        sum(range(1000))


@pytest.mark.parametrize("source, match", [
    ("{{ 'x' * 1000000000 }}", "'\\*' would build 1,000,000,000 items"),
    ("{{ [0] * 1000000000 }}", "'\\*' would build 1,000,000,000 items"),
    ("{{ range(1000000000)|list }}", "range\\(\\) of 1,000,000,000 items"),
    ("{{ 'x'|center(100000000) }}", "the filter center's result"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
     "a value of 8,388,608 items"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
     "the result of '\\+'"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = '%s%s' % (ns.s, ns.s) %}{% endfor %}",
     "the result of '%'"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s.replace('x', 'xx') %}{% endfor %}",
     "a call's result"),
    ("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "more than 4,194,304 characters"),
    ("{% set s %}{% for i in range(100000) %}{{ 'x' * 4000000 }}{% endfor %}{% endset %}",
     "captured output of more than 4,194,304 characters"),
    ("{% macro f() %}{% for i in range(100000) %}{{ 'x' * 4000000 }}{% endfor %}{% endmacro %}{{ f() }}",
     "captured output of more than 4,194,304 characters"),
    ("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [('x' * 4000000) ~ i] %}"
     "{% endfor %}", "more than 268,435,456 items built in all"),
])
def test_templates_that_build_huge_strings_are_refused_with_a_template_error(source, match):
    with pytest.raises(TemplateError, match="hostile: the chat template renders too much: " + match):
        ChatTemplate(source, model_name="hostile").render(HI)


def test_a_long_chat_is_well_within_the_bounds():
    chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "word " * 400}
            for i in range(400)]                           # 800,000 characters: past most contexts
    text = ChatTemplate(CHATML_TEMPLATE).render(chat)
    assert text.count("<|im_start|>") == 401 and len(text) > 800_000
    growing = ChatTemplate("{% set ns = namespace(p='') %}{% for m in messages %}"
                           "{% set ns.p = ns.p + m.role + ': ' + m.content + '\\n' %}{% endfor %}{{ ns.p }}")
    assert growing.render(chat[:200]).count(": message ") == 200   # the prompt rebuilt per message


def test_runaway_recursion_is_a_template_error():
    with pytest.raises(TemplateError, match="recursed too deeply"):
        ChatTemplate("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render(HI)


def test_the_output_cap_is_the_templates_own():
    t = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", max_chars=10)
    assert t.render([{"role": "user", "content": "x" * 10}]) == "x" * 10
    with pytest.raises(TemplateError, match="more than 10 characters"):
        t.render([{"role": "user", "content": "x" * 11}])


def test_a_template_stopped_once_renders_again_afterwards():
    t = ChatTemplate("{% if messages|length > 1 %}{% for i in range(100000) %}{% for j in range(100000) %}"
                     "{% endfor %}{% endfor %}{% endif %}{{ messages[0].content }}", time_limit_s=0.3)
    with pytest.raises(TemplateError, match="was stopped"):
        t.render(HI * 2)
    assert t.render(HI) == "hi"
