"""Syntax colours for code blocks, from Pygments, in the light and the dark theme.

The whole block is lexed at once (a string or comment may span lines) and each line's spans are
kept by line number; the QSyntaxHighlighter only applies them. The colours follow the palette:
a dark window gets a dark Pygments style, and a palette change (the theme switched) recolours.
A language Pygments does not know is guessed from the code, else left plain.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette, QSyntaxHighlighter, QTextCharFormat

LIGHT_STYLE = "friendly"
DARK_STYLE = "monokai"


def palette_is_dark() -> bool:
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


def spans(lang: str, code: str, dark: bool) -> dict[int, list[tuple[int, int, dict]]]:
    """line -> [(start, length, Pygments style of the token)] for `code` in `lang`."""
    from pygments.lexers import get_lexer_by_name, guess_lexer
    from pygments.styles import get_style_by_name
    from pygments.util import ClassNotFound
    try:
        lexer = get_lexer_by_name(lang) if lang else guess_lexer(code)
    except ClassNotFound:
        return {}
    style = get_style_by_name(DARK_STYLE if dark else LIGHT_STYLE)
    out: dict[int, list[tuple[int, int, dict]]] = {}
    line, col = 0, 0
    for tok, value in lexer.get_tokens(code):
        st = style.style_for_token(tok)
        for k, piece in enumerate(value.split("\n")):
            if k:
                line, col = line + 1, 0
            if piece and (st["color"] or st["bold"] or st["italic"]):
                out.setdefault(line, []).append((col, len(piece), st))
            col += len(piece)
    return out


class CodeHighlighter(QSyntaxHighlighter):
    def __init__(self, document, lang: str):
        super().__init__(document)
        self.lang = lang
        self._spans: dict[int, list] = {}
        self.dark = palette_is_dark()

    def set_code(self, lang: str, code: str) -> None:
        self.lang, self.dark = lang, palette_is_dark()
        self._spans = spans(lang, code, self.dark)
        self.rehighlight()

    def recolour(self) -> None:
        if palette_is_dark() != self.dark:
            self.set_code(self.lang, self.document().toPlainText())

    def highlightBlock(self, text: str) -> None:
        for start, length, st in self._spans.get(self.currentBlock().blockNumber(), ()):
            f = QTextCharFormat()
            if st["color"]:
                f.setForeground(QColor("#" + st["color"]))
            if st["bold"]:
                f.setFontWeight(QFont.Weight.Bold)
            if st["italic"]:
                f.setFontItalic(True)
            self.setFormat(start, length, f)
