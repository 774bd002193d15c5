"""The dose held by design (identify/matched.py): the bisection finds each direction's
KL-matched multiplier, flags a target it cannot reach, and the subset spreads over
v*'s AUROC strata."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.identify.matched import (
    bisect_dose,
    first_guess,
    matched,
    stratified_subset,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    a=st.lists(st.floats(0.01, 10.0), min_size=1, max_size=8),
    power=st.floats(1.0, 3.0),
    target=st.floats(0.01, 5.0),
)
def test_the_bisection_matches_any_monotone_kl_inside_its_bracket(a, power, target):
    a = np.array(a)
    calls = []

    def kl_at(k):
        calls.append(1)
        return a * k**power  # one call per step for every direction at once

    guess = first_guess(a, target)  # √(target/KL(1)): exact for power 2
    true = (target / a) ** (1 / power)
    ratio = true / guess
    inside = (ratio >= 1 / 3.9) & (ratio <= 3.9)  # clear of the bracket's edges
    outside = (ratio < 1 / 4.5) | (ratio > 4.5)  # KL at the edge > 10% off the target
    k, achieved = bisect_dose(kl_at, target, guess)
    assert len(calls) == 9  # 8 steps and the achieved KL
    np.testing.assert_allclose(k[inside], true[inside], rtol=0.01)
    assert matched(achieved, target)[inside].all()
    assert not matched(achieved, target)[outside].any()


def test_a_target_the_direction_cannot_reach_is_flagged_not_matched():
    def kl_at(k):
        return np.minimum(0.1 * k**2, 0.2)  # saturates below the target

    k, achieved = bisect_dose(kl_at, 1.0, np.array([1.0]))
    assert not matched(achieved, 1.0)[0]
    assert k[0] > 3.9  # it ran to the bracket's top


def test_the_subset_takes_concepts_from_every_stratum_and_is_seeded():
    values = {f"c{i:02d}": i / 30 for i in range(30)}
    subset = stratified_subset(values, 6, seed=0)
    assert len(subset) == 6 and subset == sorted(subset)
    strata = [int(values[c] * 30) // 10 for c in subset]
    assert sorted(strata) == [0, 0, 1, 1, 2, 2]
    assert stratified_subset(values, 6, seed=0) == subset
    assert stratified_subset(values, 6, seed=1) != subset
    assert stratified_subset(values, 40, seed=0) == sorted(values)
