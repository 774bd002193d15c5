"""Correlations and inter-rater agreement that never return NaN.

The original research logged NaN correlations as results. Here a statistic that cannot be
computed (too few points, a constant input, missing values) comes back as NotEvaluable
with the reason, so a caller has to decide what to do instead of logging a silent NaN.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import ClassVar, Literal, TypeAlias

import numpy as np
import pandas as pd
from scipy import stats

from metrics.intervals import Interval, _percentile_interval, not_evaluable

MIN_N = 3
MIN_CLUSTERS = 5  # fewer clusters than this: a cluster bootstrap interval is not trusted
SPEARMAN_VARIANCE_FACTOR = 1.06  # Fieller, Hartley & Pearson (1957): var(z) ≈ 1.06 / (n − 3)


@dataclass(frozen=True)
class NotEvaluable:
    """A statistic that cannot be computed from the given data, and why."""

    reason: str
    method: str | None = None
    n: int | None = None

    evaluable: ClassVar[Literal[False]] = False

    def to_dict(self) -> dict[str, object]:
        return {"evaluable": False, **asdict(self)}


@dataclass(frozen=True)
class Correlation(Interval):
    """A correlation coefficient: an :class:`~metrics.intervals.Interval` whose
    ``estimate`` is r (``coefficient`` says which) and whose ``method`` says how the
    interval was made (Fisher z, or a cluster bootstrap), with its p-value. Always
    evaluable (a correlation that cannot be computed is a :class:`NotEvaluable`), so
    ``r``, ``ci_low`` and ``ci_high`` are numbers."""

    coefficient: Literal["pearson", "spearman"] = "pearson"
    p_value: float = math.nan
    method: str = "fisher_z"

    def _ends(self) -> tuple[float, float, float]:
        ends = self.ends()
        if ends is None:
            raise ValueError(f"a correlation without an estimate or interval: {self}")
        return ends

    @property
    def r(self) -> float:
        return self._ends()[0]

    @property
    def ci_low(self) -> float:
        return self._ends()[1]

    @property
    def ci_high(self) -> float:
        return self._ends()[2]

    def to_dict(self) -> dict[str, object]:
        """The dict records store (their keys since the first release)."""
        return {"evaluable": True, "method": self.coefficient, "r": self.r,
                "p_value": self.p_value, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "n": self.n, "ci_method": self.method,
                "n_clusters": self.n_clusters or None}  # fmt: skip


CorrelationResult = Correlation | NotEvaluable
# A column of numbers: a sequence, a NumPy array or a pandas Series (the callers' forms).
Floats: TypeAlias = "Sequence[float] | np.ndarray | pd.Series[float]"


def _check_pair(x: Floats, y: Floats, method: str) -> NotEvaluable | None:
    """Reasons a correlation is undefined, or None when it can be computed."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xa.ndim != 1 or ya.ndim != 1 or xa.shape != ya.shape:
        raise ValueError(f"x and y must be 1-D and the same length, got {xa.shape}, {ya.shape}.")
    n = int(xa.shape[0])
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        return NotEvaluable("input contains NaN or infinite values", method, n)
    if n < MIN_N:
        return NotEvaluable(f"needs at least {MIN_N} points, got {n}", method, n)
    for name, values in (("x", xa), ("y", ya)):
        if np.all(values == values[0]):
            return NotEvaluable(f"{name} is constant", method, n)
    return None


def _finite_or_not_evaluable(corr: Correlation) -> CorrelationResult:
    """Guard against NaN from numerically degenerate (nearly constant) inputs."""
    values = (corr.r, corr.p_value, corr.ci_low, corr.ci_high)
    if all(math.isfinite(v) for v in values):
        return corr
    why = "numerically degenerate input (nearly constant)"
    return NotEvaluable(why, corr.coefficient, corr.n)


def pearson(x: Floats, y: Floats, confidence: float = 0.95) -> CorrelationResult:
    """Pearson r with scipy's Fisher-z confidence interval (the full [−1, 1] when n = 3)."""
    bad = _check_pair(x, y, "pearson")
    if bad is not None:
        return bad
    result = stats.pearsonr(np.asarray(x, float), np.asarray(y, float))
    low, high = map(float, result.confidence_interval(confidence_level=confidence))
    r, p = float(result.statistic), float(result.pvalue)
    return _finite_or_not_evaluable(Correlation(r, low, high, len(x), p_value=p))


