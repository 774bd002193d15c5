"""Phase 6 analysis: does better detection *by the same method* steer better?

Three views of the curve table (one row per probe set × concept):

- **mixed model** per direction source and predictor: effect ~ predictor + (1 | concept)
  (statsmodels MixedLM), so concepts that are simply easier to steer do not pass for a
  predictor effect; the slope comes with its 95% interval;
- **minimum effective level** per source and predictor: rows are grouped by training
  size (each size is one level of detection quality); a level is *effective* when its
  effect above null has a bootstrap interval over concepts above the threshold; the
  answer is the lowest predictor level among effective sizes, with a bootstrap interval
  over concepts, or "not reached";
- **trajectories**: per concept, the predictor and effect across sizes (the figures).

Each view is computed for the effect averaged over both signs (``both``, the headline)
and for each sign alone (``pos``, ``neg``): steering toward a concept and away from it
can behave very differently, and averaging can hide an effective sign.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import numpy as np
import pandas as pd

from experiments.config import CalibrationStudyConfig
from metrics.intervals import bootstrap_statistic, interval_verdict

EFFECT = "effect_above_null"
# The effect columns of the curve table: both signs averaged, then each sign.
EFFECTS = {"both": EFFECT, "pos": "effect_above_null_pos", "neg": "effect_above_null_neg"}


def mixed_slope(frame: pd.DataFrame, predictor: str, effect: str = EFFECT) -> dict[str, Any]:
    """Slope of the effect on the predictor with a random intercept per concept."""
    data = frame[[predictor, effect, "concept"]].dropna()
    if len(data) < 6 or data["concept"].nunique() < 2 or data[predictor].nunique() < 2:
        return {"evaluable": False, "reason": f"{len(data)} rows; too few to fit", "n": len(data)}
    import statsmodels.formula.api as smf

    data = data.rename(columns={predictor: "x", effect: "y"})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = smf.mixedlm("y ~ x", data, groups=data["concept"]).fit(reml=True)
        low, high = fit.conf_int().loc["x"]
        slope = float(fit.params["x"])
    except (ValueError, np.linalg.LinAlgError) as exc:
        return {"evaluable": False, "reason": f"fit failed: {exc}", "n": len(data)}
    if not np.isfinite([slope, low, high]).all():
        return {"evaluable": False, "reason": "fit did not converge", "n": len(data)}
    return {
        "evaluable": True,
        "slope": slope,
        "low": float(low),
        "high": float(high),
        "p_value": float(fit.pvalues["x"]),
        "n": len(data),
        "n_concepts": int(data["concept"].nunique()),
    }


def _concept_means(frame: pd.DataFrame, column: str) -> list[float]:
    return [float(v) for v in frame.groupby("concept")[column].mean().dropna()]


def levels(
    frame: pd.DataFrame, predictor: str, config: CalibrationStudyConfig, effect: str = EFFECT
) -> list[dict[str, Any]]:
    """Per training size: predictor level and effect above null, each with an interval
    from a bootstrap over concepts (seeds averaged within a concept first)."""
    out = []
    c = config.criteria
    for size, group in frame.groupby("n_train", sort=True):
        effect_units = _concept_means(group, effect)
        level_units = _concept_means(group, predictor)
        if not effect_units or not level_units:
            continue

        def mean(units: list[float]) -> float | None:
            return float(np.mean(units)) if units else None

        effect_ci = bootstrap_statistic(
            effect_units, mean, confidence=c.confidence, n_boot=c.n_boot, method="concepts"
        )
        level = bootstrap_statistic(
            level_units, mean, confidence=c.confidence, n_boot=c.n_boot, method="concepts"
        )
        out.append(
            {
                "size": str(group["size"].iloc[0]),
                "n_train": int(cast(int, size)),
                "level": level.estimate,
                "level_low": level.low,
                "level_high": level.high,
                "effect": effect_ci.estimate,
                "effect_low": effect_ci.low,
                "effect_high": effect_ci.high,
                "verdict": interval_verdict(effect_ci, config.calibration.effect_threshold),
            }
        )
    return out


def minimum_effective(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The lowest predictor level whose size is effective, or not reached."""
    effective = [r for r in rows if r["verdict"] == "pass" and r["level"] is not None]
    if not effective:
        return {"status": "not_reached", "levels_tested": len(rows)}
    best = min(effective, key=lambda r: r["level"])
    return {
        "status": "reached",
        "level": best["level"],
        "low": best["level_low"],
        "high": best["level_high"],
        "size": best["size"],
    }


def analyse_curve(curve: pd.DataFrame, config: CalibrationStudyConfig) -> dict[str, Any]:
    """Mixed-model slopes and minimum effective levels per (sign, layer, source,
    predictor); the both-signs results come first."""
    out: dict[str, Any] = {"threshold": config.calibration.effect_threshold, "results": []}
    for sign, effect in EFFECTS.items():
        if effect not in curve.columns or curve[effect].isna().all():
            continue
        for (layer, source), frame in curve.groupby(["layer", "source"], sort=True):
            for predictor in config.calibration.predictors:
                if predictor not in frame.columns or frame[predictor].isna().all():
                    continue
                rows = levels(frame, predictor, config, effect)
                out["results"].append(
                    {
                        "sign": sign,
                        "layer": int(cast(int, layer)),
                        "source": source,
                        "predictor": predictor,
                        "mixed_model": mixed_slope(frame, predictor, effect),
                        "levels": rows,
                        "minimum_effective": minimum_effective(rows),
                    }
                )
    return out
