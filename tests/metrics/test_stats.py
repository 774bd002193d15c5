"""Correlations and agreement: agree with numpy/scipy, never NaN."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from metrics.stats import (
    Alpha,
    Correlation,
    NotEvaluable,
    clustered_pearson,
    fisher_z_interval,
    krippendorff_alpha_interval,
    pairwise_spearman,
    pearson,
    spearman,
)

PROPS = settings(derandomize=True, deadline=None, max_examples=60)

value = st.floats(-100, 100, allow_nan=False, allow_infinity=False)
grid = st.integers(-1000, 1000).map(lambda k: k / 10)  # distinct values stay distinct when mapped


@st.composite
def paired(draw, min_size: int = 4, max_size: int = 25, value=value):
    """Two well-conditioned samples of equal length (spread enough for stable r)."""
    n = draw(st.integers(min_size, max_size))
    x = np.array(draw(st.lists(value, min_size=n, max_size=n)))
    y = np.array(draw(st.lists(value, min_size=n, max_size=n)))
    assume(np.std(x) > 1e-2 and np.std(y) > 1e-2)
    return x, y


def _is_correlation(result) -> Correlation:
    assert isinstance(result, Correlation), result
    for number in (result.r, result.p_value, result.ci_low, result.ci_high):
        assert math.isfinite(number)
    return result


@PROPS
@given(paired())
def test_pearson_matches_numpy_and_is_bounded(data):
    x, y = data
    result = _is_correlation(pearson(x, y))
    assert result.r == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-9)
    assert -1.0 <= result.r <= 1.0
    assert result.ci_low - 1e-12 <= result.r <= result.ci_high + 1e-12
    assert result.n == len(x)


@PROPS
@given(paired(), st.floats(0.01, 100), st.floats(-50, 50), st.floats(0.01, 100), st.floats(-5, 5))
def test_pearson_invariant_under_positive_affine_maps(data, a, b, c, d):
    x, y = data
    base = _is_correlation(pearson(x, y))
    moved = _is_correlation(pearson(a * x + b, c * y + d))
    assert moved.r == pytest.approx(base.r, abs=1e-6)


@PROPS
@given(paired())
def test_pearson_flips_sign_under_negation(data):
    x, y = data
    assert _is_correlation(pearson(-x, y)).r == pytest.approx(-pearson(x, y).r, abs=1e-9)


@PROPS
@given(paired(value=grid))
def test_spearman_invariant_under_monotone_maps(data):
    x, y = data
    base = _is_correlation(spearman(x, y))
    moved = _is_correlation(spearman(x**3 + x, np.exp(y / 50)))
    assert moved.r == pytest.approx(base.r, abs=1e-9)
    assert base.ci_low - 1e-12 <= base.r <= base.ci_high + 1e-12


def test_spearman_ci_uses_fieller_variance():
    result = _is_correlation(spearman(np.arange(10), [1, 3, 2, 5, 4, 7, 6, 9, 8, 10]))
    half = 1.959963984540054 * math.sqrt(1.06 / 7)
    assert result.ci_low == pytest.approx(math.tanh(math.atanh(result.r) - half))
    assert result.ci_high == pytest.approx(math.tanh(math.atanh(result.r) + half))


def test_fisher_interval_edge_cases():
    assert fisher_z_interval(0.5, 3) == (-1.0, 1.0)
    assert fisher_z_interval(1.0, 10) == (1.0, 1.0)
    low, high = fisher_z_interval(0.0, 100)
    assert low == pytest.approx(-high)


@pytest.mark.parametrize("method", [pearson, spearman])
@pytest.mark.parametrize(
    ("x", "y", "why"),
    [
        ([1.0, 2.0], [2.0, 3.0], "at least 3"),
        ([], [], "at least 3"),
        ([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0], "x is constant"),
        ([1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0], "y is constant"),
        ([1.0, float("nan"), 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], "NaN"),
        ([1.0, 2.0, 3.0, float("inf")], [1.0, 2.0, 3.0, 4.0], "NaN"),
    ],
)
def test_undefined_correlations_are_not_evaluable(method, x, y, why):
    result = method(x, y)
    assert isinstance(result, NotEvaluable)
    assert why in result.reason
    assert result.to_dict()["evaluable"] is False


def test_mismatched_lengths_are_a_caller_error():
    with pytest.raises(ValueError):
        pearson([1, 2, 3], [1, 2])


def test_three_points_give_full_interval():
    result = _is_correlation(spearman([1, 2, 3], [1, 3, 2]))
    assert (result.ci_low, result.ci_high) == (-1.0, 1.0)


def test_krippendorff_matches_perfect_and_handles_missing():
    perfect = krippendorff_alpha_interval(np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]))
    assert isinstance(perfect, Alpha) and perfect.value == pytest.approx(1.0)
    missing = np.array([[1.0, 2.0, np.nan, 4.0], [1.0, 3.0, 3.0, np.nan], [2.0, 2.0, 3.0, 4.0]])
    result = krippendorff_alpha_interval(missing)
    assert isinstance(result, Alpha)
    assert result.n_raters == 3 and result.n_units == 4
    assert math.isfinite(result.value)


@pytest.mark.parametrize(
    ("ratings", "why"),
    [
        (np.array([[1.0, 2.0, 3.0]]), "2 raters"),
        (np.array([[1.0, np.nan], [np.nan, 2.0]]), "two or more raters"),
        (np.array([[2.0, 2.0], [2.0, 2.0]]), "no variation"),
    ],
)
def test_krippendorff_not_evaluable(ratings, why):
    result = krippendorff_alpha_interval(ratings)
    assert isinstance(result, NotEvaluable)
    assert why in result.reason


def test_pairwise_spearman_uses_complete_rows_per_pair():
    table = pd.DataFrame(
        {
            "human": [1.0, 2.0, 3.0, 4.0, 5.0],
            "judge_a": [2.0, 1.0, 4.0, 3.0, 5.0],
            "judge_b": [np.nan, np.nan, np.nan, 1.0, 2.0],
        }
    )
    results = pairwise_spearman(table)
    assert set(results) == {("human", "judge_a"), ("human", "judge_b"), ("judge_a", "judge_b")}
    assert isinstance(results[("human", "judge_a")], Correlation)
    assert results[("human", "judge_a")].r == pytest.approx(0.8)
    assert isinstance(results[("human", "judge_b")], NotEvaluable)


# --- clustered Pearson ------------------------------------------------------------------------


def test_clustered_pearson_is_wider_when_rows_are_copies_within_clusters():
    """Ten points each repeated five times: rows-as-independent Fisher z believes n = 50,
    the cluster bootstrap sees ten units, as the de-duplicated data would."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=10)
    y = 0.6 * x + rng.normal(size=10)
    xs, ys, groups = np.repeat(x, 5), np.repeat(y, 5), np.repeat(np.arange(10), 5)
    rows = pearson(xs, ys)
    clustered = clustered_pearson(xs, ys, list(groups))
    assert isinstance(rows, Correlation) and isinstance(clustered, Correlation)
    assert clustered.r == pytest.approx(rows.r)
    assert clustered.n_clusters == 10 and "cluster bootstrap" in clustered.method
    assert clustered.ci_high - clustered.ci_low > 1.8 * (rows.ci_high - rows.ci_low)