def clustered_pearson(
    x: Floats,
    y: Floats,
    clusters: Sequence[object],
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> CorrelationResult:
    """Pearson r whose interval resamples whole clusters of rows (e.g. concepts).

    Rated rows that share a concept share its direction, centroids and prompts, so they
    are not independent and Fisher z over rows is too narrow. The interval is the
    percentile interval of r over cluster-bootstrap replicates
    (:func:`metrics.intervals.bootstrap_statistic`); r and its p-value are the row-level
    ones. With fewer than ``MIN_CLUSTERS`` clusters the bootstrap has too little to
    resample, so the Fisher-z interval is kept and ``method`` says why.

    A percentile bootstrap over few clusters (10 concepts) is itself too narrow at times;
    when it comes out narrower than the row-level Fisher-z interval, which already assumes
    independent rows, the interval is widened to cover both, so a verdict is never more
    confident than either method (``method`` says so).
    """
    from metrics.intervals import bootstrap_statistic, cluster_rows

    base = pearson(x, y, confidence)
    if not isinstance(base, Correlation):
        return base
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(clusters) != len(xa):
        raise ValueError(f"clusters ({len(clusters)}) and x ({len(xa)}) differ in length")
    units = cluster_rows(clusters)
    if len(units) < MIN_CLUSTERS:
        method = f"fisher_z (only {len(units)} clusters; a cluster bootstrap needs {MIN_CLUSTERS})"
        return replace(base, method=method, n_clusters=len(units))

    def r_of(sample: list[np.ndarray]) -> float | None:
        rows = np.concatenate(sample)  # each unit's row indices
        xs, ys = xa[rows], ya[rows]
        if np.all(xs == xs[0]) or np.all(ys == ys[0]):
            return None
        return float(np.corrcoef(xs, ys)[0, 1])

    interval = bootstrap_statistic(
        units, r_of, confidence=confidence, n_boot=n_boot, seed=seed, method="cluster bootstrap"
    )
    if not interval.evaluable:
        method = f"fisher_z (cluster bootstrap failed: {interval.reason})"
        return replace(base, method=method, n_clusters=len(units))
    assert interval.low is not None and interval.high is not None
    low, high = min(interval.low, base.ci_low), max(interval.high, base.ci_high)
    method = f"cluster bootstrap ({n_boot} replicates over {len(units)} clusters)"
    if (low, high) != (interval.low, interval.high):
        method += (
            f", widened to cover Fisher z (bootstrap alone [{interval.low:.3f}, "
            f"{interval.high:.3f}])"
        )
    return replace(base, low=low, high=high, method=method, n_clusters=len(units))


def fisher_z_interval(
    r: float, n: int, confidence: float = 0.95, variance_factor: float = 1.0
) -> tuple[float, float]:
    """CI for a correlation via atanh(r) ± z·sqrt(variance_factor / (n − 3)).

    n = 3 gives no information on the z scale, so the interval is the full [−1, 1];
    |r| = 1 gives the degenerate interval [r, r], as scipy does for Pearson.
    """
    if n <= MIN_N:
        return -1.0, 1.0
    if abs(r) >= 1.0:
        return float(r), float(r)
    half = stats.norm.ppf(0.5 + confidence / 2) * math.sqrt(variance_factor / (n - 3))
    z = math.atanh(r)
    return math.tanh(z - half), math.tanh(z + half)


def spearman(x: Floats, y: Floats, confidence: float = 0.95) -> CorrelationResult:
    """Spearman ρ; CI by Fisher z with the Fieller et al. variance 1.06 / (n − 3)."""
    bad = _check_pair(x, y, "spearman")
    if bad is not None:
        return bad
    result = stats.spearmanr(np.asarray(x, float), np.asarray(y, float))
    rho, p = float(np.clip(result.statistic, -1.0, 1.0)), float(result.pvalue)
    low, high = fisher_z_interval(rho, len(x), confidence, SPEARMAN_VARIANCE_FACTOR)
    return _finite_or_not_evaluable(
        Correlation(rho, low, high, len(x), coefficient="spearman", p_value=p)
    )


@dataclass(frozen=True)
class Alpha:
    """Krippendorff's alpha with the data it rests on."""

    value: float
    n_raters: int
    n_units: int  # units rated by at least two raters (the pairable ones)
    level: str = "interval"

    evaluable: ClassVar[Literal[True]] = True

    def to_dict(self) -> dict[str, object]:
        return {"evaluable": True, **asdict(self)}


def krippendorff_alpha_interval(ratings: np.ndarray) -> Alpha | NotEvaluable:
    """Interval-level Krippendorff's alpha; ratings has shape (raters, units), NaN = missing."""
    import krippendorff

    data = np.asarray(ratings, dtype=np.float64)
    if data.ndim != 2:
        raise ValueError(f"ratings must be 2-D (raters, units), got shape {data.shape}.")
    n_raters = int(data.shape[0])
    if n_raters < 2:
        return NotEvaluable(f"needs at least 2 raters, got {n_raters}", "krippendorff_alpha")
    pairable = int(np.sum(np.sum(~np.isnan(data), axis=0) >= 2))
    if pairable == 0:
        return NotEvaluable("no unit is rated by two or more raters", "krippendorff_alpha", 0)
    try:
        value = float(krippendorff.alpha(reliability_data=data, level_of_measurement="interval"))
    except ValueError as exc:  # the package raises when the pairable ratings are all equal
        return NotEvaluable(f"no variation in ratings ({exc})", "krippendorff_alpha", pairable)
    if not math.isfinite(value):
        return NotEvaluable("alpha is undefined for these ratings", "krippendorff_alpha", pairable)
    return Alpha(value=value, n_raters=n_raters, n_units=pairable)


def pairwise_spearman(table: pd.DataFrame) -> dict[tuple[str, str], CorrelationResult]:
    """Spearman ρ for every pair of rater columns, over the rows both raters scored.

    Missing ratings (NaN) are expected in rating tables, so each pair uses its complete
    rows; too few shared rows gives NotEvaluable for that pair.
    """
    results: dict[tuple[str, str], CorrelationResult] = {}
    for a, b in itertools.combinations(table.columns, 2):
        both = table[[a, b]].astype(float).dropna()
        results[(a, b)] = spearman(both[a].to_numpy(), both[b].to_numpy())
    return results


def f1_score(tp: float, fn: float, fp: float) -> float:
    """F1 = 2·tp / (2·tp + fp + fn); 0 when there are no true positives."""
    denominator = 2 * tp + fp + fn
    return float(2 * tp / denominator) if denominator > 0 else 0.0


def bootstrap_f1(
    tp: int,
    fn: int,
    fp: int,
    tn: int,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> Interval:
    """F1 with an interval from a stratified bootstrap over the test texts (``n``: the
    test texts; not evaluable without both classes).

    F1 depends on the texts only through the confusion counts, so resampling the
    positives (and the negatives) with replacement is a binomial draw of tp out of the
    positives (fp out of the negatives) at the observed rates; strata keep the test
    set's class balance, as it was built. Needs at least one text of each class.
    """
    counts = (tp, fn, fp, tn)
    if min(counts) < 0:
        raise ValueError(f"confusion counts must be >= 0, got {counts}")
    n_pos, n_neg = tp + fn, fp + tn
    if n_pos == 0 or n_neg == 0:
        return not_evaluable("the test set needs positives and negatives", n_pos + n_neg)
    rng = np.random.default_rng(seed)
    tps = rng.binomial(n_pos, tp / n_pos, size=n_boot)
    fps = rng.binomial(n_neg, fp / n_neg, size=n_boot)
    denominator = 2 * tps + fps + (n_pos - tps)
    f1s = np.where(denominator > 0, 2 * tps / np.maximum(denominator, 1), 0.0)
    method = f"stratified bootstrap over the test texts ({n_boot})"
    return _percentile_interval(
        f1_score(tp, fn, fp), f1s, n_pos + n_neg, n_boot, confidence, method, 0
    )
