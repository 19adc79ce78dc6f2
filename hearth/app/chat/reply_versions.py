"""The versions of a reply that Regenerate wrote, kept in the reply's own stats (Qt-free).

The message shown is one version; the others are in its stats["versions"] (in order, the shown
one left out) and stats["version"] is the shown one's place among all of them:
all = versions[:version] + [shown] + versions[version:]. A version is {"content", "stats",
"model"}. Only a plain reply (no tool calls) keeps versions; the chat continues from the one shown.
"""

from __future__ import annotations

from ..store.chat_store import Message

_KEYS = ("versions", "version")


def _record(m: Message) -> dict:
    return {"content": m.content, "stats": {k: v for k, v in (m.stats or {}).items() if k not in _KEYS},
            "model": m.model}


def all_versions(m: Message) -> tuple[list[dict], int]:
    """(every version in order, the shown one's index)."""
    others = list((m.stats or {}).get("versions") or [])
    k = max(0, min(int((m.stats or {}).get("version", len(others))), len(others)))
    return others[:k] + [_record(m)] + others[k:], k


def count(stats: dict) -> tuple[int, int]:
    """(shown version 1-based, how many) from a reply's stats; (1, 1) for a reply never regenerated."""
    others = (stats or {}).get("versions") or []
    return int(stats.get("version", len(others))) + 1, len(others) + 1


def kept_for_regenerate(m: Message) -> list[dict]:
    """The versions a new reply replacing `m` carries: every version of `m`, in order."""
    if m.role != "assistant" or m.tool_calls:
        return []
    versions, _ = all_versions(m)
    return [v for v in versions if v["content"] or not v["stats"].get("error")]   # a failure is no version


def with_versions(stats: dict, kept: list[dict]) -> dict:
    """A new reply's stats carrying the earlier versions; it is shown as the newest."""
    if not kept:
        return stats
    return {**stats, "versions": kept, "version": len(kept)}


def showing(m: Message, k: int) -> Message:
    """`m` showing version `k` (0-based) instead, the others kept."""
    versions, _ = all_versions(m)
    k = max(0, min(k, len(versions) - 1))
    v = versions[k]
    others = versions[:k] + versions[k + 1:]
    return Message("assistant", v["content"], stats={**v["stats"], "versions": others, "version": k},
                   model=v.get("model", ""))
