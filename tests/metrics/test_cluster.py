"""Clustered OLS inference (metrics/cluster.py) held to statsmodels and to its own
closed form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.cluster import (
    WEBB,
    cluster_covariance,
    identified,
    wald_f,
    wild_cluster_t,
)


def _data(seed: int, g: int = 12, per: int = 6, k: int = 3, slope: float = 0.0):
    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(g), per)
    x = rng.standard_normal((g * per, k)) + rng.standard_normal((g, k))[clusters]
    y = slope * x[:, 0] + x[:, 1:].sum(axis=1) + rng.standard_normal(g * per)
    y += rng.standard_normal(g)[clusters]  # a shared shock per cluster
    return x, y, clusters


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), g=st.integers(4, 20), k=st.integers(1, 4))
def test_cr1_covariance_equals_statsmodels(seed: int, g: int, k: int) -> None:
    import statsmodels.api as sm

    x, y, clusters = _data(seed, g=g, k=k)
    beta, cov = cluster_covariance(x, y, clusters)
    fit = sm.OLS(y, x).fit(cov_type="cluster", cov_kwds={"groups": clusters})
    np.testing.assert_allclose(beta, fit.params, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cov, fit.cov_params(), rtol=1e-7, atol=1e-14)


def _refit_t(x, y, clusters, j, w):
    """One wild replicate the slow way: build y*, refit, CR1 t of coefficient j."""
    beta, _ = cluster_covariance(x, y, clusters)
    resid = y - x @ beta
    _, index = np.unique(clusters, return_inverse=True)
    star = x @ beta + resid * w[index]
    beta_s, cov_s = cluster_covariance(x, star, clusters)
    return (beta_s[j] - beta[j]) / np.sqrt(cov_s[j, j])


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), j=st.integers(0, 2))
def test_closed_form_replicates_equal_refitting(seed: int, j: int) -> None:
    """The vectorised bootstrap's t* equal refitting each replicate from scratch."""
    x, y, clusters = _data(seed)
    g = len(np.unique(clusters))
    fit = wild_cluster_t(x, y, clusters, j, n_boot=64, seed=seed)
    w = np.random.default_rng(seed).choice(WEBB, size=(64, g))
    slow = np.array([_refit_t(x, y, clusters, j, row) for row in w])
    t_hat = fit.estimate / fit.se
    assert fit.p_value == pytest.approx(float((np.abs(slow) >= abs(t_hat)).mean()))
    lo, hi = np.quantile(slow, [0.025, 0.975])
    assert fit.low == pytest.approx(fit.estimate - hi * fit.se, rel=1e-9)
    assert fit.high == pytest.approx(fit.estimate - lo * fit.se, rel=1e-9)


def test_the_interval_covers_the_truth_about_95_percent() -> None:
    hits = 0
    for seed in range(200):
        x, y, clusters = _data(seed, g=15, slope=0.5)
        fit = wild_cluster_t(x, y, clusters, 0, n_boot=199, seed=seed)
        hits += fit.low <= 0.5 <= fit.high
    assert 0.9 <= hits / 200 <= 0.99


def test_a_column_in_the_span_of_the_others_is_not_identified() -> None:
    x, y, clusters = _data(0)
    dup = np.column_stack([x[:, 0] + x[:, 1], x])
    assert not identified(dup, 0)
    assert identified(x, 0)
    fit = wild_cluster_t(dup, y, clusters, 0)
    assert fit.estimate is None and "span" in fit.reason
    # the other coefficients of a rank-deficient design are still reported
    assert wild_cluster_t(np.column_stack([x, x[:, :1] * 0]), y, clusters, 1).evaluable


def test_wald_f_uses_the_small_sample_reference() -> None:
    x, y, clusters = _data(3, g=10, slope=1.0)
    beta, cov = cluster_covariance(x, y, clusters)
    out = wald_f(beta, cov, np.array([[1.0, 0.0, 0.0]]), 10)
    assert out["df"] == 1 and out["df_denominator"] == 9
    assert out["p_value"] > out["p_value_chi2"]  # F(1, 9) has fatter tails than χ²(1)
    assert out["F"] == pytest.approx(beta[0] ** 2 / cov[0, 0])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), g=st.integers(5, 15), slope=st.floats(-2, 2))
def test_the_restricted_interval_is_the_set_its_test_does_not_reject(seed, g, slope):
    """WCR by test inversion: the estimate inside, each bound where the test's p crosses
    the level, and 0 inside exactly when the test of 0 does not reject."""
    from metrics.cluster import wild_cluster_restricted

    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(g), 6)
    x = rng.standard_normal(len(clusters)) + rng.standard_normal(g)[clusters]
    y = slope * x + rng.standard_normal(len(clusters)) + rng.standard_normal(g)[clusters]
    x, y = x - x.mean(), y - y.mean()
    fit = wild_cluster_restricted(x[:, None], y, clusters, n_boot=199, seed=seed)
    assert fit.low is not None and fit.high is not None and fit.p_value is not None
    assert fit.low <= fit.estimate <= fit.high
    assert (fit.low <= 0 <= fit.high) == (fit.p_value >= 0.05) or min(
        abs(fit.low), abs(fit.high)
    ) < 1e-3 * (fit.se or 1)


def test_the_restricted_interval_keeps_its_level_with_few_clusters():
    """Seeded null simulations with 8 clusters and cluster-correlated slopes: the WCR
    interval covers the truth in at least 90% of 150 draws."""
    from metrics.cluster import wild_cluster_restricted

    covered = 0
    for i in range(150):
        rng = np.random.default_rng(i)
        clusters = np.repeat(np.arange(8), 8)
        x = rng.standard_normal(len(clusters))
        y = (0.5 + 0.5 * rng.standard_normal(8)[clusters]) * x + rng.standard_normal(len(x))
        x, y = x - x.mean(), y - y.mean()
        fit = wild_cluster_restricted(x[:, None], y, clusters, n_boot=199, seed=i)
        covered += fit.low is not None and fit.high is not None and fit.low <= 0.5 <= fit.high
    assert covered / 150 >= 0.90