def test_clustered_pearson_with_singleton_clusters_is_close_to_fisher_z():
    rng = np.random.default_rng(1)
    x = rng.normal(size=400)
    y = 0.5 * x + rng.normal(size=400)
    rows = pearson(x, y)
    clustered = clustered_pearson(x, y, list(range(400)))
    assert isinstance(rows, Correlation) and isinstance(clustered, Correlation)
    assert clustered.ci_low == pytest.approx(rows.ci_low, abs=0.04)
    assert clustered.ci_high == pytest.approx(rows.ci_high, abs=0.04)


def test_clustered_pearson_falls_back_and_says_so_with_few_clusters():
    x, y = np.arange(12.0), np.arange(12.0) ** 1.5
    result = clustered_pearson(x, y, [i % 3 for i in range(12)])
    assert isinstance(result, Correlation)
    assert result.method.startswith("fisher_z (only 3 clusters")
    assert (result.ci_low, result.ci_high) == pytest.approx(
        (pearson(x, y).ci_low, pearson(x, y).ci_high)
    )
    assert isinstance(clustered_pearson([1, 1, 1, 1], [1, 2, 3, 4], [0, 1, 2, 3]), NotEvaluable)
    with pytest.raises(ValueError, match="differ in length"):
        clustered_pearson([1, 2, 3], [1, 2, 4], [0, 1])


