"""The token count in the input box (`tokenCount`): the draft's tokens and the whole prompt's
against the context, counted on the engine worker a moment after typing stops, and the warning
when the draft will not fit under the preset's context policy (engine/chat/context_policy.py's rule).

Signals:
    verdictChanged(str kind)   "" (nothing typed / not known), "fits", "trimmed", "too_long"
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QLabel

from hearth.engine.chat.context_policy import draft_verdict

from .markdown_text import tokens

DEBOUNCE_MS = 250


class DraftTokens(QObject):
    verdictChanged = Signal(str)

    def __init__(self, editor, conversation, client, label: QLabel, edit_row: Callable[[], int | None],
                 draft: Callable[[], str], parent=None, model: Callable[[], dict] = dict):
        super().__init__(parent)
        self._model = model   # the loaded model's info: its path, backend and context length
        self.editor, self.conversation, self.client, self.label = editor, conversation, client, label
        self._draft = draft   # the message as it would be sent: attachments and typed text
        self._edit_row = edit_row
        self._seq = 0
        self._asked_text = ""
        self.kind, self.warning, self.counted_text = "", "", None
        self._asked_under = self._counted_under = None   # the preset and model a count was made under
        self._timer = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._timer.timeout.connect(self.recount)
        editor.textChanged.connect(self._timer.start)
        conversation.replyFinished.connect(self._timer.start)   # the prompt grew by a reply
        conversation.model.modelReset.connect(self._timer.start)  # another chat was opened
        client.worker.tokensCounted.connect(self._on_counted)
        label.clear()

    def schedule(self) -> None:
        """Count again shortly: the preset or the model changed."""
        self._timer.start()

    def _conditions(self) -> tuple:
        """What a verdict depends on besides the text: the preset's prompt, tools, reply room and
        policy, and the model with its context length."""
        p = self.conversation.preset()
        m = self._model() or {}
        return (p.id, p.system_prompt, repr(list(self.conversation.tools_of(p))), p.context_policy,
                int(p.sampling.get("max_tokens", 512)), m.get("path_setting"), m.get("backend"), m.get("n_ctx"))

    def recount(self) -> None:
        text = self._draft()
        if not text.strip():
            self._seq = 0
            self._show("", "", "", None)
            return
        p = self.conversation.preset()
        self._asked_text = text
        self._asked_under = self._conditions()
        tools = list(self.conversation.tools_of(p))      # the preset's own and its MCP servers'
        self._seq = self.client.count_tokens(self.conversation.history(self._edit_row()), tools, text)

    def _on_counted(self, res: dict) -> None:
        if res.get("tag") or res.get("seq") != self._seq or self._seq == 0:
            return
        if not res.get("n_ctx"):
            self._show("", "", "", self._asked_text)
            return
        p = self.conversation.preset()
        kind, warning = draft_verdict(res["prompt"], res["alone"], res["n_ctx"],
                                      int(p.sampling.get("max_tokens", 512)), p.context_policy)
        text = f"{tokens(res['message'])} · prompt {res['prompt']:,} / {res['n_ctx']:,}"
        self._show(kind, warning, text, self._asked_text)

    def _show(self, kind: str, warning: str, text: str, counted: str | None) -> None:
        self.counted_text = counted
        self._counted_under = self._asked_under if counted is not None else None
        self.label.setText(("⚠ " if kind == "too_long" else "") + text)
        self.label.setToolTip(warning or "Tokens of this message · of the whole prompt / the context size")
        self.label.setProperty("kind", kind)
        self.label.style().unpolish(self.label)
        self.label.style().polish(self.label)
        if kind != self.kind or warning != self.warning:
            self.kind, self.warning = kind, warning
            self.verdictChanged.emit(kind)

    def refusal(self, text: str) -> str:
        """The warning to show instead of sending `text`, or "" to send it: only a count of this
        very text, under the preset and model in use now, that says it will not fit stops a send (a
        count not back yet lets it through, and the engine's own check answers)."""
        if self.kind != "too_long" or self.counted_text != text or self._counted_under != self._conditions():
            return ""
        return self.warning
