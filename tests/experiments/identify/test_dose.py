"""The minimum effective AUROC: reached inside the range, or censored at either edge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.identify.estimation.dose import (
    BELOW,
    NOT_REACHED,
    REACHED,
    Censored,
    censored_interval,
    crossing,
    minimum_effective,
    threshold_curve,
)
from metrics.intervals import Interval


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
    assert out.status == REACHED and out.level is not None and out.replicates is not None
    level, low, high = out.level.estimate, out.level.low, out.level.high
    assert level == pytest.approx(0.7, abs=0.02) and out.level.n_clusters == 12
    assert low is not None and high is not None and low <= level <= high
    assert out.replicates[REACHED] > 0.9
    half = minimum_effective(frame, baseline, 0.5, n_boot=100, seed=0).level
    assert half is not None and half.estimate is not None and half.estimate < level


def test_a_baseline_that_does_not_help_gives_no_target():
    out = minimum_effective(cells(), {f"c{c}": -0.1 for c in range(12)}, 0.5, n_boot=50)
    assert out.status == "not_evaluable" and "baseline" in (out.note or "")


def test_too_few_concepts_is_a_record_block_that_says_why():
    """Every key the estimator writes is declared: the block validates, and the summary
    reads the reason from its field (not from undeclared extras, which would read None)."""
    from experiments.identify.summary import level_text
    from experiments.record.identify import MinimumLevel

    one = cells()[lambda d: d["concept"] == "c0"]
    block = MinimumLevel.model_validate(
        minimum_effective(one, {"c0": 0.2}, 0.5, n_boot=20).model_dump()
    )
    assert block.status == "not_evaluable" and block.fraction == 0.5
    assert level_text(block) == "n/a (1 concepts)"
    flat = minimum_effective(cells(), {f"c{c}": -0.1 for c in range(12)}, 0.5, n_boot=20)
    assert "baseline" in level_text(flat)


def test_the_threshold_curve_rises_with_the_target():
    curve = threshold_curve(cells(), {f"c{c}": 0.3 for c in range(12)})
    levels = [r.level for r in curve if r.status == REACHED]
    assert levels == sorted(levels) and len(levels) >= 5
    assert curve[-1].status == NOT_REACHED  # 1.5 × 0.3 = 0.45 > the largest effect, 0.4


def test_a_concept_tested_only_at_high_auroc_does_not_bias_the_level():
    """One concept steers better at every AUROC (+1) but is tested only at AUROC ≥ 0.8.
    The average concept's curve is then (AUROC − 0.5) + 1/12, so the level for 0.2 is
    0.7 − 1/12. A fit without a concept term reads c0's offset as an AUROC effect."""
    frame = cells()
    easy = frame["concept"] == "c0"
    shifted = frame.copy()
    shifted.loc[easy, "effect_above_null"] += 1.0
    shifted = shifted[~easy | (shifted["auroc"] >= 0.8)]
    baseline = {f"c{c}": 0.2 for c in range(12)}
    out = minimum_effective(shifted, baseline, 1.0, n_boot=100, seed=0)
    truth = 0.7 - 1 / 12
    assert out.level is not None and out.level.estimate == pytest.approx(truth, abs=0.01)
    x, y = shifted["auroc"].to_numpy(), shifted["effect_above_null"].to_numpy()
    _, pooled = crossing(x, y, 0.2)  # no concept term
    assert abs(pooled - truth) > 0.03


def test_the_interval_counts_censored_replicates_and_says_where_it_is_open():
    frame = cells()
    baseline = {f"c{c}": 0.2 for c in range(12)}
    # a target near the top of the tested range: some replicates never reach it
    out = minimum_effective(frame, baseline, 1.95, n_boot=300, seed=0)
    assert out.status == REACHED and out.level is not None and out.tested is not None
    if (out.replicates or {})[NOT_REACHED] > 0.025:
        assert out.high_open and out.level.high == pytest.approx(out.tested[1])
    higher = cells(low=0.6)  # the effect is 0.1 at the lowest AUROC tested
    assert minimum_effective(higher, baseline, 0.25, n_boot=50, seed=0).status == BELOW
    # replicates censored below count as -inf, not reached as +inf: the ends go open
    tested = [0.6, 0.9]
    levels = np.r_[np.full(10, -np.inf), np.linspace(0.65, 0.85, 80), np.full(10, np.inf)]
    both = censored_interval(levels, 0.95, tested)
    assert both == Censored(Interval(None, 0.6, 0.9), low_open=True, high_open=True)
    inner = censored_interval(np.linspace(0.65, 0.85, 100), 0.95, tested)
    low, high = inner.interval.low, inner.interval.high
    assert not inner.low_open and low is not None and high is not None
    assert 0.65 <= low < high <= 0.85
    # reached in few replicates: a lower bound, open above
    mostly = censored_interval(np.r_[np.full(90, np.inf), [0.7] * 10], 0.95, tested)
    assert mostly.interval.low == 0.7 and mostly.high_open and mostly.interval.high == 0.9
    # reached in almost none: no interval, said so
    never = censored_interval(np.r_[np.full(99, np.inf), [0.7]], 0.95, tested)
    assert never.interval.low is None and never.interval.high is None
    from experiments.identify.summary import level_text

    text = level_text(out)
    assert ("> " in text) == out.high_open
