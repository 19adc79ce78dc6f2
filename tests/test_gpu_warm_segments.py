"""Chats kept warm on the GPU for the stateful architectures (#29): a chat saved turn by turn on the
GPU backend (one segment a turn: qwen35's recurrent state at its end, Gemma 4's other head size's
K/V) is read by another GPU engine, whose next logits equal a fresh GPU computation in the same
chunks bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine import Engine
from hearth.engine.prefix import PrefixStore
from hearth.engine.prefix.chat_images import ChatImages, Root
from hearth.engine.prefix.format import FLAG_STATE, HEADER_SIZE
from hearth.engine.prefix.segments import SegmentHeader
from tests.tiny_archs import tiny_path

IDS = list(range(1000, 1040))
TURNS = [IDS[:12], IDS[12:21], IDS[21:28]]


@pytest.fixture(scope="module", params=["qwen35", "gemma4", "gemma4-shared", "gemma4-moe"])
def path(request, reference_dir, tmp_path_factory):
    from tests.gpu_fixtures import make_test_device
    make_test_device().destroy()          # skips where there is no adapter
    return tiny_path(request.param, reference_dir, tmp_path_factory)


def test_chat_segments_hold_the_state_and_a_fresh_gpu_engine_restores_them(path, tmp_path):
    a = Engine.load(path, backend="gpu", n_ctx=96)
    b = Engine.load(path, backend="gpu", n_ctx=96)
    try:
        assert a.backend.name == "gpu" and a.segments_cacheable
        chats = ChatImages(PrefixStore(tmp_path))
        ids: list[int] = []
        for t in TURNS:
            ids = ids + t
            a.prefill(ids)
            assert not chats.save(a, Root.none(), owner="c").error
        files = list(tmp_path.glob("*.hps"))
        assert len(files) == 3
        assert all(SegmentHeader.unpack(p.read_bytes()[:HEADER_SIZE]).flags & FLAG_STATE for p in files)
        nxt = [7, 8]
        for c in [*TURNS, nxt]:
            want = b.feed(c).copy()
        b.reset()
        got = chats.restore(b, ids + nxt, Root.none())
        assert got.restored == len(ids) and b.tokens == ids and not got.refused
        np.testing.assert_array_equal(b.feed(nxt), want)
    finally:
        a.close()
        b.close()
