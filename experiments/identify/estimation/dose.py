"""The minimum effective detection level as a dose–response, with censoring said aloud.

Per manipulation, the effect is fitted as a non-decreasing function of AUROC over all
its cells (isotonic regression, sklearn; linear between fitted points), **with a concept
term** (an offset per concept, fitted by backfitting: :func:`concept_isotonic`), so a
concept that steers easily everywhere does not pull the curve up at the AUROC levels
where its cells happen to lie; the curve is an average concept's. The minimum effective
AUROC for a target T (a fraction of the prompting baseline's effect) is the lowest AUROC
where the fit reaches T:

* ``reached``: inside the tested range;
* ``censored_below``: the fit is already at T at the lowest AUROC tested: the true level
  is at or below it, and the design cannot say how far (the landed Phase 6's 0.727 was
  such a floor);
* ``not_reached``: the fit never reaches T in the tested range (censored above).

**The interval is censoring-aware**: every concept-bootstrap replicate (refit, the
baseline's mean recomputed on the drawn concepts) contributes, a censored-below one as
−∞ and a not-reached one as +∞, and the percentile interval is read from all of them; an
end that falls on a censored replicate is open ("at or below the lowest AUROC tested",
``low_open``; "above the highest tested", ``high_open``). An interval taken over the
reached replicates only would be conditional on reaching the target, and too narrow.

The answer is a curve over targets (:func:`threshold_curve`), not one number. A
decreasing relation (detection up, steering down) shows as a flat fit: no level.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression

from experiments.identify.estimation.stats import concept_draws
from experiments.record.identify import MinimumLevel, ThresholdPoint
from metrics.intervals import Interval

REACHED, BELOW, NOT_REACHED = "reached", "censored_below", "not_reached"
METHOD = "isotonic fit with a concept term; censoring-aware concept-bootstrap percentile interval"


def concept_isotonic(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, iterations: int = 10, tol: float = 1e-6
) -> tuple[np.ndarray, np.ndarray]:
    """y = a_concept + f(x), f non-decreasing, by backfitting (alternate the concept
    offsets and the isotonic fit; sklearn has no isotonic model with fixed effects).
    Returns (the distinct x, f there + the mean offset): the curve of an average concept.
    Centring each concept on its own mean instead would be biased when concepts cover
    different AUROC ranges (a concept tested only high would lift its offset)."""
    _, index = np.unique(groups, return_inverse=True)
    counts = np.bincount(index)
    iso = IsotonicRegression(increasing=True, out_of_bounds="clip")
    offsets = np.bincount(index, weights=y) / counts
    for _ in range(iterations):
        f = iso.fit(x, y - offsets[index]).predict(x)
        new = np.bincount(index, weights=y - f) / counts
        done = np.max(np.abs(new - offsets)) < tol
        offsets = new
        if done:
            break
    xs = np.unique(x)
    return xs, iso.fit(x, y - offsets[index]).predict(xs) + offsets.mean()


def crossing(
    x: np.ndarray, y: np.ndarray, target: float, groups: np.ndarray | None = None
) -> tuple[str, float | None]:
    """(status, level): where the isotonic fit of y on x first reaches ``target``; with
    ``groups`` (the concept of each cell), the fit has a concept term
    (:func:`concept_isotonic`)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 2 or np.ptp(x) == 0:
        return "not_evaluable", None
    if groups is not None:
        xs, fs = concept_isotonic(x, y, np.asarray(groups)[keep])
    else:
        xs = np.unique(x)
        fs = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(x, y).predict(xs)
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
) -> MinimumLevel:
    """The minimum effective ``x`` for ``fraction`` × the mean baseline effect (concept
    term), with its censoring-aware bootstrap over concepts and the shares of each
    replicate status."""
    data = cells[["concept", x, y]].dropna()
    concepts = sorted(set(data["concept"]) & set(baseline))
    if len(concepts) < 2:
        why = f"{len(concepts)} concepts"
        return MinimumLevel(fraction=fraction, status="not_evaluable", reason=why)
    data = data[data["concept"].isin(concepts)]
    groups = [
        (g[x].to_numpy(dtype=np.float64), g[y].to_numpy(dtype=np.float64))
        for g in (data[data["concept"] == c] for c in concepts)
    ]
    base = np.array([baseline[c] for c in concepts], dtype=np.float64)
    target = fraction * float(base.mean())
    status, level = crossing(
        data[x].to_numpy(), data[y].to_numpy(), target, data["concept"].to_numpy()
    )
    tested = [float(data[x].min()), float(data[x].max())]
    point = Interval(level, method=METHOD, n_clusters=len(concepts))
    out = MinimumLevel(
        fraction=fraction, target=target, baseline_mean=float(base.mean()), status=status,
        level=point if level is not None else None, tested=tested,
    )  # fmt: skip
    if float(base.mean()) <= 0:
        note = "the prompting baseline's mean effect is not positive: no target"
        return out.model_copy(update={"note": note, "status": "not_evaluable"})
    levels, statuses = [], []
    for draw in concept_draws(len(concepts), n_boot, seed):
        xs = np.concatenate([groups[i][0] for i in draw])
        ys = np.concatenate([groups[i][1] for i in draw])
        drawn = np.repeat(np.arange(len(draw)), [len(groups[i][0]) for i in draw])
        s, lv = crossing(xs, ys, fraction * base[draw].mean(), drawn)
        statuses.append(s)
        levels.append(lv if s == REACHED else -np.inf if s == BELOW else np.inf)
    shares = {s: statuses.count(s) / len(statuses) for s in (REACHED, BELOW, NOT_REACHED)}
    ends = censored_interval(np.array(levels), confidence, tested)
    low, high = ends.interval.low, ends.interval.high
    shown = replace(point, low=low, high=high)
    has = level is not None or low is not None or high is not None
    return out.model_copy(update={
        "replicates": shares, "level": shown if has else None,
        "low_open": ends.low_open, "high_open": ends.high_open,
    })  # fmt: skip


