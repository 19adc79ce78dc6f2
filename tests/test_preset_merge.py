"""app/store/preset_merge.py: what two processes did to the presets since the last save is all kept."""

from __future__ import annotations

from hearth.app.store.preset_merge import merge


def run(base, mine, theirs):
    b = {p[0]: p for p in base}
    return merge(b, mine, theirs, key=lambda p: p[0], same=lambda a, c: a == c)


BASE = [("a", 1), ("b", 1), ("c", 1)]


def test_nothing_changed_elsewhere_is_mine():
    assert run(BASE, [("b", 1), ("a", 2)], BASE) == [("b", 1), ("a", 2)]


def test_a_preset_added_elsewhere_is_kept_after_mine():
    assert run(BASE, BASE + [("mine", 1)], BASE + [("theirs", 1)]) == BASE + [("mine", 1), ("theirs", 1)]


def test_edits_on_both_sides_keep_both_and_mine_wins_on_the_same_preset():
    theirs = [("a", 9), ("b", 7), ("c", 1)]
    mine = [("a", 2), ("b", 1), ("c", 1)]
    assert run(BASE, mine, theirs) == [("a", 2), ("b", 7), ("c", 1)]


def test_deletions_on_either_side_are_kept():
    assert run(BASE, [("a", 1), ("b", 1)], [("b", 1), ("c", 1)]) == [("b", 1)]


def test_an_edit_here_survives_a_deletion_there():
    assert run(BASE, [("a", 5), ("b", 1), ("c", 1)], [("b", 1), ("c", 1)]) == [("a", 5), ("b", 1), ("c", 1)]
