"""PrefixStore: prefix images on disk, keyed by `prefix_key`, capped in size, safe to share.

    store = PrefixStore()                      # engine.paths.cache_dir() / "prefixes", 2 GiB cap
    result = store.ensure(engine, text, label="Coding assistant")
    result.action   # "resident" | "restored" | "computed" | "recomputed" (after a refused image)

Layout of the folder: `<key>.hpx` (the image, see format.py) and `<key>.json` (what it is for:
model path and name, token count, backend, the caller's label). Nothing else is shared state:
- writes are atomic (engine/system/atomic_file.py): a temporary file in the same folder, fsync, rename over
  the real name, fsync of the folder. A crash or a full disk mid-write leaves at most a `.tmp` file,
  never a half image under a real name, and never touches the previous image of that key. A `.tmp`
  file no live writer holds is removed when a store opens the folder and at each eviction; those
  being written count against the cap;
- only regular files are read (engine/system/files.py: a FIFO never blocks the engine); anything else in
  an image's place is cleared out of the way (a directory renamed to a hidden name, never deleted)
  so that the image can be written;
- the last use of an image is its file's mtime (set when written, bumped on each restore): no index
  file to corrupt or to lock, and every process sees the others' uses;
- two processes may write the same key at once (each renames a complete file; the last one wins) and
  may evict concurrently (a missing file is not an error); a reader keeps the inode it opened.
The size cap counts image bytes and temporary files being written; least recently used images go
first, never the one just written.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..system.atomic_file import write_atomic
from ..errors import PrefixImageError
from ..system.files import NotRegularFile, open_regular, orphaned
from ..paths import cache_dir
from .format import FORMAT_VERSION
from .io import read_header, write_all

DEFAULT_CAP_BYTES = 2 << 30
IMAGE_SUFFIX = ".hpx"
SEGMENT_SUFFIX = ".hps"   # chat segments (chat_images.py): listed, capped and evicted with the images
META_SUFFIX = ".json"


@dataclass
class EnsureResult:
    """What `PrefixStore.ensure` did, for the app's status line and log (never shown as an error)."""
    action: str                 # "resident", "restored", "computed" or "recomputed"
    key: str
    n_tokens: int
    seconds: float = 0.0        # the whole call
    restore_seconds: float = 0.0  # reading the image (also when it was refused)
    compute_seconds: float = 0.0  # prefill
    save_seconds: float = 0.0
    reason: str | None = None   # the refusal's PrefixImageError.reason when action == "recomputed"
    message: str | None = None  # and its message
    saved: bool = False         # a fresh image was written
    save_error: str | None = None  # why it could not be (a full disk, larger than the cap)
    path: Path | None = None

    @property
    def restored(self) -> bool:
        return self.action == "restored"


@dataclass
class ImageEntry:
    """One image on disk, for the cache panel."""
    key: str
    path: Path
    size: int
    last_used: float            # seconds since the epoch
    n_tokens: int | None = None
    model_path: str | None = None
    model_name: str | None = None
    label: str | None = None
    backend: dict = field(default_factory=dict)
    created: float | None = None
    kind: str = "preset"        # "preset" (an image) or "chat" (a chat segment)


