"""ChatImages: conversations' contexts on disk as chains of segments (segments.py), beside the
preset images of a PrefixStore, in its folder and under its cap.

    chats = ChatImages(store)                       # store: the PrefixStore (folder, cap, LRU)
    saved = chats.save(engine, root, owner="12", title="Trip to Lyon")   # after a reply, on a switch
    got = chats.restore(engine, ids, root)          # before a reply: the longest saved prefix of ids
    chats.remove_owner("12")                        # the chat was deleted

`root` is `Root(key, n)`: the preset prefix image the chain hangs from (its key and token count,
resident first), or `Root.none()` for a chain starting at position 0.

Folder: `<key>.hps` (a segment), `<key>.json` (its sidecar: model, tokens, the chat's title) and
`chats/<owner>.json` (the segments a chat wrote or used: what deleting it may remove). A segment's
last use is its mtime, bumped on restore and on save, so one LRU order covers preset images and
segments. Nothing else is shared state: segments are found by their parent's key, read from the
headers of the folder's files (re-read when the folder changes), so a segment written by the
server is restored by the app and the other way round.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..system.atomic_file import write_atomic, write_text_atomic
from ..errors import EngineError, PrefixImageError
from ..system.files import open_regular
from ..generation import common_prefix
from .format import FLAG_LOGITS, FLAG_STATE, I32, dtype_code
from .io import _read_into, write_all
from .key import model_digest, segment_digest
from .store import META_SUFFIX, SEGMENT_SUFFIX
from .segments import (NO_PARENT, ChainPart, SegmentHeader, image_layers, read_chain, read_segment_header,
                       state_values, write_segment, write_states)

OWNERS_DIR = "chats"


@dataclass(frozen=True)
class Root:
    """Where a chain starts: a prefix image's key (32 bytes) and its token count."""
    key: bytes
    n: int

    @classmethod
    def none(cls) -> "Root":
        return cls(NO_PARENT, 0)

    @classmethod
    def of_prefix(cls, engine, prefix_ids) -> "Root":
        return cls(bytes.fromhex(engine.prefix_key(prefix_ids)), len(prefix_ids))


@dataclass
class Saved:
    key: str = ""
    n_tokens: int = 0          # the context saved (all of it, root included)
    bytes_written: int = 0     # 0: everything was already on disk
    seconds: float = 0.0
    error: str | None = None   # why it was not saved (a full disk, over the cap)


@dataclass
class Restored:
    n_tokens: int = 0          # positions resident after the restore (root included)
    restored: int = 0          # positions read from segments
    seconds: float = 0.0
    refused: int = 0           # segments found damaged (removed; their positions are computed)


@dataclass
class _Found:
    header: SegmentHeader
    path: Path
    use: int


