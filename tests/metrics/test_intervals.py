"""Clustered bootstrap, binomial intervals and interval verdicts (property tests)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.intervals import (
    Interval,
    binomial_interval,
    bootstrap_pearson,
    bootstrap_spearman,
    bootstrap_statistic,
    clustered_bootstrap_mean,
    interval_verdict,
)

PROPS = settings(derandomize=True, deadline=None, max_examples=60)
values = st.lists(st.floats(min_value=-1, max_value=1, allow_nan=False), min_size=2, max_size=40)


@PROPS
@given(values, st.integers(min_value=1, max_value=6))
def test_interval_brackets_the_mean(xs, n_clusters):
    clusters = [i % n_clusters for i in range(len(xs))]
    ci = clustered_bootstrap_mean(xs, clusters, n_boot=300)
    assert ci.estimate == pytest.approx(float(np.mean(xs)))
    if n_clusters >= 2 and len(xs) >= 2:
        assert ci.low is not None and ci.high is not None
        assert ci.low <= ci.high
        assert min(xs) - 1e-12 <= ci.low and ci.high <= max(xs) + 1e-12


@PROPS
@given(st.floats(min_value=-5, max_value=5, allow_nan=False), st.integers(2, 10))
def test_constant_data_has_a_zero_width_interval(c, n):
    ci = clustered_bootstrap_mean([c] * (2 * n), [i % n for i in range(2 * n)], n_boot=200)
    assert ci.low == pytest.approx(c) and ci.high == pytest.approx(c)


def test_clustering_widens_the_interval_when_rows_within_a_cluster_agree():
    """Ten clusters of ten identical rows carry the information of ten rows, not 100."""
    rng = np.random.default_rng(0)
    cluster_means = rng.normal(size=10)
    xs = np.repeat(cluster_means, 10)
    clustered = clustered_bootstrap_mean(xs, np.repeat(np.arange(10), 10), n_boot=2000)
    naive = clustered_bootstrap_mean(xs, np.arange(100), n_boot=2000)
    assert (clustered.high - clustered.low) > 2 * (naive.high - naive.low)


def test_one_cluster_is_not_an_interval():
    ci = clustered_bootstrap_mean([0.1, 0.2, 0.3], ["a", "a", "a"])
    assert ci.estimate == pytest.approx(0.2) and ci.low is None and not ci.evaluable
    assert interval_verdict(ci, 0.0) == "not_evaluable"


@PROPS
@given(
    st.floats(-1, 1, allow_nan=False),
    st.floats(0, 1, allow_nan=False),
    st.floats(-2, 2, allow_nan=False),
)
def test_verdicts_follow_the_interval(low, width, threshold):
    interval = Interval(low + width / 2, low, low + width, 10, 10, "test")
    verdict = interval_verdict(interval, threshold)
    if low > threshold:
        assert verdict == "pass"
    elif low + width < threshold:
        assert verdict == "fail"
    else:
        assert verdict == "inconclusive"


@PROPS
@given(st.integers(0, 60), st.integers(1, 60))
def test_binomial_interval_contains_the_proportion(k, n):
    k = min(k, n)
    ci = binomial_interval(k, n)
    assert 0.0 <= ci.low <= k / n <= ci.high <= 1.0


def test_bootstrap_statistic_of_a_perfect_correlation():
    units = [(float(i), 2.0 * i + 1) for i in range(8)]

    def r(sample):
        xs, ys = zip(*sample, strict=True)
        if np.ptp(xs) == 0:
            return None
        return float(np.corrcoef(xs, ys)[0, 1])

    ci = bootstrap_statistic(units, r, n_boot=300)
    assert ci.estimate == pytest.approx(1.0)
    assert ci.low == pytest.approx(1.0) and interval_verdict(ci, 0.5) == "pass"


def _scipy_correlation(name: str):
    """The one-sample statistic the fast bootstraps must equal: scipy's ``name`` of a
    list of (x, y) units, None where it is undefined (as the pipeline defines it)."""
    from scipy import stats

    def statistic(sample):
        xs, ys = (np.array(v, dtype=float) for v in zip(*sample, strict=True))
        if len(sample) < 3 or np.ptp(xs) == 0 or np.ptp(ys) == 0:
            return None
        return float(getattr(stats, name)(xs, ys)[0])

    return statistic


_scipy_pearson = _scipy_correlation("pearsonr")
_scipy_spearman = _scipy_correlation("spearmanr")


@settings(derandomize=True, deadline=None, max_examples=40)
@given(
    st.lists(
        st.tuples(st.integers(-3, 3), st.integers(-3, 3)).map(lambda p: (p[0] / 2, p[1] / 3)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 2**16),
)
def test_bootstrap_pearson_is_bootstrap_statistic_bit_for_bit(pairs, seed):
    # Small integer grids make ties, constant resamples and undefined estimates common.
    slow = bootstrap_statistic(pairs, _scipy_pearson, n_boot=200, seed=seed, method="m")
    fast = bootstrap_pearson(pairs, n_boot=200, seed=seed, method="m")
    assert fast.to_dict() == slow.to_dict()


@settings(derandomize=True, deadline=None, max_examples=40)
@given(
    st.lists(
        st.tuples(st.integers(-3, 3), st.floats(-1e3, 1e3, allow_nan=False)).map(
            lambda p: (p[0] / 2, p[1])
        ),
        min_size=1,
        max_size=14,
    ),
    st.integers(0, 2**16),
)
def test_bootstrap_spearman_is_bootstrap_statistic_bit_for_bit(pairs, seed):
    # x on a small grid (tied ranks, constant resamples), y anywhere (rounding in the
    # correlation of the ranks).
    slow = bootstrap_statistic(pairs, _scipy_spearman, n_boot=200, seed=seed, method="m")
    fast = bootstrap_spearman(pairs, n_boot=200, seed=seed, method="m")
    assert fast.to_dict() == slow.to_dict()


def test_bootstrap_spearman_of_a_monotone_relation_is_one():
    pairs = [(float(i), float(i) ** 3) for i in range(8)]
    ci = bootstrap_spearman(pairs, n_boot=300, seed=1)
    assert ci.estimate == pytest.approx(1.0) and ci.low == pytest.approx(1.0)
    assert ci.high == pytest.approx(1.0)


def test_bootstrap_pearson_drops_constant_resamples():
    # Two distinct x values out of three units: some resamples have a constant x.
    pairs = [(0.0, 1.0), (0.0, 2.0), (1.0, 0.5)]
    ci = bootstrap_pearson(pairs, n_boot=400, seed=3)
    assert ci.estimate == pytest.approx(_scipy_pearson(pairs))
    assert ci.evaluable and -1.0 <= ci.low <= ci.high <= 1.0
