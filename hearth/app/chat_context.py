"""A local engine's chat contexts kept on disk: which chat is resident, saving it, restoring one.
Qt-free, called only from the worker thread (through LocalBackend).

The chain rules (keys, branching, refusals, the cap) are engine/prefix/chat_images.py's; here is
only when to call them: a chat is saved after each reply and whenever it stops being resident
(another chat opened, the model reloaded, quitting), and restored when it is opened or sent to.
A save writes only what the disk lacks, so saving again when nothing changed costs a walk of the
chain (no bytes).
"""

from __future__ import annotations

import time
from typing import Callable

from hearth.engine.chat.chat_turn import ChatTurn, prefill_in_chunks, render_prompt, tool_format_of
from hearth.engine.chat.reasoning import HARMONY_ANALYSIS, THINK_TAGS
from hearth.engine.generation import common_prefix
from hearth.engine.prefix.chat_images import ChatImages, Root

from .chat.markdown_text import duration, tokens


class ChatContexts:
    def __init__(self, store):
        self.images = ChatImages(store)
        self.chat: dict | None = None      # the resident chat: {"id", "title"}
        self.dirty = False                 # resident tokens not yet saved
        self.prefix_ids: list[int] = []    # the preset prefix resident under the chat

    def _root(self, engine, ids) -> Root:
        p = self.prefix_ids
        if p and ids[:len(p)] == p and engine.tokens[:len(p)] == p:
            return Root.of_prefix(engine, p)
        return Root.none()

    def switch(self, engine, chat: dict | None) -> dict | None:
        """Make `chat` the resident one, saving the one that was first. Returns the save's report."""
        report = None
        if self.chat is not None and (chat is None or str(chat.get("id")) != str(self.chat.get("id"))):
            report = self.save(engine)
        if chat is None or self.chat is None or str(chat.get("id")) != str(self.chat.get("id")):
            self.dirty = False
        self.chat = dict(chat) if chat is not None else None  # None: a turn of no chat, never saved
        return report

    def save(self, engine) -> dict | None:
        """Save the resident chat if anything of it is unsaved: {"saved", "bytes", "tokens", "ms", "error"}."""
        if engine is None or self.chat is None or not self.dirty or not engine.tokens:
            return None
        ids = engine.tokens
        s = self.images.save(engine, self._root(engine, ids), owner=str(self.chat["id"]),
                             title=self.chat.get("title") or "")
        self.dirty = False
        return {"saved": s.error is None, "bytes": s.bytes_written, "tokens": s.n_tokens,
                "ms": s.seconds * 1000, "error": s.error or "", "chat": self.chat.get("id")}

    def changed(self) -> None:
        """The resident tokens moved (a reply, a computed context)."""
        self.dirty = self.chat is not None

    def restore(self, engine, messages: list[dict], tools: list, cancel: Callable[[], bool],
                compute: bool, progress=None) -> dict:
        """Restore the longest saved prefix of the chat's prompt; with `compute`, read the rest too
        (in cancellable chunks). {"action": "restored"/"computed"/"resident", "tokens", "restored",
        "computed", "ms"}."""
        t0 = time.perf_counter()
        prompt, _, _ = render_prompt(engine, ChatTurn(messages, tools), tool_format_of(engine))
        ids = engine.tokenize(prompt)
        engine.kv.check_fits(0, len(ids))
        before = common_prefix(engine.tokens, ids)
        got = self.restore_ids(engine, ids)
        computed = 0
        if compute and got.n_tokens < len(ids) - 1:
            done = prefill_in_chunks(engine, ids, cancel,
                                     (lambda n, todo: progress("Computing the chat context", n, todo))
                                     if progress else None)
            if done is not None:
                engine.prefill(ids[:-1])  # the last token is read by the next reply, for its logits
                computed = max(0, len(ids) - 1 - max(got.n_tokens, before))
                self.changed()
        action = "restored" if got.restored else "computed" if computed else "resident"
        if got.n_tokens <= before and not computed:
            action = "resident"
        return {"action": action, "tokens": len(engine.tokens), "restored": got.restored,
                "computed": computed, "refused": got.refused, "ms": (time.perf_counter() - t0) * 1000}

    def restore_ids(self, engine, ids):
        """Before a reply: the longest saved prefix of the prompt `ids`, if it beats what is resident."""
        return self.images.restore(engine, ids, self._root(engine, ids))

    def forget(self, chat_id) -> int:
        """A chat was deleted: remove its segments (not those another chat shares)."""
        if self.chat is not None and str(self.chat.get("id")) == str(chat_id):
            self.chat, self.dirty = None, False
        return self.images.remove_owner(str(chat_id))

    def rows(self) -> list[dict]:
        return self.images.chats()


def rerendered(engine, before: list[int], ids: list[int]) -> dict | None:
    """When the prompt `ids` renders resident tokens (`before`) otherwise, from some position on: where,
    how many resident tokens are not reused, and why ("thinking": a reasoning template leaves an
    earlier reply's thinking out of the prompt; "rerendered": an edit or another rendering). None
    when the prompt extends the resident tokens, is a prefix of them (a regenerate) or differs only
    in the last one."""
    common = common_prefix(before, ids)
    # one token: the last resident one merges with the new text (a BPE boundary), costing one token
    if common >= len(before) - 1 or common >= len(ids):
        return None
    # from a few tokens before: the tag the two renderings share the start of ("<|channel|>" then
    # "analysis" or "final") is read whole
    dropped = engine.detokenize(before[max(0, common - 8):common + 4096])
    thinking = HARMONY_ANALYSIS in dropped or any(open_ in dropped for open_, _ in THINK_TAGS)
    return {"from": common, "dropped": len(before) - common, "reason": "thinking" if thinking else "rerendered"}


def chat_context_line(res: dict) -> str:
    """The status bar's words for a worker's chatContext report ("" for a save that went well)."""
    action = res.get("action")
    if action == "rerendered":
        why = ("the template leaves earlier thinking out of the prompt" if res.get("reason") == "thinking"
               else "the prompt differs from what was resident there")
        return (f"Recomputed {res.get('computed', 0):,} tokens from position {res.get('from', 0):,}: {why} "
                f"({res.get('dropped', 0):,} resident tokens not reused)")
    if action == "restored":
        extra = f", computed {res['computed']:,} more" if res.get("computed") else ""
        return f"Restored chat context ({tokens(res.get('tokens', 0))}) in {duration(res.get('ms', 0))}{extra}"
    if action == "computed":
        return f"Computed chat context ({tokens(res.get('tokens', 0))}) in {duration(res.get('ms', 0))}"
    if action == "saved" and not res.get("saved", True):
        return f"Chat context not saved: {res.get('error') or 'unknown error'}"
    return ""
