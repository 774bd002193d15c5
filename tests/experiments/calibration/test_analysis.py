"""Phase 6 analysis on constructed curves: slopes, levels, minimum effective level."""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.calibration.analysis import analyse_curve, levels, minimum_effective, mixed_slope
from experiments.config import load_config
from experiments.record.calibration import MinimumEffective

CONFIG = load_config(
    None, ["criteria.n_boot=300", "calibration.predictors=['auroc']"], phase="calibration"
)


def curve(slope: float, noise: float = 0.01, seed: int = 0) -> pd.DataFrame:
    """10 concepts × 4 sizes; effect = concept offset + slope·auroc + noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(10):
        offset = rng.normal(0, 0.05)
        for n_train, size in ((3, "1x1x1"), (6, "2x2x2"), (15, "5x5x5"), (30, "10x10x10")):
            auroc = 0.5 + 0.012 * n_train + rng.normal(0, 0.02)
            rows.append(
                {
                    "tag": f"{size}-classifier",
                    "layer": 9,
                    "source": "classifier",
                    "size": size,
                    "n_train": n_train,
                    "seed": 0,
                    "concept": f"c{c}",
                    "auroc": auroc,
                    "effect_above_null": offset + slope * (auroc - 0.5) + rng.normal(0, noise),
                }
            )
    return pd.DataFrame(rows)


def test_the_mixed_model_recovers_a_planted_slope():
    fit = mixed_slope(curve(slope=0.8), "auroc")
    assert fit.evaluable and fit.low is not None and fit.high is not None
    assert fit.low < 0.8 < fit.high and fit.n_clusters == 10
    flat = mixed_slope(curve(slope=0.0), "auroc")
    assert flat.low is not None and flat.high is not None and flat.low < 0 < flat.high


def test_too_few_rows_is_not_evaluable_rather_than_a_number():
    fit = mixed_slope(curve(slope=0.8).head(4), "auroc")
    assert not fit.evaluable and fit.estimate is None and "too few" in fit.reason


def test_minimum_effective_level_is_the_lowest_effective_size():
    rows = levels(curve(slope=0.8, noise=0.0), "auroc", CONFIG)
    assert [r.size for r in rows] == ["1x1x1", "2x2x2", "5x5x5", "10x10x10"]
    answer = minimum_effective(rows)
    effective = [r.level.estimate for r in rows if r.verdict == "pass"]
    assert answer.status == "reached" and answer.level is not None
    level = answer.level
    assert level.estimate == min(e for e in effective if e is not None)
    assert level.low is not None and level.high is not None
    assert level.low <= level.estimate <= level.high


def test_no_effective_level_is_reported_as_not_reached():
    flat = curve(slope=0.0)
    flat["effect_above_null"] = flat["effect_above_null"] - 0.3
    result = analyse_curve(flat, CONFIG)[0]
    assert result.minimum_effective == MinimumEffective(status="not_reached", levels_tested=4)
    assert result.predictor == "auroc" and result.source == "classifier"


def test_predictors_missing_from_the_curve_are_skipped():
    config = load_config(
        None, ["calibration.predictors=['auroc', 'ap']", "criteria.n_boot=200"], phase="calibration"
    )
    result = analyse_curve(curve(0.5), config)
    assert [r.predictor for r in result] == ["auroc"]


def test_each_sign_is_analysed_beside_both_and_an_effective_sign_is_not_averaged_away():
    """Steering toward the concept works (pos), away from it does nothing (neg): the
    both-signs mean stays below the threshold, the pos analysis reaches it."""
    signed = curve(slope=0.0, noise=0.0)
    signed["effect_above_null_pos"] = 0.12 + signed["effect_above_null"]
    signed["effect_above_null_neg"] = 0.0 * signed["effect_above_null"]
    signed["effect_above_null"] = (signed["effect_above_null_pos"] + 0.0) / 2 - 0.04
    by_sign = {r.sign: r.minimum_effective for r in analyse_curve(signed, CONFIG)}
    assert list(by_sign) == ["both", "pos", "neg"]
    assert by_sign["both"].status == "not_reached"
    assert by_sign["neg"].status == "not_reached"
    assert by_sign["pos"].status == "reached" and by_sign["pos"].size == "1x1x1"
