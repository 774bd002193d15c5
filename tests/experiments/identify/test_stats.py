"""Within-concept statistics on planted data: slopes that a between-concept confound
cannot fake, partial slopes, reliabilities, disattenuation, equal-slope tests, MixedLM."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.identify.estimation import stats


def planted(
    slope: float,
    *,
    concepts: int = 20,
    levels: int = 7,
    noise: float = 0.01,
    between: float = -2.0,
    seed: int = 0,
) -> pd.DataFrame:
    """effect = offset_c + slope·auroc + noise, where concepts with higher mean AUROC have
    *lower* offsets (``between``): a pooled regression would get the sign wrong."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(concepts):
        level = rng.uniform(0.6, 0.9)
        offset = between * level + rng.normal(0, 0.05)
        for j in range(levels):
            auroc = level + 0.02 * j + rng.normal(0, 0.01)
            rows.append(
                {
                    "concept": f"c{c}",
                    "auroc": auroc,
                    "cos_ref": 1 - 0.1 * j + rng.normal(0, 0.02),
                    "effect": offset + slope * auroc + rng.normal(0, noise),
                }
            )
    return pd.DataFrame(rows)


@settings(max_examples=15, deadline=None)
@given(slope=st.floats(-2, 2), seed=st.integers(0, 1000))
def test_the_within_slope_recovers_the_planted_slope_despite_the_between_confound(slope, seed):
    frame = planted(slope, seed=seed)
    fit = stats.fe_coefficients(frame, "effect", ["auroc"], n_boot=300, seed=seed)["auroc"]
    # The slope's standard error here is about 0.02; the confound would bias a pooled
    # slope by about -2. Eight standard errors: a property that holds on every example
    # (a 95% interval misses 1 in 20 by design, so coverage is tested on its own below).
    assert abs(fit.estimate - slope) < 0.15
    assert fit.low <= fit.estimate <= fit.high
    assert fit.n_clusters == 20


def test_the_within_slope_interval_covers_the_planted_slope_at_about_its_level():
    rng = np.random.default_rng(10_000)
    slopes = rng.uniform(-2, 2, size=200)
    covered = 0
    for seed, slope in enumerate(slopes):
        fit = stats.fe_coefficients(
            planted(slope, seed=seed), "effect", ["auroc"], n_boot=300, seed=seed
        )
        covered += fit["auroc"].low <= slope <= fit["auroc"].high
    # Binomial(200, 0.95) has sd 3.1: 176 is 4.5 sd below 190, a 95% interval that
    # covered 88% or less would be too narrow.
    assert covered >= 176


def test_a_pooled_correlation_gets_the_confound_a_within_one_does_not():
    frame = planted(1.0)
    pooled = stats.pooled_correlation(frame, "auroc", "effect", n_boot=300, seed=0)
    within = stats.within_correlation(frame, "auroc", "effect", n_boot=300, seed=0)
    assert pooled.estimate < 0 < within.low


def test_the_partial_slope_separates_two_collinear_predictors():
    rng = np.random.default_rng(0)
    rows = []
    for c in range(25):
        for _ in range(8):
            cos = rng.uniform(0, 1)
            auroc = 0.5 + 0.4 * cos + rng.normal(0, 0.05)  # correlated with cos
            rows.append(
                {
                    "concept": f"c{c}",
                    "cos_ref": cos,
                    "auroc": auroc,
                    "effect": 2.0 * cos + rng.normal(0, 0.01),
                }
            )
    frame = pd.DataFrame(rows)
    alone = stats.fe_coefficients(frame, "effect", ["auroc"], n_boot=300, seed=0)["auroc"]
    partial = stats.fe_coefficients(frame, "effect", ["auroc", "cos_ref"], n_boot=300, seed=0)
    assert alone.low > 0  # AUROC looks like a predictor on its own...
    assert partial["auroc"].low < 0 < partial["auroc"].high  # ...but adds nothing beside cos
    assert partial["cos_ref"].estimate == pytest.approx(2.0, abs=0.05)


