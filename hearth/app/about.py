"""Help → About Hearth: the version, where models, data and the cache are, and the licences."""

from __future__ import annotations

import importlib.metadata
import platform

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout

from hearth.engine.paths import cache_dir, data_dir, default_model_path


def version() -> str:
    try:
        return importlib.metadata.version("hearth")
    except importlib.metadata.PackageNotFoundError:
        return "development copy"


def about_html() -> str:
    try:
        model = str(default_model_path().parent)
    except Exception as e:  # noqa: BLE001  (a missing default model is said, not raised)
        model = f"not found ({e})"
    rows = [("Version", version()), ("Default model folder", model), ("Data (chats, presets, settings)",
            str(data_dir())), ("Cache (prefix images)", str(cache_dir())),
            ("Python / Qt", f"{platform.python_version()} / PySide6 {pyside_version}")]
    table = "".join(f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{v}</td></tr>" for k, v in rows)
    return (f"<h2>Hearth</h2><p>A chat app for language models that run on this computer.</p>"
            f"<table>{table}</table>"
            "<p><b>Licences</b><br>Hearth: Apache-2.0.<br>"
            "SmolLM2-135M-Instruct (the default model): Apache-2.0, by Hugging Face.<br>"
            "Qt for Python (PySide6): LGPL-3.0. numpy: BSD-3-Clause. wgpu-py: BSD-2-Clause.</p>")


class AboutDialog(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("aboutDialog")
        self.setWindowTitle("About Hearth")
        lay = QVBoxLayout(self)
        self.text = QLabel(about_html(), objectName="aboutText", wordWrap=True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