class ChatImages:
    def __init__(self, store):
        self.store = store
        self.root = Path(store.root)
        self._index: dict[bytes, list[tuple[SegmentHeader, Path]]] = {}
        self._index_stamp = None

    def segment_path(self, key: str) -> Path:
        return self.root / f"{key}{SEGMENT_SUFFIX}"

    # --- the chain ---------------------------------------------------------------------------

    def _by_parent(self) -> dict[bytes, list[tuple[SegmentHeader, Path]]]:
        """Segments by parent key, from the headers on disk; re-read when the folder changed."""
        try:
            stamp = os.stat(self.root).st_mtime_ns
        except OSError:
            return {}
        if stamp == self._index_stamp:
            return self._index
        index: dict[bytes, list[tuple[SegmentHeader, Path]]] = {}
        for p in self.root.glob(f"*{SEGMENT_SUFFIX}"):
            if p.name.startswith("."):
                continue
            try:
                with open_regular(p) as f:      # a FIFO named *.hps must not block the lookup
                    h = read_segment_header(f)
            except (OSError, PrefixImageError):
                continue  # unreadable: the restore never finds it; the cap removes it in time
            index.setdefault(h.parent, []).append((h, p))
        self._index, self._index_stamp = index, stamp
        return index

    def _key(self, engine, parent: bytes, start: int, ids) -> bytes:
        kv = engine.kv   # a snapshot's layout (layer pattern, shapes, dtype) is part of the key
        return segment_digest(backend=engine.backend.describe(), model=model_digest(engine.gguf),
                              parent=parent, start=start, ids=ids, dtype=_dtype(engine),
                              state=kv.state_layout() if hasattr(kv, "state_layout") else "")

    def _walk(self, engine, ids: list[int], root: Root, branch: bool) -> list[_Found]:
        """The longest chain of whole segments matching `ids` from `root`; with `branch`, then the
        segment (of the last one's children) sharing the most leading tokens with the rest of `ids`."""
        index = self._by_parent()
        found: list[_Found] = []
        parent, pos = root.key, root.n
        while True:
            best = None
            for h, p in index.get(parent, ()):
                if h.start != pos or pos + h.n_tokens > len(ids):
                    continue
                if best is not None and h.n_tokens <= best.header.n_tokens:
                    continue
                if self._key(engine, parent, pos, ids[pos:pos + h.n_tokens]) == h.key:
                    best = _Found(h, p, h.n_tokens)
            if best is None:
                break
            found.append(best)
            parent, pos = best.header.key, best.header.end
        if branch and pos < len(ids):
            best = None
            for h, p in index.get(parent, ()):
                if h.start != pos:
                    continue
                stored = _stored_ids(p, h)
                if stored is None:
                    continue
                m = common_prefix(stored, ids[pos:pos + h.n_tokens])
                if m and (best is None or m > best.use) and self._key(engine, parent, pos, stored) == h.key:
                    best = _Found(h, p, m)
            if best is not None:
                found.append(best)
        return found

    def saved_prefix(self, engine, ids, root: Root) -> int:
        """How many leading tokens of `ids` a restore would bring back (root included)."""
        branch = not getattr(engine.kv, "recurrent", False)   # a recurrent state: whole segments only
        found = self._walk(engine, list(ids), root, branch=branch)
        return found[-1].header.start + found[-1].use if found else root.n

    # --- restoring ---------------------------------------------------------------------------

    def restore(self, engine, ids, root: Root) -> Restored:
        """Make the longest saved prefix of `ids` resident, when it reaches past what already is.
        The root's tokens must be resident (a PrefixStore restored or computed them). Damaged or
        refused segments are removed and their positions left to compute; nothing is raised for
        them."""
        t0 = time.perf_counter()
        ids = [int(i) for i in ids]
        with engine.locked():  # one caller at a time, as every Engine method
            resident = engine.tokens
            if not getattr(engine, "segments_cacheable", True):   # segments hold no recurrent state
                return Restored(common_prefix(resident, ids))
            if resident[:root.n] != ids[:root.n]:
                return Restored(common_prefix(resident, ids))
            common = common_prefix(resident, ids)
            recurrent = bool(getattr(engine.kv, "recurrent", False))
            # a recurrent state is known only at a whole segment's end: no branch inside one; and what
            # is resident counts up to the nearest state at hand (the last snapshot before the edit)
            found = self._walk(engine, ids, root, branch=not recurrent)
            reach = engine.state_reach(common) if recurrent else common
            found = [f for f in found if f.header.start + f.use > reach]
            if not found:
                return Restored(common)
            parts = []
            try:
                for f in found:
                    part = self._open(engine, f)
                    if part is None:
                        break
                    parts.append(part)
                if not parts:
                    return Restored(common)
                start = parts[0].header.start
                engine.kv.check_fits(0, parts[-1].header.start + parts[-1].use)
                engine.begin_chain(start)
                wrote = False
                try:
                    n_good, logits = read_chain(parts, ids, engine.kv)
                    wrote = write_states(parts, engine.kv, n_good)
                except BaseException:
                    n_good, logits = start, None
                    raise
                finally:
                    engine.adopt_chain(ids[:n_good], logits, wrote)
            finally:
                for part in parts:
                    part.f.close()
            refused = 0
            for part, f in zip(parts, found):     # parts are the first of `found`, in order
                if part.failed:
                    refused += 1
                    _unlink(f.path)
                elif part.header.start < n_good:
                    _touch(f.path)
            return Restored(n_good, n_good - start, time.perf_counter() - t0, refused)

    def _open(self, engine, f: _Found) -> ChainPart | None:
        try:
            fh = open_regular(f.path, buffering=0)
        except OSError:
            return None
        try:
            h = read_segment_header(fh)
            if h != f.header:
                raise PrefixImageError("header", "the segment changed since it was listed")
            h.check_shape(engine.kv, int(engine.config.n_vocab), _dtype(engine))   # state size included
            if os.fstat(fh.fileno()).st_size != h.image_size:
                raise PrefixImageError("truncated", f"{f.path.name}: {os.fstat(fh.fileno()).st_size} bytes, "
                                                    f"{h.image_size} declared")
        except (OSError, PrefixImageError):
            fh.close()
            _unlink(f.path)
            return None
        return ChainPart(fh, h, f.use)

    # --- saving ------------------------------------------------------------------------------

    def save(self, engine, root: Root, owner: str | None = None, title: str | None = None) -> Saved:
        """Write what is resident past the longest chain already on disk as one new segment
        (nothing when all of it is there). A full disk or a segment over the cap is reported in
        the result, never raised; nothing half written is left under a segment's name."""
        t0 = time.perf_counter()
        with engine.locked():
            ids = engine.tokens
            if not getattr(engine, "segments_cacheable", True):   # nothing saved: segments hold no recurrent state
                return Saved(n_tokens=0)
            out = Saved(n_tokens=len(ids))
            if len(ids) <= root.n:
                return out
            found = self._walk(engine, ids, root, branch=False)
            parent, start = (found[-1].header.key, found[-1].header.end) if found else (root.key, root.n)
            keys = [f.header.key.hex() for f in found]
            if start < len(ids):
                seg_ids = ids[start:]
                logits = engine.last_logits
                kv = engine.kv
                n_state = state_values(kv, start, len(seg_ids))
                h = SegmentHeader(image_layers(kv), kv.n_kv_heads, kv.head_dim, start, len(seg_ids),
                                  int(engine.config.n_vocab), self._key(engine, parent, start, seg_ids), parent,
                                  flags=(FLAG_LOGITS if logits is not None else 0) | (FLAG_STATE if n_state else 0),
                                  dtype=_dtype(engine), n_state=n_state)
                try:
                    h.check_fields()
                except ValueError as e:      # a wrapped u32 would make a wrong file: none is written
                    out.error = str(e)
                    return out
                if h.image_size > self.store.cap_bytes:
                    out.error = f"the context of {h.image_size} bytes is larger than the cache cap"
                    return out
                path = self.segment_path(h.key.hex())
                try:
                    write_atomic(path, lambda f: write_segment(f, h, seg_ids, kv, logits))
                except (OSError, EngineError) as e:   # a full disk; a state not at the segment's end
                    out.error = f"{getattr(e, 'strerror', None) or e}"
                    out.seconds = time.perf_counter() - t0
                    return out
                out.bytes_written = h.image_size
                keys.append(h.key.hex())
                self._write_meta(engine, h, title)
            for k in keys:
                _touch(self.segment_path(k))
            out.key = keys[-1] if keys else ""
        if owner is not None:
            self._own(owner, keys, title, len(ids))
        self.store.evict(protect=set(keys))
        out.seconds = time.perf_counter() - t0
        return out

    def _write_meta(self, engine, h: SegmentHeader, title: str | None) -> None:
        g = engine.gguf
        meta = {"kind": "chat", "key": h.key.hex(), "parent": h.parent.hex(), "start": h.start,
                "n_tokens": h.end, "image_size": h.image_size, "label": title,
                "model_path": str(Path(g.path).resolve()), "model_size": g.file_size,
                "model_name": str(g.metadata.get("general.name") or Path(g.path).stem),
                "backend": engine.backend.describe(), "created": time.time()}
        try:
            data = json.dumps(meta, indent=1).encode()
            write_atomic(self.root / f"{h.key.hex()}{META_SUFFIX}", lambda f: write_all(f, data))
        except OSError:
            pass  # the segment is good without it

    # --- owners: which chat wrote or used which segments -------------------------------------

    def _owner_path(self, owner: str) -> Path:
        return self.root / OWNERS_DIR / f"{_safe(owner)}.json"

    def _owners(self) -> dict[str, dict]:
        out = {}
        for p in (self.root / OWNERS_DIR).glob("*.json"):
            try:
                v = _json_of(p)
            except (OSError, ValueError):
                continue
            if isinstance(v, dict):
                out[p.stem] = v
        return out

    def _own(self, owner: str, keys: list[str], title: str | None, n_tokens: int) -> None:
        p = self._owner_path(owner)
        try:
            cur = _json_of(p)
        except (OSError, ValueError):
            cur = {}
        segs = list(dict.fromkeys([*cur.get("segments", []), *keys]))
        doc = {"owner": owner, "title": title if title is not None else cur.get("title"),
               "segments": segs, "chain": keys, "n_tokens": n_tokens, "saved": time.time()}
        try:
            write_text_atomic(p, json.dumps(doc, indent=1))
        except OSError:
            pass  # only deleting the chat needs it; the cap removes its segments otherwise

    def remove_owner(self, owner: str) -> int:
        """Delete a chat's segments, except those another chat also uses. Returns how many went."""
        owners = self._owners()
        mine = owners.pop(_safe(owner), None)
        if mine is None:
            return 0
        shared = {k for o in owners.values() for k in o.get("segments", [])}
        n = 0
        for k in mine.get("segments", []):
            if k not in shared:
                n += self.remove(k)
        _unlink(self._owner_path(owner))
        return n

    def remove(self, key: str) -> int:
        gone = _unlink(self.segment_path(key))
        _unlink(self.root / f"{key}{META_SUFFIX}")
        return int(gone)

    def chats(self) -> list[dict]:
        """One row per chat for the cache panel: owner, title, tokens (the chat's length now),
        stored_tokens and size (of every segment the chat keeps on disk, earlier versions of its
        replies and edits included), segments, last use."""
        out = []
        for owner, doc in self._owners().items():
            size, last, stored, n_segments, meta = 0, 0.0, 0, 0, {}
            for k in doc.get("segments", []):
                try:
                    st = self.segment_path(k).stat()
                except OSError:
                    continue
                size += st.st_size
                last = max(last, st.st_mtime)
                n_segments += 1
                try:
                    meta = _json_of(self.root / f"{k}{META_SUFFIX}")
                    stored += int(meta.get("n_tokens", 0)) - int(meta.get("start", 0))
                except (OSError, ValueError, TypeError, AttributeError):
                    continue
            if not size:
                continue
            out.append({"owner": owner, "title": doc.get("title") or "", "tokens": int(doc.get("n_tokens") or 0),
                        "stored_tokens": stored, "segments": n_segments, "size": size, "last_used": last,
                        "model_path": meta.get("model_path") or "", "model_name": meta.get("model_name") or ""})
        out.sort(key=lambda r: -r["last_used"])
        return out


def _dtype(engine) -> int:
    """The dtype code of the engine's KV cache: a segment of another dtype is refused by key and shape."""
    return dtype_code(engine.kv.dtype)


def _json_of(path: Path):
    """The JSON in a regular file; OSError for a FIFO or device (never waited on), ValueError for
    text that is no JSON object."""
    with open_regular(path) as f:
        v = json.loads(f.read(1 << 20).decode("utf-8"))
    if not isinstance(v, dict):
        raise ValueError(f"{path.name}: not a JSON object")
    return v


def _stored_ids(path: Path, h: SegmentHeader) -> list[int] | None:
    try:
        with open_regular(path) as f:
            f.seek(128)
            raw = np.empty(h.n_tokens, I32)
            _read_into(f, raw, "the token ids", 128)
            return raw.tolist()
    except (OSError, PrefixImageError):
        return None


def _safe(owner: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(owner))


def _touch(p: Path) -> None:
    try:
        os.utime(p)
    except OSError:
        pass


def _unlink(p) -> bool:
    try:
        os.unlink(p)
        return True
    except OSError:
        return False
