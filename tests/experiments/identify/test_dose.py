"""The minimum effective AUROC: reached inside the range, or censored at either edge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.identify.dose import (
    BELOW,
    NOT_REACHED,
    REACHED,
    crossing,
    minimum_effective,
    threshold_curve,
)


def cells(slope: float = 1.0, low: float = 0.5, high: float = 0.9, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(12):
        for auroc in np.linspace(low, high, 9):
            rows.append(
                {
                    "concept": f"c{c}",
                    "auroc": auroc,
                    "effect_above_null": slope * (auroc - 0.5) + rng.normal(0, 0.01),
                }
            )
    return pd.DataFrame(rows)


def test_a_crossing_inside_the_range_is_interpolated():
    x = np.linspace(0.5, 0.9, 5)
    status, level = crossing(x, x - 0.5, 0.25)
    assert status == REACHED and level == pytest.approx(0.75)


def test_levels_at_the_edges_are_censored_not_numbers_of_the_design():
    x = np.linspace(0.5, 0.9, 5)
    assert crossing(x, x - 0.5, -1.0) == (BELOW, 0.5)  # already there at the lowest AUROC
    assert crossing(x, x - 0.5, 5.0) == (NOT_REACHED, None)
    assert crossing(x, 0.5 - x, 0.1)[0] in (BELOW, NOT_REACHED)  # a falling relation: no level


def test_the_minimum_effective_level_has_a_concept_bootstrap_interval():
    frame = cells()
    baseline = {f"c{c}": 0.2 for c in range(12)}
    out = minimum_effective(frame, baseline, 1.0, n_boot=200, seed=0)
    assert out["status"] == REACHED and out["level"] == pytest.approx(0.7, abs=0.02)
    assert out["low"] <= out["level"] <= out["high"]
    assert out["replicates"][REACHED] > 0.9
    half = minimum_effective(frame, baseline, 0.5, n_boot=100, seed=0)
    assert half["level"] < out["level"]


def test_a_baseline_that_does_not_help_gives_no_target():
    out = minimum_effective(cells(), {f"c{c}": -0.1 for c in range(12)}, 0.5, n_boot=50)
    assert out["status"] == "not_evaluable" and "baseline" in out["note"]


def test_the_threshold_curve_rises_with_the_target():
    curve = threshold_curve(cells(), {f"c{c}": 0.3 for c in range(12)})
    levels = [r["level"] for r in curve if r["status"] == REACHED]
    assert levels == sorted(levels) and len(levels) >= 5
    assert curve[-1]["status"] == NOT_REACHED  # 1.5 × 0.3 = 0.45 > the largest effect, 0.4
