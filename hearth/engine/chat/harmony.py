"""gpt-oss's chat format (OpenAI's "harmony"): a reply is a run of messages, each on a channel.

After the prompt's `<|start|>assistant`, the model writes messages such as

    <|channel|>analysis<|message|>Let me think…<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

A message's header (up to `<|message|>`) names its channel and, for a tool call, its recipient
(`to=functions.NAME`, before or after the channel). `<|end|>` closes a message and another
follows; `<|return|>` and `<|call|>` end the reply (they are end-of-generation tokens, so the
engine stops on them and their text may never arrive). Routing:
- `analysis`: the model's reasoning -> the thinking display;
- a message with a recipient (`commentary to=functions.NAME`): a tool call, passed on as the
  `<tool_call>{"name": NAME, "arguments": …}</tool_call>` text that the tool-call parser reads;
- `final`, and `commentary` without a recipient (a preamble meant for the user): the answer.

`HarmonyStream.feed(text) -> (thinking, answer)` takes the reply in pieces of any size (a marker
split across pieces is held back until it is whole); `finish()` flushes the rest.
"""

from __future__ import annotations

import json
import re

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|return|>", "<|call|>")
# A header longer than this without <|message|> is not harmony: it is passed on as answer text.
MAX_HEADER = 512
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")


class HarmonyStream:
    """One reply's harmony messages split into thinking and answer text as they stream."""

    def __init__(self):
        self._buf = ""
        self._in_header = True
        self.channel = ""          # the current message's channel
        self.recipient = ""        # its recipient ("functions.get_weather"), "" for none
        self._call = ""            # a tool call's arguments so far
        self._fresh = False        # nothing of the current message's text passed on yet
        self.thinking_done = False

    @property
    def thinking(self) -> bool:
        """Inside an analysis message (or its header still arriving before any answer)."""
        return not self.thinking_done

    def feed(self, text: str) -> tuple[str, str]:
        self._buf += text
        thinking, answer = "", ""
        while self._buf:
            if self._in_header:
                i = self._buf.find(MESSAGE)
                if i < 0:
                    if len(self._buf) > MAX_HEADER:          # not a header after all
                        self._enter("final", "")
                        continue
                    break
                self._enter(*_parse_header(self._buf[:i]))
                self._buf = self._buf[i + len(MESSAGE):]
                continue
            hits = [(self._buf.find(e), e) for e in ENDS if e in self._buf]
            if hits:
                i, end = min(hits)
                t, a = self._route(self._buf[:i])
                t2, a2 = self._close()
                thinking, answer = thinking + t + t2, answer + a + a2
                self._buf = self._buf[i + len(end):]
                self._in_header = True
                continue
            keep = max(_partial_suffix(self._buf, e) for e in ENDS)
            t, a = self._route(self._buf[:len(self._buf) - keep])
            thinking, answer = thinking + t, answer + a
            self._buf = self._buf[len(self._buf) - keep:]
            break
        return thinking, answer

    def finish(self) -> tuple[str, str]:
        """What is left: a message cut off (or ended by an end-of-generation token the engine did not
        pass on) counts as complete."""
        rest, self._buf = self._buf, ""
        if self._in_header:
            return "", ""          # a header with no message: nothing to show
        t, a = self._route(rest)
        t2, a2 = self._close()
        return t + t2, a + a2

    def _enter(self, channel: str, recipient: str) -> None:
        self._in_header = False
        self.channel, self.recipient, self._call, self._fresh = channel, recipient, "", True
        if channel != "analysis":
            self.thinking_done = True

    def _route(self, text: str) -> tuple[str, str]:
        if self._fresh:            # the newlines right after a header belong to it
            text = text.lstrip("\n")
            self._fresh = not text
        if not text:
            return "", ""
        if self.recipient:
            self._call += text
            return "", ""
        return (text, "") if self.channel == "analysis" else ("", text)

    def _close(self) -> tuple[str, str]:
        """The end of a message: a tool call's whole text."""
        if not self.recipient:
            return "", ""
        name = self.recipient.removeprefix("functions.")
        args = self._call.strip() or "{}"
        self.recipient, self._call = "", ""
        return "", f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {args}}}</tool_call>'


def _parse_header(header: str) -> tuple[str, str]:
    """(channel, recipient) of a message header such as
    `<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json`."""
    m = _CHANNEL_NAME.search(header)
    r = _RECIPIENT.search(header)
    return (m.group(1) if m else "final"), (r.group(1) if r else "")


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a beginning of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
