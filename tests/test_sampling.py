"""Sampling: greedy, seeded determinism, top-k/top-p/min-p semantics, penalties."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.sampling import Sampler, Sampling, apply_penalties, candidates

OFF = dict(top_k=0, top_p=1.0, min_p=0.0)


def probs_logits(p):
    return np.log(np.asarray(p, np.float64)).astype(np.float32)


def test_greedy_is_argmax():
    logits = np.array([0.1, 3.0, 2.9, -1.0], np.float32)
    assert Sampler(Sampling.greedy())(logits) == 1


def test_same_seed_same_tokens_other_seed_differs():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((50, 1000)).astype(np.float32)
    s = Sampling(temperature=1.0, seed=42, **OFF)
    b_sampler = Sampler(s)
    b = [b_sampler(lg) for lg in logits]
    c_sampler = Sampler(Sampling(temperature=1.0, seed=43, **OFF))
    c = [c_sampler(lg) for lg in logits]
    s1 = Sampler(s)
    a = [s1(lg) for lg in logits]
    assert a == b and a != c


def test_top_k_keeps_the_k_best():
    logits = np.array([1.0, 5.0, 3.0, 4.0, 2.0], np.float32)
    ids, _ = candidates(logits, Sampling(top_k=3, top_p=1.0, min_p=0.0))
    assert ids.tolist() == [1, 3, 2]
    draws = {Sampler(Sampling(temperature=5.0, top_k=2, top_p=1.0, min_p=0.0, seed=i))(logits) for i in range(200)}
    assert draws == {1, 3}


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = probs_logits([0.5, 0.3, 0.15, 0.05])
    assert candidates(logits, Sampling(top_k=0, top_p=0.8, min_p=0.0))[0].tolist() == [0, 1]
    assert candidates(logits, Sampling(top_k=0, top_p=0.81, min_p=0.0))[0].tolist() == [0, 1, 2]
    assert candidates(logits, Sampling(top_k=0, top_p=0.1, min_p=0.0))[0].tolist() == [0]


def test_min_p_is_relative_to_the_best():
    logits = probs_logits([0.5, 0.3, 0.15, 0.05])
    # keep p >= 0.2 * 0.5 = 0.1
    assert candidates(logits, Sampling(top_k=0, top_p=1.0, min_p=0.2))[0].tolist() == [0, 1, 2]
    assert candidates(logits, Sampling(top_k=0, top_p=1.0, min_p=0.9))[0].tolist() == [0]


def test_temperature_frequencies_follow_softmax():
    logits = probs_logits([0.6, 0.3, 0.1])
    sm = Sampler(Sampling(temperature=1.0, seed=7, **OFF))
    counts = np.bincount([sm(logits) for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.6, 0.3, 0.1], atol=0.03)
    cold = Sampler(Sampling(temperature=0.1, seed=7, **OFF))
    assert sum(cold(logits) == 0 for _ in range(500)) >= 490  # (0.6/0.3)^10: ~1000 to 1


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    logits = np.array([2.0, -2.0, 1.0], np.float32)
    out = apply_penalties(logits, [0, 1], Sampling(repeat_penalty=2.0))
    np.testing.assert_allclose(out, [1.0, -4.0, 1.0])
    assert logits[0] == 2.0  # the input is not modified


def test_presence_and_frequency_penalties():
    logits = np.zeros(4, np.float32)
    out = apply_penalties(logits, [1, 1, 1, 2], Sampling(presence_penalty=0.5, frequency_penalty=0.25))
    np.testing.assert_allclose(out, [0.0, -1.25, -0.75, 0.0])


def test_penalty_window_is_the_last_n_tokens():
    logits = np.ones(4, np.float32)
    out = apply_penalties(logits, [0, 1, 2], Sampling(repeat_penalty=2.0, repeat_last_n=2))
    np.testing.assert_allclose(out, [1.0, 0.5, 0.5, 1.0])


def test_penalties_change_the_greedy_choice():
    logits = np.array([3.0, 2.5], np.float32)
    s = Sampling(temperature=0.0, repeat_penalty=1.5)
    assert Sampler(s)(logits, history=[]) == 0
    assert Sampler(s)(logits, history=[0]) == 1
