"""A reasoning model's thinking, told apart from its answer as the reply streams.

Reasoning models write their thinking between tags before the answer: `<think>…</think>` (Qwen3,
DeepSeek-R1, QwQ, SmolLM3), `[THINK]…[/THINK]` (Magistral), `<|START_THINKING|>…<|END_THINKING|>`
(Command R7B), `<seed:think>…</seed:think>` (Seed-OSS), `<|channel>thought\n…<channel|>` (Gemma 4,
whose template opens the thinking channel itself with `<|think|>` in the system turn when
enable_thinking is on, and closes an empty one in the generation prompt when it is off). A template whose generation prompt ends
with the opening tag (DeepSeek-R1's newer ones) starts the reply inside the thinking:
`ThinkingSplitter(open_tag=...)` begins there. gpt-oss writes channels instead of tags (harmony.py):
a reply that starts with `<|channel|>` is split by `HarmonyStream`, its analysis channel being the
thinking; a prompt that ends with `<|channel|>analysis<|message|>` starts the reply inside it.

Only thinking at the start of a reply counts (after whitespace): a tag later in an answer is
text the model quotes. Tags split across streamed pieces are held back until they are whole.

The thinking is passed back to the template as the message's `reasoning_content`, the field the
templates that read it use; a template decides itself whether earlier turns' thinking goes into
the prompt (Qwen3's keeps it only for the turn in progress), and one that does not know the field
leaves it out.
"""

from __future__ import annotations

from .harmony import CHANNEL, MESSAGE, HarmonyStream

THINK_TAGS = (("<think>", "</think>"), ("[THINK]", "[/THINK]"),
              ("<|START_THINKING|>", "<|END_THINKING|>"), ("<seed:think>", "</seed:think>"),
              ("<|channel>thought", "<channel|>"))


# A harmony prompt that opens the analysis channel for the reply (ThinkingSplitter's open_tag).
HARMONY_ANALYSIS = f"{CHANNEL}analysis{MESSAGE}"


def open_tag_at_end(prompt: str) -> str | None:
    """The opening tag a rendered prompt ends with (the reply starts inside the thinking)."""
    tail = prompt.rstrip()
    if tail.endswith(HARMONY_ANALYSIS):
        return HARMONY_ANALYSIS
    for open_, _ in THINK_TAGS:
        if tail.endswith(open_):
            return open_
    return None


def has_thinking_switch(template_source: str | None) -> bool:
    """The template takes `enable_thinking` (Qwen3 and its kind)."""
    return bool(template_source) and "enable_thinking" in template_source


class ThinkingSplitter:
    """feed(text) -> (thinking, answer) pieces of that text; finish() -> the rest.
    `thinking_done` turns true at the closing tag."""

    def __init__(self, open_tag: str | None = None):
        self._buf = ""
        self._harmony: HarmonyStream | None = None
        if open_tag == HARMONY_ANALYSIS:
            self._harmony = HarmonyStream()
            self._harmony.feed(HARMONY_ANALYSIS)
            open_tag = None
        self._close = dict(THINK_TAGS)[open_tag] if open_tag else None
        self.state = "thinking" if open_tag else "start"   # start -> thinking -> answer, or start -> answer
        self.thinking_done = False
        self._after_tag = bool(open_tag)   # the newlines right after a tag belong to the tag

    @property
    def state(self) -> str:
        """The phase: "start", "thinking" or "answer"."""
        if self._harmony is not None:
            return "thinking" if self._harmony.thinking else "answer"
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        self._state = value

    @property
    def thinking_done(self) -> bool:
        return self._harmony.thinking_done if self._harmony is not None else self._done

    @thinking_done.setter
    def thinking_done(self, value: bool) -> None:
        self._done = value

    def feed(self, text: str) -> tuple[str, str]:
        if self._harmony is not None:
            return self._harmony.feed(text)
        self._buf += text
        thinking, answer = "", ""
        while self._buf:
            if self._after_tag:
                self._buf = self._buf.lstrip("\n")
                if not self._buf:
                    break
                self._after_tag = False
            if self.state == "start":
                head = self._buf.lstrip()
                if head.startswith(CHANNEL):              # gpt-oss: channels, not tags
                    self._harmony, self._buf = HarmonyStream(), ""
                    t, a = self._harmony.feed(head)
                    return thinking + t, answer + a
                tag = next((o for o, _ in THINK_TAGS if head.startswith(o)), None)
                if tag:
                    self._close = dict(THINK_TAGS)[tag]
                    self._buf = head[len(tag):]
                    self.state, self._after_tag = "thinking", True
                    continue
                if not head or any(o.startswith(head) for o in (CHANNEL, *(o for o, _ in THINK_TAGS))):
                    break   # a tag may be arriving
                self.state = "answer"
            elif self.state == "thinking":
                i = self._buf.find(self._close)
                if i >= 0:
                    thinking += self._buf[:i]
                    self._buf = self._buf[i + len(self._close):]
                    self.state, self.thinking_done, self._after_tag = "answer", True, True
                    continue
                keep = _partial_suffix(self._buf, self._close)
                thinking += self._buf[:len(self._buf) - keep]
                self._buf = self._buf[len(self._buf) - keep:]
                break
            else:
                answer += self._buf
                self._buf = ""
        return thinking, answer

    def finish(self) -> tuple[str, str]:
        if self._harmony is not None:
            return self._harmony.finish()
        rest, self._buf = self._buf, ""
        if self.state == "thinking":
            return rest, ""
        return "", rest


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a beginning of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
