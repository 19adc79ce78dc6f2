"""Renders resources/hearth.svg (the app's icon) to the PNG sizes a desktop wants:
resources/icons/hicolor/<N>x<N>/apps/hearth.png for N in SIZES, laid out like the freedesktop icon
theme so the folder can be copied under ~/.local/share/icons/ as is.

    python packaging/render_icons.py            (re)render
    python packaging/render_icons.py --check    exit 1 if a PNG is missing or differs from a fresh render
                                                (beyond anti-aliasing: see _same)

Rendering uses Qt's SVG renderer (PySide6, already a dependency), offscreen.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "hearth" / "resources" / "hearth.svg"
ICONS = ROOT / "hearth" / "resources" / "icons" / "hicolor"
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)


def png_path(size: int) -> Path:
    return ICONS / f"{size}x{size}" / "apps" / "hearth.png"


def render(size: int):
    """The icon at size x size as a QImage (ARGB32, transparent background)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    r = QSvgRenderer(str(SVG))
    if not r.isValid():
        raise SystemExit(f"render_icons: {SVG} is not a valid SVG")
    img = QImage(size, size, QImage.Format.Format_ARGB32)
    img.fill(Qt.GlobalColor.transparent)
    p = QPainter(img)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    r.render(p)
    p.end()
    return img


def _same(old, new) -> bool:
    """The PNG on disk is this render, up to anti-aliasing: another Qt version may shade edge pixels a
    little differently. Mean difference <= 2 of 255 per channel and under 2% of pixels off by > 32;
    a changed drawing or colour is far beyond that."""
    import numpy as np

    if old.isNull() or old.size() != new.size():
        return False
    a, b = (np.frombuffer(im.convertToFormat(new.format()).constBits(), np.uint8).astype(np.int16)
            for im in (old, new))
    d = np.abs(a - b)
    return d.mean() <= 2.0 and (d.reshape(-1, 4).max(axis=1) > 32).mean() < 0.02


def main(argv: list[str]) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication, QImage

    _app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841
    check = "--check" in argv
    bad = []
    for size in SIZES:
        img, path = render(size), png_path(size)
        if check:
            if not _same(QImage(str(path)), img):
                bad.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not img.save(str(path), "PNG"):
                raise SystemExit(f"render_icons: could not write {path}")
            print(path.relative_to(ROOT))
    if bad:
        print("out of date (run packaging/render_icons.py):", *bad, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
