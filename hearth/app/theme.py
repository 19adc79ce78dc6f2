"""Light and dark themes: a Fusion palette plus one stylesheet, following the system's color scheme.

`apply(app, choice)` with choice "system" follows QStyleHints.colorScheme (and its changes);
"light"/"dark" force one.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

LIGHT = {
    "window": "#f6f7f9", "base": "#ffffff", "alt": "#eef0f4", "text": "#1d2129", "muted": "#6b7280",
    "border": "#d9dde5", "accent": "#d9622b", "accentText": "#ffffff", "userBubble": "#fbe9df",
    "sidebar": "#eceef2", "code": "#f3f4f7", "codeHeader": "#e6e8ee", "selection": "#f7c8ad",
    "error": "#b42318", "errorBg": "#fdecea", "notice": "#fff4d6", "button": "#ffffff",
}
DARK = {
    "window": "#1c1e24", "base": "#24262e", "alt": "#2b2e37", "text": "#e6e8ee", "muted": "#9aa0ad",
    "border": "#3a3e4a", "accent": "#f08a4b", "accentText": "#1c1e24", "userBubble": "#3a2d27",
    "sidebar": "#181a1f", "code": "#16181d", "codeHeader": "#2a2d36", "selection": "#7a4427",
    "error": "#ff8a80", "errorBg": "#3b2224", "notice": "#3a3424", "button": "#2b2e37",
}

_QSS = """
QMainWindow, QDialog {{ background: {window}; }}
#sidebar {{ background: {sidebar}; border-right: 1px solid {border}; }}
#chatList {{ background: transparent; border: none; outline: 0; }}
#chatList::item {{ padding: 7px 10px; border-radius: 7px; margin: 1px 4px; }}
#chatList::item:selected {{ background: {selection}; color: {text}; }}
#chatList::item:hover:!selected {{ background: {alt}; }}
#presetList::item {{ padding: 6px 8px; }}
#presetList::item:selected {{ background: {selection}; color: {text}; }}
#toolsStatus[ok="true"] {{ color: {muted}; }}
#toolsStatus[ok="false"], #presetError {{ color: {error}; font-weight: 600; }}
#samplingToggle:checked {{ background: {alt}; color: {text}; }}
#chatSearch, #messageInputFrame {{ background: {base}; border: 1px solid {border}; border-radius: 8px; }}
#chatSearch {{ padding: 5px 8px; }}
#messageInputFrame[focused="true"] {{ border: 2px solid {accent}; }}
#messageInput {{ background: transparent; border: none; font-size: 11pt; }}
#messageView, #messageColumn {{ background: {base}; }}
#userBubble {{ background: {userBubble}; border-radius: 12px; }}
#assistantBubble {{ background: transparent; }}
#bubbleRole {{ font-weight: 600; color: {text}; }}
#bubbleStats {{ color: {muted}; font-size: 8.5pt; }}
#bubbleError {{ color: {error}; }}
#tokenCount {{ color: {muted}; font-size: 11px; }}
#tokenCount[kind="too_long"] {{ color: {error}; }}
#typingIndicator {{ color: {muted}; font-size: 14pt; }}
#typingIndicator[waiting="true"] {{ font-size: 10pt; }}
#markdownText {{ color: {text}; font-size: 10.5pt; }}
#emptyHint {{ color: {muted}; font-size: 12pt; padding: 60px; }}
#codeBlock {{ background: {code}; border: 1px solid {border}; border-radius: 8px; }}
#codeHeader {{ background: {codeHeader}; border-top-left-radius: 8px; border-top-right-radius: 8px; }}
#codeLang {{ color: {muted}; font-size: 8.5pt; }}
#toolBlock {{ background: {code}; border: 1px solid {border}; border-left: 3px solid {accent}; border-radius: 6px; }}
#toolBlock[state="error"] {{ border-left-color: {error}; }}
#toolBlock[state="pending"], #toolBlock[state="running"] {{ border-left-color: {muted}; }}
#toolSummary {{ color: {text}; font-family: monospace; font-size: 9.5pt; }}
#toolIcon {{ color: {muted}; }}
#toolDetails {{ color: {text}; font-size: 9pt; padding: 2px 4px 4px 26px; }}
#toolConfirm {{ background: {notice}; border: 1px solid {border}; border-radius: 8px; }}
#toolConfirmText {{ color: {text}; }}
#codeText {{ background: {code}; color: {text}; border: none; border-bottom-left-radius: 8px;
             border-bottom-right-radius: 8px; }}
QToolButton {{ color: {muted}; padding: 2px 6px; border-radius: 5px; }}
QToolButton:hover {{ background: {alt}; color: {text}; }}
#sendButton {{ background: {accent}; color: {accentText}; border: none; border-radius: 8px;
               padding: 7px 18px; font-weight: 600; }}
