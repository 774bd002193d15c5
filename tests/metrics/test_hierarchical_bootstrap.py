"""The concept-level (hierarchical) bootstrap: planted models, reductions, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from metrics.intervals import (
    bootstrap_pearson,
    bootstrap_spearman,
    clustered_bootstrap_mean,
    group_units,
    hierarchical_bootstrap,
    hierarchical_correlation,
    hierarchical_margin,
    hierarchical_mean,
    rowwise_correlation,
)

PROPS = settings(derandomize=True, deadline=None, max_examples=30)


def planted(rng, n_concepts: int, n_units: int, sd_between: float, sd_within: float = 1.0):
    """Rows y = mu + u_c + e: a concept-level random effect shared by the concept's rows."""
    u = rng.normal(0.0, sd_between, size=n_concepts)
    values = np.repeat(u, n_units) + rng.normal(0.0, sd_within, size=n_concepts * n_units)
    concepts = np.repeat(np.arange(n_concepts), n_units)
    return values, concepts


def width(interval) -> float:
    assert interval.evaluable, interval.reason
    return interval.high - interval.low


@PROPS
@given(
    st.integers(8, 30),
    st.integers(3, 12),
    st.floats(1.0, 3.0),
    st.integers(0, 2**16),
)
def test_wider_than_the_row_bootstrap_when_rows_share_a_concept_effect(n_c, n_u, sd_b, seed):
    values, concepts = planted(np.random.default_rng(seed), n_c, n_u, sd_b)
    hier = hierarchical_mean(group_units(values, concepts), n_boot=1000, seed=seed)
    rows = clustered_bootstrap_mean(values, np.arange(len(values)), n_boot=1000, seed=seed)
    assert hier.estimate == pytest.approx(rows.estimate)  # equal sizes: same point estimate
    assert width(hier) > width(rows)
    assert hier.n == len(values) and hier.n_clusters == n_c


def test_about_sqrt_n_units_wider_when_the_concept_effect_dominates():
    """20 concepts of 10 rows, sd between = sd within: the variance of the mean is
    (1 + 1/10)/20 against the row bootstrap's (1 + 1)/200, about 2.3 times as wide."""
    values, concepts = planted(np.random.default_rng(7), 20, 10, 1.0)
    hier = hierarchical_mean(group_units(values, concepts), n_boot=4000, seed=1)
    rows = clustered_bootstrap_mean(values, np.arange(len(values)), n_boot=4000, seed=1)
    assert width(hier) > 1.8 * width(rows)


def test_coverage_on_a_planted_model():
    """95% intervals of the mean cover the true mean (0) about 95% of the time; the row
    bootstrap, which ignores the shared concept effect, covers far less often."""
    rng = np.random.default_rng(11)
    hits, row_hits, trials = 0, 0, 200
    for k in range(trials):
        values, concepts = planted(rng, 15, 6, 1.0)
        ci = hierarchical_mean(group_units(values, concepts), n_boot=500, seed=k)
        hits += ci.low <= 0.0 <= ci.high
        row = clustered_bootstrap_mean(values, np.arange(len(values)), n_boot=500, seed=k)
        row_hits += row.low <= 0.0 <= row.high
    assert 0.88 <= hits / trials <= 0.995
    assert row_hits / trials < 0.8


def test_correlation_coverage_and_the_attenuation_of_two_stage_resampling():
    """Per-concept means of two noisy measures whose true values correlate 0.9, 6 units
    each, reliability 0.6: the observed r estimates 0.9 x 0.6 = 0.54. Concept-level
    intervals cover it; redrawing units as well adds the noise twice and pulls the
    interval toward zero (the reason correlations default to ``within=False``)."""
    rng = np.random.default_rng(2)
    n_c, n_u, rho, sd_w = 50, 6, 0.9, 2.0
    target = rho / (1 + sd_w**2 / n_u)
    hits, shift, trials = 0, [], 100
    for k in range(trials):
        truth = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n_c)
        x = {c: truth[c, 0] + sd_w * rng.normal(size=n_u) for c in range(n_c)}
        y = {c: truth[c, 1] + sd_w * rng.normal(size=n_u) for c in range(n_c)}
        ci = hierarchical_correlation(x, y, n_boot=400, seed=k)
        hits += ci.low <= target <= ci.high
        two = hierarchical_correlation(x, y, n_boot=400, seed=k, within=True)
        shift.append((two.low + two.high) / 2 - two.estimate)
    assert hits / trials >= 0.88
    assert np.mean(shift) < -0.08


@PROPS
@given(st.integers(0, 2**20), st.booleans())
def test_seeded_reproducibility(seed, within):
    values, concepts = planted(np.random.default_rng(seed), 10, 5, 1.0)
    units = group_units(values, concepts)
    first = hierarchical_mean(units, n_boot=300, seed=seed, within=within)
    again = hierarchical_mean(units, n_boot=300, seed=seed, within=within)
    other = hierarchical_mean(units, n_boot=300, seed=seed + 1, within=within)
    assert first.to_dict() == again.to_dict()
    assert (first.low, first.high) != (other.low, other.high)