class Censored(NamedTuple):
    """A percentile interval whose ends may be censored: an open end is the tested edge."""

    interval: Interval  # its ends (no estimate: the level's point is read apart)
    low_open: bool = False
    high_open: bool = False


def censored_interval(levels: np.ndarray, confidence: float, tested: list[float]) -> Censored:
    """The percentile interval over every replicate, censored ones at ±∞ (see the module
    docstring): an open end is reported as the tested edge with ``low_open`` /
    ``high_open`` set, never as a number the design did not measure."""
    alpha = (1 - confidence) / 2
    finite = levels[np.isfinite(levels)]
    if not len(levels):
        return Censored(Interval())
    low, high = np.quantile(levels, [alpha, 1 - alpha], method="inverted_cdf")
    low_open, high_open = bool(np.isneginf(low)), bool(np.isposinf(high))
    if np.isposinf(low) or np.isneginf(high) or not len(finite):
        # the whole interval is censored on one side
        return Censored(Interval(), low_open, high_open)
    ends = Interval(
        None,
        float(tested[0]) if low_open else float(low),
        float(tested[1]) if high_open else float(high),
    )
    return Censored(ends, low_open, high_open)


def threshold_curve(
    cells: pd.DataFrame,
    baseline: dict[str, float],
    fractions: np.ndarray | None = None,
    *,
    x: str = "auroc",
    y: str = "effect_above_null",
) -> list[ThresholdPoint]:
    """The point answer (status, level) for a grid of target fractions (no bootstrap),
    with the concept term."""
    fractions = np.round(np.linspace(0.1, 1.5, 15), 2) if fractions is None else fractions
    data = cells[["concept", x, y]].dropna()
    concepts = sorted(set(data["concept"]) & set(baseline))
    if not concepts:
        return []
    data = data[data["concept"].isin(concepts)]
    mean = float(np.mean([baseline[c] for c in concepts]))
    out = []
    x_, y_, g_ = data[x].to_numpy(), data[y].to_numpy(), data["concept"].to_numpy()
    for f in fractions:
        status, level = crossing(x_, y_, float(f) * mean, g_)
        out.append(
            ThresholdPoint(fraction=float(f), target=float(f) * mean, status=status, level=level)
        )
    return out
