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

import numpy as np
import pandas as pd

from experiments.config import CalibrationStudyConfig
from experiments.record.calibration import CurveFit, CurveLevel, MinimumEffective, MixedSlope
from experiments.rows import number as real
from metrics.intervals import bootstrap_statistic, interval_verdict

EFFECT = "effect_above_null"
# The effect columns of the curve table: both signs averaged, then each sign.
EFFECTS = {"both": EFFECT, "pos": "effect_above_null_pos", "neg": "effect_above_null_neg"}


def mixed_slope(frame: pd.DataFrame, predictor: str, effect: str = EFFECT) -> MixedSlope:
    """Slope of the effect on the predictor with a random intercept per concept."""
    data = frame[[predictor, effect, "concept"]].dropna()
    n, g = len(data), int(data["concept"].nunique())
    if n < 6 or g < 2 or data[predictor].nunique() < 2:
        return MixedSlope(n=n, reason=f"{n} rows; too few to fit")
    import statsmodels.formula.api as smf

    data = data.rename(columns={predictor: "x", effect: "y"})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = smf.mixedlm("y ~ x", data, groups=data["concept"]).fit(reml=True)
        low, high = fit.conf_int().loc["x"]
        slope = float(fit.params["x"])
    except (ValueError, np.linalg.LinAlgError) as exc:
        return MixedSlope(n=n, reason=f"fit failed: {exc}")
    if not np.isfinite([slope, low, high]).all():
        return MixedSlope(n=n, reason="fit did not converge")
    return MixedSlope(slope, float(low), float(high), n, g, p_value=float(fit.pvalues["x"]))


def _concept_means(frame: pd.DataFrame, column: str) -> list[float]:
    return [float(v) for v in frame.groupby("concept")[column].mean().dropna()]


def levels(
    frame: pd.DataFrame, predictor: str, config: CalibrationStudyConfig, effect: str = EFFECT
) -> list[CurveLevel]:
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
            CurveLevel(
                size=str(group["size"].iloc[0]),
                n_train=int(real(size)),
                level=level,
                effect=effect_ci,
                verdict=interval_verdict(effect_ci, config.calibration.effect_threshold),
            )
        )
    return out


def minimum_effective(rows: list[CurveLevel]) -> MinimumEffective:
    """The lowest predictor level whose size is effective, or not reached."""
    effective = [(r.level.estimate, r) for r in rows if r.verdict == "pass"]
    ranked = [(level, i, r) for i, (level, r) in enumerate(effective) if level is not None]
    if not ranked:
        return MinimumEffective(status="not_reached", levels_tested=len(rows))
    best = min(ranked)[2]  # the lowest level; ties: the smaller size
    return MinimumEffective(status="reached", level=best.level, size=best.size)


def analyse_curve(curve: pd.DataFrame, config: CalibrationStudyConfig) -> list[CurveFit]:
    """Mixed-model slopes and minimum effective levels per (sign, layer, source,
    predictor); the both-signs results come first."""
    out: list[CurveFit] = []
    for sign, effect in EFFECTS.items():
        if effect not in curve.columns or curve[effect].isna().all():
            continue
        for (layer, source), frame in curve.groupby(["layer", "source"], sort=True):
            for predictor in config.calibration.predictors:
                if predictor not in frame.columns or frame[predictor].isna().all():
                    continue
                rows = levels(frame, predictor, config, effect)
                out.append(
                    CurveFit(
                        sign=sign,
                        layer=int(real(layer)),
                        source=str(source),
                        predictor=predictor,
                        mixed_model=mixed_slope(frame, predictor, effect),
                        levels=rows,
                        minimum_effective=minimum_effective(rows),
                    )
                )
    return out