@PROPS
@given(
    st.lists(st.tuples(grid, grid), min_size=6, max_size=30),
    st.integers(5, 8),
    st.integers(0, 1000),
)
def test_clustered_pearson_interval_is_a_valid_correlation_interval(points, k, seed):
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    assume(len(np.unique(x)) > 2 and len(np.unique(y)) > 2)
    clusters = [i % k for i in range(len(points))]
    result = clustered_pearson(x, y, clusters, n_boot=200, seed=seed)
    assert isinstance(result, Correlation)
    assert -1.0 <= result.ci_low <= result.ci_high <= 1.0
    assert math.isfinite(result.r)
    again = clustered_pearson(x, y, clusters, n_boot=200, seed=seed)
    assert again == result  # seeded


def test_a_clustered_interval_is_never_narrower_than_fisher_z():
    """Few clusters can make a percentile bootstrap too narrow: the interval covers both."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=50)
    y = 0.7 * x + rng.normal(size=50) * 0.7
    clusters = list(np.repeat(np.arange(10), 5))
    rows = pearson(x, y)
    clustered = clustered_pearson(x, y, clusters)
    assert isinstance(rows, Correlation) and isinstance(clustered, Correlation)
    assert clustered.ci_low <= rows.ci_low and clustered.ci_high >= rows.ci_high


@settings(max_examples=60, deadline=None)
@given(
    tp=st.integers(0, 30),
    fn=st.integers(0, 30),
    fp=st.integers(0, 30),
    tn=st.integers(0, 30),
)
def test_bootstrap_f1_brackets_the_estimate_and_stays_in_0_1(tp, fn, fp, tn):
    from metrics.stats import bootstrap_f1, f1_score

    assume(tp + fn > 0 and fp + tn > 0)
    result = bootstrap_f1(tp, fn, fp, tn, n_boot=400).ends()
    assert result is not None
    f1, low, high = result
    assert f1 == pytest.approx(f1_score(tp, fn, fp))
    assert 0.0 <= low <= high <= 1.0
    # A percentile interval of a bootstrap that resamples around the estimate holds it
    # unless the distribution is degenerate at a bound.
    assert low - 1e-12 <= f1 <= high + 1e-12 or low == high


def test_bootstrap_f1_narrows_with_more_texts_and_is_seeded():
    from metrics.stats import bootstrap_f1

    small, large = bootstrap_f1(6, 4, 2, 8).ends(), bootstrap_f1(60, 40, 20, 80).ends()
    assert small is not None and large is not None
    assert small[0] == pytest.approx(large[0])
    assert (large[2] - large[1]) < (small[2] - small[1])
    assert bootstrap_f1(60, 40, 20, 80).n == 200
    assert bootstrap_f1(6, 4, 2, 8, seed=3) == bootstrap_f1(6, 4, 2, 8, seed=3)


def test_bootstrap_f1_needs_both_classes():
    from metrics.stats import bootstrap_f1

    one_class = bootstrap_f1(0, 0, 3, 5)
    assert not one_class.evaluable and "positives and negatives" in one_class.reason
    with pytest.raises(ValueError):
        bootstrap_f1(-1, 2, 3, 4)
