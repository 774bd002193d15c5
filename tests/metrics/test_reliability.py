"""Split-half reliability (Spearman-Brown) and the disattenuated correlation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.reliability import (
    disattenuated_correlation,
    spearman_brown,
    split_half_reliability,
    split_orders,
)

PROPS = settings(derandomize=True, deadline=None, max_examples=10)


def planted_units(rng, n_concepts, n_units, sd_between, sd_within):
    truth = rng.normal(0.0, sd_between, size=n_concepts)
    return {c: truth[c] + rng.normal(0.0, sd_within, size=n_units) for c in range(n_concepts)}


def theory(sd_between: float, sd_within: float, n_units: int) -> float:
    """The reliability of a mean of n units: var_between / (var_between + var_within / n)."""
    return sd_between**2 / (sd_between**2 + sd_within**2 / n_units)


def tolerance(reliability: float, n_concepts: int) -> float:
    """3.5 delta-method standard errors of the corrected estimate (plus a little): the
    half correlation has SE (1 - r^2)/sqrt(C), and Spearman-Brown's slope is 2/(1 + r)^2."""
    half = reliability / (2 - reliability)
    return 3.5 * 2 / (1 + half) ** 2 * (1 - half**2) / math.sqrt(n_concepts) + 0.01


@PROPS
@given(
    st.floats(0.3, 2.0),
    st.floats(0.5, 3.0),
    st.sampled_from([4, 6, 8, 12, 20]),
    st.integers(0, 2**16),
)
def test_a_planted_effect_is_recovered_with_the_reliability_theory_predicts(sd_b, sd_w, n, seed):
    n_concepts = 1500
    units = planted_units(np.random.default_rng(seed), n_concepts, n, sd_b, sd_w)
    expected = theory(sd_b, sd_w, n)
    rel = split_half_reliability(units, seed=seed)
    assert rel.evaluable and rel.n_concepts == n_concepts
    assert rel.estimate == pytest.approx(expected, abs=tolerance(expected, n_concepts))
    assert rel.estimate == pytest.approx(spearman_brown(rel.half_r))


def test_the_bootstrap_interval_brackets_the_theory():
    units = planted_units(np.random.default_rng(3), 200, 6, 0.5, 1.0)
    rel = split_half_reliability(units, n_boot=1000)
    expected = theory(0.5, 1.0, 6)
    assert rel.interval is not None and rel.interval.evaluable
    assert rel.interval.low < expected < rel.interval.high
    assert rel.interval.low < rel.estimate < rel.interval.high
    assert rel.interval.n == 1200 and rel.interval.n_clusters == 200


def test_odd_even_and_stratified_splits_balance_the_strata():
    """Prompt-major prompts x samples: odd/even puts one sample of each prompt in each
    half, and random stratified splits do the same, whatever the permutation."""
    strata = [p for p in range(3) for _ in range(2)]  # p0 p0 p1 p1 p2 p2
    odd_even = split_orders(6, mode="odd_even", strata=strata)
    assert odd_even.tolist() == [[0, 1, 2, 3, 4, 5]]
    orders = split_orders(6, 50, "random", strata, np.random.default_rng(0))
    assert orders.shape == (50, 6)
    for order in orders:
        assert sorted(order) == list(range(6))
        assert sorted(strata[i] for i in order[0::2]) == [0, 1, 2]
    assert len({tuple(o) for o in orders}) > 1


def test_a_stratum_effect_per_concept_does_not_leak_into_unstratified_halves():
    """Each concept has its own prompt effects (a concept x prompt interaction) that do not
    vary between samples: stratified halves both carry every prompt, so the measure is
    reliable; the same data with one prompt's units in one half only looks less so."""
    rng = np.random.default_rng(5)
    units, strata = {}, {}
    for c in range(300):
        effect = rng.normal(0, 1.0, size=3)  # the concept's three prompts
        units[c] = np.repeat(effect, 2) + rng.normal(0, 0.2, size=6)
        strata[c] = [0, 0, 1, 1, 2, 2]
    stratified = split_half_reliability(units, mode="odd_even", strata=strata)
    by_prompt = {c: units[c][[0, 2, 4, 1, 3, 5]] for c in units}  # halves = prompt sets
    unbalanced = split_half_reliability(by_prompt, mode="odd_even")
    assert stratified.estimate > 0.9
    assert unbalanced.estimate < stratified.estimate


def test_reliability_is_seeded():
    units = planted_units(np.random.default_rng(0), 20, 6, 1.0, 1.0)
    first = split_half_reliability(units, seed=4, n_boot=200)
    assert first == split_half_reliability(units, seed=4, n_boot=200)
    assert first.estimate != split_half_reliability(units, seed=5).estimate
    assert first.split_sd is not None and first.split_sd > 0