def planted_halves(signal_sd: float, noise_sd: float, units: int, seed: int = 0):
    """Per concept [cells, splits, 2] halves of a unit mean: signal varies over cells."""
    rng = np.random.default_rng(seed)
    out = {}
    for c in range(40):
        truth = rng.normal(0, signal_sd, size=6)
        values = truth[:, None] + rng.normal(0, noise_sd, size=(6, units))
        orders = np.stack([rng.permutation(units) for _ in range(30)])
        a = values[:, orders[:, 0::2]].mean(-1)
        b = values[:, orders[:, 1::2]].mean(-1)
        out[f"c{c}"] = np.stack([a, b], axis=-1)
    return out


@pytest.mark.parametrize(("signal", "noise"), [(1.0, 1.0), (1.0, 3.0), (0.5, 0.5)])
def test_within_reliability_matches_the_planted_signal_to_noise(signal, noise):
    units = 10
    expected = signal**2 / (signal**2 + noise**2 / units)
    fits = [
        stats.within_reliability(planted_halves(signal, noise, units, seed), n_boot=100, seed=0)
        for seed in range(8)
    ]
    assert np.mean([f.estimate for f in fits]) == pytest.approx(expected, abs=0.04)
    assert all(f.low <= f.estimate <= f.high for f in fits)


def test_disattenuation_divides_by_the_reliabilities():
    frame = planted(1.0, noise=0.02)
    frame["direction"] = [f"d{i % 7}" for i in range(len(frame))]
    halves = {}
    for c, g in frame.groupby("concept"):
        e = g["effect"].to_numpy()
        rng = np.random.default_rng(int(c[1:]))
        halves[c] = np.stack(
            [
                e[:, None] + rng.normal(0, 0.02, (len(e), 20)),
                e[:, None] + rng.normal(0, 0.02, (len(e), 20)),
            ],
            axis=-1,
        )
    out = stats.disattenuated_within(frame, "auroc", "effect", None, halves, n_boot=200, seed=0)
    obs, rel = out.observed.estimate, out.reliability_y.estimate
    assert out.reliability_x.estimate == 1.0
    assert out.corrected.estimate == pytest.approx(obs / np.sqrt(rel))


def test_the_wald_test_tells_equal_slopes_from_different_ones():
    rng = np.random.default_rng(0)
    same = rng.normal([1.0, 1.0, 1.0], 0.1, size=(500, 3))
    assert stats.wald_equal(np.array([1.0, 1.02, 0.98]), same).p_value > 0.5
    assert stats.wald_equal(np.array([1.0, 2.0, 0.98]), same).p_value < 1e-6


def test_the_draws_are_the_hierarchical_bootstraps_own():
    frame = planted(0.7)
    products = stats.cross_products(frame, ["auroc", "effect"])
    draws = stats.concept_draws(len(products), 300, 5)
    reps = stats.replicate_coefficients(products, 1, draws)[:, 0]
    fit = stats.fe_coefficients(frame, "effect", ["auroc"], n_boot=300, seed=5)["auroc"]
    assert np.quantile(reps, 0.025) == pytest.approx(fit.low)
    assert np.quantile(reps, 0.975) == pytest.approx(fit.high)


def test_the_mixed_model_with_random_slopes_recovers_the_slope():
    frame = planted(0.8, noise=0.02)
    fit = stats.mixed_model(frame, "effect ~ auroc", "~auroc", ["auroc"])
    assert fit.evaluable
    term = fit.terms["auroc"]
    assert term["low"] < 0.8 < term["high"] or abs(term["estimate"] - 0.8) < 0.1


def test_too_little_data_is_said_not_computed():
    frame = planted(1.0).head(3)
    assert not stats.mixed_model(frame, "effect ~ auroc", None, ["auroc"]).evaluable
    assert not stats.fe_coefficients(frame, "effect", ["auroc"], n_boot=50, seed=0)[
        "auroc"
    ].evaluable
