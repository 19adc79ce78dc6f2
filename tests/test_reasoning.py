"""Thinking told apart from the answer (engine/chat/reasoning.py), and the Qwen3 template's handling
of it: enable_thinking, and earlier turns' thinking left out of the prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from hearth.engine.chat.chat_template import ChatTemplate
from hearth.engine.chat.reasoning import THINK_TAGS, ThinkingSplitter, has_thinking_switch, open_tag_at_end

QWEN3 = (Path(__file__).parent / "data" / "templates" / "qwen3.jinja").read_text(encoding="utf-8")


def split(pieces, splitter=None):
    s = splitter or ThinkingSplitter()
    thinking = answer = ""
    for p in pieces:
        t, a = s.feed(p)
        thinking, answer = thinking + t, answer + a
    t, a = s.finish()
    return thinking + t, answer + a, s


@pytest.mark.parametrize("open_, close", THINK_TAGS)
def test_thinking_then_answer_in_one_character_pieces(open_, close):
    text = f"{open_}\nLet me see: 2 + 2 is 4.\n{close}\n\nThe answer is 4."
    thinking, answer, s = split(list(text))
    assert thinking == "Let me see: 2 + 2 is 4.\n" and answer == "The answer is 4." and s.thinking_done


def test_a_reply_without_thinking_is_all_answer_and_a_late_tag_is_text():
    assert split(["Hello", " there"])[:2] == ("", "Hello there")
    thinking, answer, s = split(["Use ", "<think>", " tags."])
    assert thinking == "" and answer == "Use <think> tags." and not s.thinking_done


def test_a_reply_that_starts_inside_the_thinking():
    prompt = "<|im_start|>assistant\n<think>\n"
    assert open_tag_at_end(prompt) == "<think>"
    thinking, answer, _ = split(["hmm", " ok</th", "ink>", "Yes."], ThinkingSplitter(open_tag_at_end(prompt)))
    assert thinking == "hmm ok" and answer == "Yes."


def test_thinking_cut_off_before_its_end_stays_thinking():
    thinking, answer, s = split(["<think>", "still going </thi"])
    assert thinking == "still going </thi" and answer == "" and not s.thinking_done


def test_qwen3_template_switch_and_earlier_thinking():
    assert has_thinking_switch(QWEN3) and not has_thinking_switch("{{ messages }}")
    t = ChatTemplate(QWEN3, model_name="qwen3")
    msgs = [{"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4.", "reasoning_content": "Two and two make four."},
            {"role": "user", "content": "And 3+3?"}]
    on = t.render(msgs, add_generation_prompt=True)
    off = t.render(msgs, add_generation_prompt=True, enable_thinking=False)
    assert "Two and two make four." not in on, "Qwen3 keeps only the current turn's thinking"
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and not on.endswith("</think>\n\n")
    # The turn in progress (after the last user message) keeps its thinking.
    current = t.render(msgs[:2], add_generation_prompt=False)
    assert "<think>\nTwo and two make four.\n</think>" in current


# The generation prompt's tail as Qwen3.5's template writes it: thinking is on by default and the
# reply starts inside it; enable_thinking=False closes an empty block.
QWEN35_TAIL = ("{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
               "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
               "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
               "{%- else %}{{ '<think>\\n' }}{%- endif %}{%- endif %}")


def test_qwen35_thinking_switch_to_the_display():
    assert has_thinking_switch(QWEN35_TAIL)
    t = ChatTemplate(QWEN35_TAIL, model_name="qwen35")
    msgs = [{"role": "user", "content": "Hi"}]
    on, off = t.render(msgs), t.render(msgs, enable_thinking=False)
    assert open_tag_at_end(on) == "<think>" and open_tag_at_end(off) is None
    thinking, answer, s = split(["Greet", " back.\n</think>", "\n\nHello!"], ThinkingSplitter(open_tag_at_end(on)))
    assert (thinking, answer, s.thinking_done) == ("Greet back.\n", "Hello!", True)
    assert split(["Hello!"], ThinkingSplitter(open_tag_at_end(off)))[:2] == ("", "Hello!")


@pytest.fixture(scope="module")
def gemma4_template(reference_dir):
    return ChatTemplate.from_gguf(reference_dir / "tiny-next" / "gemma4" / "tiny-gemma4.gguf")


def test_gemma4_reasoning_format_to_the_display(gemma4_template, reference_dir):
    t = gemma4_template
    assert has_thinking_switch(t.source)
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    on, off = t.render(msgs, enable_thinking=True), t.render(msgs, enable_thinking=False)
    assert "<|think|>" in on and "<|think|>" not in off
    # Off: the template closes an empty thought channel, the reply is all answer.
    assert off.endswith("<|channel>thought\n<channel|>") and open_tag_at_end(off) is None
    assert split(["4", "."])[:2] == ("", "4.")
    # On: the model opens the thought channel itself; its text streams as thinking, in any pieces.
    reply = "<|channel>thought\nTwo and two make four.<channel|>The answer is 4."
    thinking, answer, s = split(list(reply), ThinkingSplitter(open_tag_at_end(on)))
    assert (thinking, answer, s.thinking_done) == ("Two and two make four.", "The answer is 4.", True)


def test_gemma4_channel_tags_survive_the_stream_decoder(reference_dir):
    """<|channel> and <channel|> are text to the stream decoder (not skipped as control tokens), so
    the splitter sees them; <turn|> ends the reply."""
    from hearth.engine.gguf import GGUFFile
    from hearth.engine.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(GGUFFile.open(reference_dir / "tiny-next" / "gemma4" / "tiny-gemma4.gguf"))
    ids = tok.encode("<|channel>thought\nhmm<channel|>ok<turn|>", add_special=False, parse_special=True)
    sd = tok.stream_decoder(skip_special=True)
    assert "".join(sd.feed(i) for i in ids[:-1]) == "<|channel>thought\nhmm<channel|>ok"
    assert ids[-1] in tok.eog_ids
