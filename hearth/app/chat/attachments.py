"""Files attached to a message (Qt-free): text and code as they are, PDF through pypdf.

An attachment goes into the user message as text, each file under its name in a fenced block, so
every chat template takes it (none of the templates Hearth runs has a field for files). A file
that cannot be read as text (binary, damaged PDF) is refused with why; one whose tokens do not
fit the context is refused by the caller, which counts them on the engine.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

from hearth.engine.chat import attachment_text
from hearth.engine.system.files import NotRegularFile, open_regular

MAX_BYTES = 20 * 1024 * 1024   # read no further: no context holds more text than this


class AttachmentError(ValueError):
    """The file cannot be attached; the message names it and says why."""


@dataclass
class Attachment:
    path: str
    name: str
    size: int          # bytes on disk
    text: str
    tokens: int | None = None   # counted on the engine, when known


def human_size(n: int) -> str:
    for unit in ("bytes", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} MB"


def read_attachment(path: str | Path) -> Attachment:
    """The file's text. Only a regular file (or a link to one) is read, and never more than
    MAX_BYTES + 1 bytes, whatever its size says: a device such as /dev/zero says 0 and never ends,
    a FIFO would wait for a writer. Call it off the GUI thread (a slow disk, a large PDF)."""
    p = Path(path)
    try:
        with open_regular(p) as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(MAX_BYTES + 1) if size <= MAX_BYTES else b""   # past the cap by its own word: unread
    except NotRegularFile as e:
        raise AttachmentError(f"{p.name} is {e.kind}, not a regular file (only text, code and PDF files can "
                              "be attached)") from None
    except OSError as e:
        raise AttachmentError(f"{p.name}: cannot be read ({e.strerror or e})") from None
    if size > MAX_BYTES or len(raw) > MAX_BYTES:
        raise AttachmentError(f"{p.name} is {human_size(max(size, len(raw)))}: more text than any context holds")
    size = len(raw)
    if p.suffix.lower() == ".pdf":
        return Attachment(str(p), p.name, size, _pdf_text(p, raw))
    if b"\x00" in raw[:8192]:
        raise AttachmentError(f"{p.name}: not a text file (only text, code and PDF files can be attached)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return Attachment(str(p), p.name, size, text)


def _pdf_text(p: Path, raw: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError
    try:
        reader = PdfReader(io.BytesIO(raw))
        text = "\n\n".join((page.extract_text() or "").strip() for page in reader.pages).strip()
    except (PyPdfError, OSError, ValueError, KeyError) as e:
        raise AttachmentError(f"{p.name}: the PDF cannot be read ({e})") from None
    if not text:
        raise AttachmentError(f"{p.name}: the PDF has no text to read (a scan needs OCR first)")
    return text


def block(a: Attachment) -> str:
    """The attachment as it goes into the message (engine/chat/attachment_text.py owns the format)."""
    return attachment_text.block(a.name, a.text)


def message_text(text: str, attachments: list[Attachment]) -> str:
    """The user message: the attachments first, then what the user typed."""
    parts = [block(a) for a in attachments]
    if text.strip():
        parts.append(text.strip())
    return "\n\n".join(parts)