class PrefixStore:
    def __init__(self, root: str | os.PathLike | None = None, cap_bytes: int = DEFAULT_CAP_BYTES):
        self.root = Path(root) if root is not None else cache_dir() / "prefixes"
        self.root.mkdir(parents=True, exist_ok=True)
        self.cap_bytes = int(cap_bytes)
        self._sweep()

    def image_path(self, key: str) -> Path:
        return self.root / f"{key}{IMAGE_SUFFIX}"

    def _meta_path(self, key: str) -> Path:
        return self.root / f"{key}{META_SUFFIX}"

    # --- the one call the app makes ----------------------------------------------------------

    def ensure(self, engine, text, label: str | None = None) -> EnsureResult:
        """Make the prefix `text` resident: nothing to do if it already is; else restore its image;
        else (no image, or one refused for any reason) prefill it and write a fresh image over the
        refused one. Failures to write (a full disk) are reported in the result, not raised: the
        engine holds the prefix either way. Restoring replaces whatever was resident."""
        with engine.locked():  # one caller at a time, as every Engine method
            return self._ensure(engine, text, label)

    def _ensure(self, engine, text, label: str | None) -> EnsureResult:
        t0 = time.perf_counter()
        ids = engine.prefix_ids(text)
        key = engine.prefix_key(ids)
        path, n = self.image_path(key), len(ids)
        res = EnsureResult("computed", key, n, path=path)
        resident = engine.tokens
        if resident[:n] == ids:
            res.action = "resident"
            if not getattr(engine, "prefix_cacheable", True):
                res.reason, res.path = "not_cacheable", None
            elif path.is_file():
                _touch(path)
            elif len(resident) == n:  # the logits after the prefix are at hand: keep an image for next time
                self._save_quietly(engine, ids, key, label, res)
            res.seconds = time.perf_counter() - t0
            return res
        if not getattr(engine, "prefix_cacheable", True):
            # A hybrid model's recurrent state is not in an image yet: compute, restore nothing, save nothing.
            t = time.perf_counter()
            engine.prefill(ids)
            res.compute_seconds = time.perf_counter() - t
            res.reason, res.path = "not_cacheable", None
            res.seconds = time.perf_counter() - t0
            return res
        refused = self._try_restore(engine, ids, path, res)
        if res.action == "restored":
            meta = _read_json(self._meta_path(key))
            if meta is None or (label is not None and meta.get("label") != label):
                self._write_meta(engine, key, ids, label if label is not None else (meta or {}).get("label"))
            res.seconds = time.perf_counter() - t0
            return res
        t = time.perf_counter()
        engine.prefill(ids)
        res.compute_seconds = time.perf_counter() - t
        if refused is not None:
            res.action, res.reason, res.message = "recomputed", refused.reason, f"{path.name}: {refused}"
        self._save_quietly(engine, ids, key, label, res)
        res.seconds = time.perf_counter() - t0
        return res

    def _try_restore(self, engine, ids, path: Path, res: EnsureResult) -> PrefixImageError | None:
        t = time.perf_counter()
        try:
            f = open_regular(path, buffering=0)
        except FileNotFoundError:
            return None
        except NotRegularFile as e:
            _clear_way(path)
            return PrefixImageError("io", f"{path.name} is {e.kind}, not a prefix image")
        except OSError as e:
            return PrefixImageError("io", f"{path.name}: cannot open the prefix image ({e.strerror or e})")
        try:
            with f:
                st = os.fstat(f.fileno())
                engine.reset()  # the image replaces what is resident: no rollback copy needed
                engine.restore_prefix(ids, f)
        except PrefixImageError as e:
            res.restore_seconds = time.perf_counter() - t
            self._remove_if_same(path, st)
            return e
        res.restore_seconds = time.perf_counter() - t
        res.action = "restored"
        _touch(path)
        return None

    def _save_quietly(self, engine, ids, key, label, res: EnsureResult) -> None:
        t = time.perf_counter()
        try:
            self.save(engine, ids, label=label, key=key)
            res.saved = True
        except OSError as e:
            res.save_error = f"{e.strerror or e}" + (f" ({e.filename})" if getattr(e, "filename", None) else "")
        except _TooLarge as e:
            res.save_error = str(e)
        res.save_seconds = time.perf_counter() - t

    # --- writing -----------------------------------------------------------------------------

    def save(self, engine, text, label: str | None = None, key: str | None = None) -> Path:
        """Write the image of `text` (prefilled first if need be) atomically under its key, then its
        metadata, then evict to the cap. Raises OSError (nothing left behind) if the disk is full,
        PrefixImageError("not_cacheable") for a model whose state an image cannot hold."""
        if not getattr(engine, "prefix_cacheable", True):
            engine.check_cacheable()   # raises, naming the file
        ids = engine.prefix_ids(text)
        key = key or engine.prefix_key(ids)
        header = engine.prefix_header(ids)
        try:
            header.check_fields()   # a size a u32 header field cannot hold: no file rather than a wrong one
        except ValueError as e:
            raise _TooLarge(str(e)) from e
        size = header.image_size
        if size > self.cap_bytes:
            raise _TooLarge(f"the image of {size} bytes is larger than the cache cap of {self.cap_bytes}")
        path = self.image_path(key)
        _clear_way(path)
        self._write_atomic(path, lambda f: engine.save_prefix(ids, f))
        self._write_meta(engine, key, ids, label)
        self.evict(protect={key})
        return path

    def _write_meta(self, engine, key: str, ids, label: str | None) -> None:
        """The image's sidecar: what the cache panel shows and what `remove_missing_models` checks."""
        g = engine.gguf
        meta = {
            "key": key, "n_tokens": len(ids), "image_size": engine.prefix_header(ids).image_size,
            "label": label, "model_path": str(Path(g.path).resolve()), "model_size": g.file_size,
            "model_name": str(g.metadata.get("general.name") or Path(g.path).stem),
            "backend": engine.backend.describe(), "format_version": FORMAT_VERSION, "created": time.time(),
        }
        try:
            data = json.dumps(meta, indent=1).encode()
            self._write_atomic(self._meta_path(key), lambda f: write_all(f, data))
        except OSError:
            pass  # the image is good without it; the listing shows it as of an unknown model

    def _write_atomic(self, final: Path, write: Callable) -> None:
        write_atomic(final, write)

    # --- listing and removing ----------------------------------------------------------------

    def entries(self) -> list[ImageEntry]:
        """Every image in the folder, most recently used first."""
        out = []
        paths = [*self.root.glob(f"*{IMAGE_SUFFIX}"), *self.root.glob(f"*{SEGMENT_SUFFIX}")]
        for p in paths:
            if p.name.startswith("."):
                continue
            try:
                st = p.stat()
            except FileNotFoundError:
                continue  # evicted by another process meanwhile
            if not stat.S_ISREG(st.st_mode):
                continue  # not an image: cleared when its key is next written
            key = p.name[:-len(p.suffix)]
            kind = "chat" if p.suffix == SEGMENT_SUFFIX else "preset"
            e = ImageEntry(key, p, st.st_size, st.st_mtime, kind=kind)
            meta = _read_json(self._meta_path(key)) or {}
            e.n_tokens = meta.get("n_tokens")
            e.model_path, e.model_name = meta.get("model_path"), meta.get("model_name")
            e.label, e.backend, e.created = meta.get("label"), meta.get("backend") or {}, meta.get("created")
            if e.n_tokens is None and kind == "preset":
                e.n_tokens = _header_tokens(p)
            out.append(e)
        out.sort(key=lambda e: (-e.last_used, e.key))
        return out

    def total_bytes(self) -> int:
        """Images, and temporary files being written (they become images or go)."""
        return sum(e.size for e in self.entries()) + self._temp_bytes()

    def _temp_bytes(self) -> int:
        total = 0
        for p in self.root.glob(".*.tmp"):
            try:
                total += p.lstat().st_size
            except OSError:
                pass
        return total

    def remove(self, key: str) -> None:
        for p in (self.image_path(key), self.root / f"{key}{SEGMENT_SUFFIX}", self._meta_path(key)):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def clear(self) -> int:
        """Remove every image; returns how many."""
        entries = self.entries()
        for e in entries:
            self.remove(e.key)
        self._sweep()
        return len(entries)

    def evict(self, protect: set[str] = frozenset()) -> list[ImageEntry]:
        """Remove least recently used images until the total fits the cap; returns those removed."""
        self._sweep()
        entries = self.entries()
        total = sum(e.size for e in entries) + self._temp_bytes()
        removed = []
        for e in reversed(entries):  # oldest first
            if total <= self.cap_bytes:
                break
            if e.key in protect:
                continue
            self.remove(e.key)
            total -= e.size
            removed.append(e)
        return removed

    def missing_models(self) -> list[ImageEntry]:
        """Images whose model file is gone or changed size (they can never be restored again).
        Images without metadata are not listed: the size cap takes care of them."""
        out = []
        for e in self.entries():
            if not e.model_path:
                continue
            meta = _read_json(self._meta_path(e.key)) or {}
            mp = Path(e.model_path)
            try:
                present = mp.is_file() and mp.stat().st_size == meta.get("model_size", mp.stat().st_size)
            except OSError:
                present = False
            if not present:
                out.append(e)
        return out

    def remove_missing_models(self) -> list[ImageEntry]:
        """Remove the images of `missing_models()`; returns them."""
        removed = self.missing_models()
        for e in removed:
            self.remove(e.key)
        return removed

    def _sweep(self) -> None:
        """Remove temporary files no live writer holds and metadata whose image is gone."""
        now = time.time()
        for p in orphaned(self.root.glob(".*.tmp")):
            try:
                p.unlink()
            except OSError:
                pass
        for p in self.root.glob(f"*{META_SUFFIX}"):
            stem = p.name[:-len(META_SUFFIX)]
            if not any((self.root / (stem + sfx)).exists() for sfx in (IMAGE_SUFFIX, SEGMENT_SUFFIX)):
                try:
                    if now - p.stat().st_mtime > 60:  # not a writer between its two renames
                        p.unlink()
                except OSError:
                    pass

    def _remove_if_same(self, path: Path, st: os.stat_result) -> None:
        """Remove a refused image unless another process already replaced it with a new file."""
        try:
            now = os.stat(path)
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                path.unlink()
        except OSError:
            pass


class _TooLarge(Exception):
    pass


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass  # a read-only cache still restores; it just cannot record the use




def _clear_way(path: Path) -> None:
    """Make room for an image at `path`: a FIFO, socket or device there is removed, a directory
    renamed to a hidden name beside it (never deleted: it is not ours to judge)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return            # a rename replaces either
    try:
        if stat.S_ISDIR(mode):
            os.rename(path, path.with_name(f".{path.name}.not-an-image-{secrets.token_hex(4)}"))
        else:
            path.unlink()
    except OSError:
        pass              # the write then fails and says why


def _read_json(p: Path) -> dict | None:
    try:
        with open_regular(p) as f:
            v = json.loads(f.read().decode("utf-8"))
        return v if isinstance(v, dict) else None
    except (OSError, ValueError):
        return None


def _header_tokens(p: Path) -> int | None:
    try:
        with open_regular(p) as f:
            return read_header(f)[0].n_tokens
    except (OSError, PrefixImageError):
        return None
