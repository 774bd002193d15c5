"""The minimum effective detection level as a dose–response, with censoring said aloud.

Per manipulation, the effect is fitted as a non-decreasing function of AUROC over all
its cells (isotonic regression, sklearn; linear between fitted points). The minimum
effective AUROC for a target T (a fraction of the prompting baseline's effect) is the
lowest AUROC where the fit reaches T:

* ``reached``: inside the tested range, with a percentile interval from resampling
  concepts (refitting each replicate, the baseline's mean recomputed on the drawn
  concepts);
* ``censored_below``: the fit is already at T at the lowest AUROC tested: the true level
  is at or below it, and the design cannot say how far (the landed Phase 6's 0.727 was
  such a floor);
* ``not_reached``: the fit never reaches T in the tested range (censored above).

The answer is a curve over targets (:func:`threshold_curve`), not one number. A
decreasing relation (detection up, steering down) shows as a flat fit: no level.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression

from experiments.identify.stats import concept_draws

REACHED, BELOW, NOT_REACHED = "reached", "censored_below", "not_reached"


def crossing(x: np.ndarray, y: np.ndarray, target: float) -> tuple[str, float | None]:
    """(status, level): where the isotonic fit of y on x first reaches ``target``."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 2 or np.ptp(x) == 0:
        return "not_evaluable", None
    fit = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(x, y)
    xs = np.unique(x)
    fs = fit.predict(xs)
    if fs[0] >= target:
        return BELOW, float(xs[0])
    above = np.nonzero(fs >= target)[0]
    if not len(above):
        return NOT_REACHED, None
    i = int(above[0])
    x0, x1, f0, f1 = xs[i - 1], xs[i], fs[i - 1], fs[i]
    return REACHED, float(x0 + (target - f0) / (f1 - f0) * (x1 - x0))


def minimum_effective(
    cells: pd.DataFrame,
    baseline: dict[str, float],
    fraction: float,
    *,
    x: str = "auroc",
    y: str = "effect_above_null",
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict:
    """The minimum effective ``x`` for ``fraction`` × the mean baseline effect, with its
    bootstrap over concepts (levels of replicates that reach it; shares of each status)."""
    data = cells[["concept", x, y]].dropna()
    concepts = sorted(set(data["concept"]) & set(baseline))
    if len(concepts) < 2:
        return {"status": "not_evaluable", "reason": f"{len(concepts)} concepts"}
    groups = [
        (g[x].to_numpy(dtype=np.float64), g[y].to_numpy(dtype=np.float64))
        for g in (data[data["concept"] == c] for c in concepts)
    ]
    base = np.array([baseline[c] for c in concepts], dtype=np.float64)
    target = fraction * float(base.mean())
    status, level = crossing(data[x].to_numpy(), data[y].to_numpy(), target)
    out: dict = {
        "fraction": fraction,
        "target": target,
        "baseline_mean": float(base.mean()),
        "status": status,
        "level": level,
        "tested": [float(data[x].min()), float(data[x].max())],
    }
    if float(base.mean()) <= 0:
        out["note"] = "the prompting baseline's mean effect is not positive: no target"
        out["status"] = "not_evaluable"
        return out
    levels, statuses = [], []
    for draw in concept_draws(len(concepts), n_boot, seed):
        xs = np.concatenate([groups[i][0] for i in draw])
        ys = np.concatenate([groups[i][1] for i in draw])
        s, lv = crossing(xs, ys, fraction * base[draw].mean())
        statuses.append(s)
        if s == REACHED:
            levels.append(lv)
    shares = {s: statuses.count(s) / len(statuses) for s in (REACHED, BELOW, NOT_REACHED)}
    out["replicates"] = shares
    if len(levels) >= n_boot // 2:
        alpha = (1 - confidence) / 2
        low, high = np.quantile(levels, [alpha, 1 - alpha])
        out.update(low=float(low), high=float(high))
    return out


def threshold_curve(
    cells: pd.DataFrame,
    baseline: dict[str, float],
    fractions: np.ndarray | None = None,
    *,
    x: str = "auroc",
    y: str = "effect_above_null",
) -> list[dict]:
    """The point answer (status, level) for a grid of target fractions (no bootstrap)."""
    fractions = np.round(np.linspace(0.1, 1.5, 15), 2) if fractions is None else fractions
    data = cells[["concept", x, y]].dropna()
    concepts = sorted(set(data["concept"]) & set(baseline))
    if not concepts:
        return []
    mean = float(np.mean([baseline[c] for c in concepts]))
    out = []
    for f in fractions:
        status, level = crossing(data[x].to_numpy(), data[y].to_numpy(), float(f) * mean)
        out.append(
            {"fraction": float(f), "target": float(f) * mean, "status": status, "level": level}
        )
    return out