#sendButton:disabled {{ background: {border}; color: {muted}; }}
#stopButton {{ background: {errorBg}; color: {error}; border: 1px solid {error}; border-radius: 8px;
               padding: 6px 16px; font-weight: 600; }}
#newChatButton {{ background: {button}; border: 1px solid {border}; border-radius: 8px; padding: 6px; }}
#newChatButton:hover {{ border-color: {accent}; }}
#banner {{ background: {errorBg}; color: {error}; border-bottom: 1px solid {border}; }}
#banner[kind="notice"] {{ background: {notice}; color: {text}; }}
#undoBar {{ background: {alt}; border-top: 1px solid {border}; }}
#topBar {{ background: {window}; border-bottom: 1px solid {border}; }}
#modelInfo, #hint {{ color: {muted}; }}
#samplingPanel {{ background: {window}; border-left: 1px solid {border}; }}
#panelTitle {{ font-weight: 600; font-size: 10.5pt; }}
QStatusBar {{ background: {window}; border-top: 1px solid {border}; color: {muted}; }}
QStatusBar QLabel {{ color: {muted}; padding: 0 6px; }}
#statusContext {{ border: 1px solid {border}; border-radius: 4px; background: {base}; text-align: center;
                  max-height: 14px; min-width: 170px; font-size: 8pt; color: {text}; }}
#statusContext::chunk {{ background: {selection}; border-radius: 3px; }}
#workProgress {{ border: none; background: {alt}; max-height: 3px; }}
#workProgress::chunk {{ background: {accent}; }}
#workLabel {{ color: {muted}; }}
QComboBox {{ padding: 3px 8px; border: 1px solid {border}; border-radius: 6px; background: {button}; }}
QSplitter::handle {{ background: {border}; }}
QPushButton:focus, QToolButton:focus, QComboBox:focus, #chatSearch:focus, QSpinBox:focus, QDoubleSpinBox:focus,
QLineEdit:focus, QCheckBox:focus {{ border: 2px solid {accent}; }}
#sendButton:focus, #stopButton:focus {{ border: 2px solid {text}; }}
#newChatButton:focus {{ border: 2px solid {accent}; }}
#chatList:focus, #presetList:focus {{ border: 2px solid {accent}; border-radius: 6px; }}
#modelsButton {{ border: 1px solid {border}; background: {button}; color: {text}; padding: 3px 10px; }}
#modelsButton:hover {{ border-color: {accent}; }}
#modelsWindow QTableWidget {{ background: {base}; alternate-background-color: {alt}; border: 1px solid {border};
                              border-radius: 6px; }}
#modelsWindow QTableWidget::item {{ padding: 2px 6px; }}
#modelsWindow QTableWidget::item:selected {{ background: {selection}; color: {text}; }}
#modelsWindow QHeaderView::section {{ background: {window}; color: {muted}; border: none;
                                      border-bottom: 1px solid {border}; padding: 4px 6px; font-weight: 600; }}
#modelsWindow QLineEdit {{ background: {base}; border: 1px solid {border}; border-radius: 6px; padding: 4px 8px; }}
#modelsWindow QLineEdit:focus {{ border-color: {accent}; }}
#hubDownload, #localUse {{ background: {accent}; color: {accentText}; border: none; border-radius: 6px;
                           padding: 5px 16px; font-weight: 600; }}
#hubDownload:disabled, #localUse:disabled {{ background: {border}; color: {muted}; }}
#downloadRow {{ background: {base}; border: 1px solid {border}; border-radius: 8px; }}
#downloadBar {{ border: none; background: {alt}; max-height: 6px; border-radius: 3px; }}
#downloadBar::chunk {{ background: {accent}; border-radius: 3px; }}
"""


def palette_for(dark: bool) -> tuple[QPalette, dict]:
    c = DARK if dark else LIGHT
    p = QPalette()
    R = QPalette.ColorRole
    for role, key in ((R.Window, "window"), (R.Base, "base"), (R.AlternateBase, "alt"),
                      (R.WindowText, "text"), (R.Text, "text"), (R.Button, "button"),
                      (R.ButtonText, "text"), (R.ToolTipBase, "base"), (R.ToolTipText, "text"),
                      (R.PlaceholderText, "muted"), (R.Highlight, "selection"), (R.HighlightedText, "text"),
                      (R.Link, "accent"), (R.Mid, "border"), (R.Midlight, "alt")):
        p.setColor(role, QColor(c[key]))
    for role in (R.Text, R.WindowText, R.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(c["muted"]))
    return p, c


def is_dark(choice: str) -> bool:
    if choice in ("light", "dark"):
        return choice == "dark"
    return QApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def apply(app: QApplication, choice: str = "system") -> bool:
    """Style the whole app; returns True if dark."""
    dark = is_dark(choice)
    app.setStyle("Fusion")
    pal, colors = palette_for(dark)
    app.setPalette(pal)
    app.setStyleSheet(_QSS.format(**colors))
    return dark


def colors(dark: bool) -> dict:
    return DARK if dark else LIGHT