def test_not_evaluable_reliabilities_say_why():
    two = split_half_reliability({0: [1.0, 2.0], 1: [3.0, 4.0]})
    assert not two.evaluable and "need 3" in two.reason
    flat = split_half_reliability({c: [1.0, 1.0, 1.0, 1.0] for c in range(5)})
    assert not flat.evaluable and "do not vary" in flat.reason
    with pytest.raises(ValueError, match="at least 2 units"):
        split_half_reliability({c: [float(c)] for c in range(5)})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_disattenuated_correlation_recovers_the_true_one(seed):
    """True per-concept values correlate 0.6; x is a mean of 8 noisy units (reliability
    0.5), y of 6 (0.86): the observed r estimates 0.6 x sqrt(0.5 x 0.86) = 0.39, the
    corrected one 0.6."""
    rng = np.random.default_rng(seed)
    rho, n_concepts = 0.6, 400
    truth = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n_concepts)
    x = {c: truth[c, 0] + 2.0 * rng.normal(size=8) for c in range(n_concepts)}
    y = {c: truth[c, 1] + 1.0 * rng.normal(size=6) for c in range(n_concepts)}
    result = disattenuated_correlation(x, y, n_boot=500, seed=seed)
    attenuated = rho * math.sqrt(theory(1, 2, 8) * theory(1, 1, 6))
    assert result.observed.estimate == pytest.approx(attenuated, abs=0.12)
    assert result.corrected.estimate == pytest.approx(rho, abs=0.12)
    assert result.corrected.low < rho < result.corrected.high
    assert result.corrected.estimate == pytest.approx(
        result.observed.estimate
        / math.sqrt(result.reliability_x.estimate * result.reliability_y.estimate)
    )
    assert result.corrected.n_clusters == n_concepts and result.dropped_replicates == 0


def anti_correlated_halves(seed: int = 1, n: int = 30) -> dict:
    """Units whose two halves anti-correlate across concepts (one unit z, the other -z)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n)
    return {c: np.array([z[c], -z[c]]) + rng.normal(0, 0.3, size=2) for c in range(n)}


def test_a_negative_spearman_brown_value_is_not_estimable_its_raw_value_kept():
    """Halves that anti-correlate across concepts give a Spearman-Brown value below 0: no
    reliability (a share of variance lies in [0, 1]); it says why, keeps the value under
    its own name, and has no interval that would look like a reliability's."""
    rel = split_half_reliability(anti_correlated_halves(), mode="odd_even", n_boot=100)
    assert rel.estimate is None and not rel.evaluable and rel.interval is None
    assert rel.half_r < 0 and rel.spearman_brown_raw == pytest.approx(spearman_brown(rel.half_r))
    assert rel.spearman_brown_raw < 0
    assert "outside [0, 1]" in rel.reason
    assert f"{rel.spearman_brown_raw:.3f}" in rel.reason
    assert rel.to_dict()["estimate"] is None


def test_a_correlation_with_a_not_estimable_reliability_is_not_corrected_never_nan():
    """The correlation is then reported uncorrected, with the reason."""
    rng = np.random.default_rng(1)
    x = anti_correlated_halves()
    y = {c: rng.normal(size=4) + x[c][0] for c in range(30)}
    result = disattenuated_correlation(x, y, mode="odd_even", n_boot=300)
    assert not result.reliability_x.evaluable and not result.reliability_x.usable
    assert not result.corrected.evaluable and result.corrected.estimate is None
    assert "reliability of x is not estimable" in result.corrected.reason
    assert "outside [0, 1]" in result.corrected.reason
    assert result.observed.evaluable  # the observed r still stands
    values = result.corrected.to_dict().values()
    assert not any(isinstance(v, float) and math.isnan(v) for v in values)


@PROPS
@given(
    st.integers(3, 8),
    st.integers(2, 6),
    st.floats(0.0, 2.0),
    st.sampled_from(["random", "odd_even"]),
    st.integers(0, 2**16),
)
def test_a_reliability_is_in_0_1_or_not_estimable_with_its_reason(
    n_concepts, n_units, sd_between, mode, seed
):
    """Whatever the data, a reported reliability lies in [0, 1]; any other value of the
    formula is not estimable, says why and is kept only as ``spearman_brown_raw``."""
    units = planted_units(np.random.default_rng(seed), n_concepts, n_units, sd_between, 1.0)
    rel = split_half_reliability(units, mode=mode, n_splits=10, seed=seed)
    if rel.estimate is not None:
        assert 0.0 <= rel.estimate <= 1.0
        assert rel.spearman_brown_raw == rel.estimate
    else:
        assert rel.reason
        raw = rel.spearman_brown_raw
        if raw is not None:
            assert not 0.0 <= raw <= 1.0 and "outside [0, 1]" in rel.reason


def test_replicates_with_a_non_positive_reliability_are_dropped_and_counted():
    """A barely reliable measure over few concepts: some replicates' reliability is <= 0;
    they are dropped from the interval and counted, never turned into NaN bounds."""
    rng = np.random.default_rng(2)
    x = planted_units(rng, 12, 4, 0.4, 1.0)
    y = {c: x[c] + rng.normal(0, 0.5, size=4) for c in x}
    result = disattenuated_correlation(x, y, n_boot=400, seed=1)
    assert result.reliability_x.usable
    assert result.dropped_replicates > 0
    if result.corrected.evaluable:
        assert np.isfinite(result.corrected.low) and np.isfinite(result.corrected.high)
    else:
        assert result.corrected.reason == "too few valid replicates"