@PROPS
@given(st.integers(0, 2**16), st.integers(2, 12))
def test_concepts_only_pooled_mean_is_the_clustered_bootstrap(seed, n_c):
    """With units weighted as rows and no within-concept redraw, the helper is exactly the
    existing cluster bootstrap (same draws, same sums)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 6, size=n_c)
    concepts = np.repeat(np.arange(n_c), sizes)
    values = rng.normal(size=len(concepts))
    ours = hierarchical_mean(
        group_units(values, concepts), weights="units", within=False, n_boot=300, seed=seed
    )
    theirs = clustered_bootstrap_mean(values, concepts, n_boot=300, seed=seed)
    assert ours.estimate == pytest.approx(theirs.estimate, abs=1e-12)
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), abs=1e-12)


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_concepts_only_correlation_of_means_is_the_pair_bootstrap(method):
    """One aggregate per concept and no within redraw: the pair bootstrap over concepts
    (same draw stream), up to the rounding of a different r formula."""
    rng = np.random.default_rng(5)
    x = {c: rng.normal(size=4) + c / 3 for c in range(12)}
    y = {c: rng.normal(size=7) + c / 5 for c in range(12)}
    pairs = [(float(x[c].mean()), float(y[c].mean())) for c in range(12)]
    ours = hierarchical_correlation(x, y, method=method, n_boot=500, seed=3)
    bootstrap = bootstrap_pearson if method == "pearson" else bootstrap_spearman
    theirs = bootstrap(pairs, n_boot=500, seed=3)
    assert ours.estimate == pytest.approx(theirs.estimate, abs=1e-12)
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), abs=1e-9)


def test_correlation_recomputes_a_non_mean_aggregate():
    """The aggregate may be any function of a concept's units (here the median)."""
    rng = np.random.default_rng(0)
    x = {c: rng.normal(size=9) + c for c in range(8)}
    y = {c: rng.normal(size=9) - c for c in range(8)}

    def median(u):
        return np.median(u, axis=1)

    ci = hierarchical_correlation(
        x, y, x_aggregate=median, y_aggregate=median, n_boot=300, within=True
    )
    expected = stats.pearsonr([np.median(x[c]) for c in x], [np.median(y[c]) for c in y])[0]
    assert ci.estimate == pytest.approx(expected)
    assert ci.evaluable and ci.high < 0


def test_paired_margin_is_the_mean_of_differences_and_narrower_than_unpaired():
    """A concept arm and its null on the same units share the unit's noise; pairing
    cancels it."""
    rng = np.random.default_rng(4)
    shared = {c: rng.normal(0, 2, size=8) for c in range(12)}
    arm = {c: shared[c] + 0.5 + rng.normal(0, 0.1, size=8) for c in range(12)}
    null = {c: shared[c] + rng.normal(0, 0.1, size=8) for c in range(12)}
    paired = hierarchical_margin(arm, null, paired=True, n_boot=1000)
    unpaired = hierarchical_margin(arm, null, paired=False, n_boot=1000)
    diffs = np.mean([np.mean(arm[c] - null[c]) for c in arm])
    assert paired.estimate == pytest.approx(diffs)
    assert unpaired.estimate == pytest.approx(diffs)
    assert paired.low > 0.3 and width(paired) < width(unpaired) / 5


def test_not_evaluable_cases_say_why():
    assert hierarchical_mean({}).reason == "no concepts"
    one = hierarchical_mean({"a": np.array([1.0, 2.0])})
    assert one.estimate == pytest.approx(1.5) and not one.evaluable and one.reason == "one concept"
    flat = hierarchical_correlation(
        {c: np.ones(3) for c in range(5)}, {c: np.arange(3.0) + c for c in range(5)}
    )
    assert not flat.evaluable and "undefined" in flat.reason
    with pytest.raises(ValueError, match="same concepts"):
        hierarchical_margin({"a": [1.0]}, {"b": [1.0]})
    with pytest.raises(ValueError, match="measures"):
        hierarchical_bootstrap({"a": {"x": [1.0]}, "b": {"y": [1.0]}}, lambda a: a["x"][:, 0])


def test_group_units_drops_non_finite_rows_and_keeps_pairs():
    units = group_units([[1.0, 2.0], [np.nan, 1.0], [3.0, 4.0], [5.0, 6.0]], ["a", "a", "b", "a"])
    assert list(units) == ["a", "b"]
    assert units["a"].tolist() == [[1.0, 2.0], [5.0, 6.0]]


def test_rowwise_correlation_matches_scipy_and_flags_constant_rows():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(4, 9)), rng.normal(size=(4, 9))
    x[2] = 1.0
    r = rowwise_correlation(x, y)
    rho = rowwise_correlation(x, y, "spearman")
    for i in (0, 1, 3):
        assert r[i] == pytest.approx(stats.pearsonr(x[i], y[i])[0])
        assert rho[i] == pytest.approx(stats.spearmanr(x[i], y[i])[0])
    assert np.isnan(r[2]) and np.isnan(rho[2])
