"""Intervals and the verdicts that rest on them.

Steering rows are not independent: the rows of one prompt share its wording and the
rows of one concept share its centroids and direction. A row-level interval is then too
narrow, so means and correlations here come with a *clustered* bootstrap that resamples
whole clusters (prompts within a concept, or concepts). scipy's ``bootstrap`` resamples
independent observations only, hence this small hand-written resampler. The
concept-level (hierarchical) bootstrap, :func:`hierarchical_bootstrap` (its section below
says how it draws), is the one helper for means, margins and cross-concept correlations
(:func:`hierarchical_mean`, :func:`hierarchical_margin`, :func:`hierarchical_correlation`).
Binomial intervals come from statsmodels (Wilson).

A verdict passes when the whole interval lies above the threshold, fails when it lies
below, and is inconclusive when the interval straddles it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Literal, Self, TypedDict, TypeVar, cast

import numpy as np

Verdict = Literal["pass", "fail", "inconclusive", "not_evaluable"]
DEFAULT_BOOT = 2000
# A concept's key (a synset id, a name): the mappings keyed by concept are generic in it.
K = TypeVar("K", bound=Hashable)
U = TypeVar("U")  # a resampled unit (bootstrap_statistic)


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval (None when not evaluable): the one
    estimate type of the suite, from the statistics to the typed records (a record field
    typed ``Interval`` is validated and stored by pydantic field by field) and the answer.
    A fit with more to say extends it (``metrics.cluster.ClusterFit``)."""

    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    n: int = 0  # units the interval rests on
    n_clusters: int = 0  # clusters resampled (concepts)
    method: str = ""
    reason: str = ""  # why there is no estimate

    @property
    def evaluable(self) -> bool:
        return self.estimate is not None and self.low is not None and self.high is not None

    def ends(self) -> tuple[float, float, float] | None:
        """(estimate, low, high) as numbers, or None when not evaluable: what a figure
        draws, narrowed once."""
        if self.estimate is None or self.low is None or self.high is None:
            return None
        return self.estimate, self.low, self.high

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def of(cls, data: Mapping[str, object]) -> Self:
        """The estimate a stored dict holds (``to_dict``'s, or a record's): its own fields
        read, validated as a record field is, anything else left out (a subclass's extra
        blocks, such as a corrected fit's ``correction``)."""
        from pydantic import TypeAdapter

        names = {f.name for f in fields(cls)}
        return TypeAdapter(cls).validate_python({k: v for k, v in data.items() if k in names})


def not_evaluable(reason: str, n: int = 0, n_clusters: int = 0, method: str = "") -> Interval:
    return Interval(None, None, None, n, n_clusters, method, reason)


def interval_verdict(interval: Interval, threshold: float) -> Verdict:
    """pass: low > threshold; fail: high < threshold; otherwise inconclusive."""
    if not interval.evaluable:
        return "not_evaluable"
    assert interval.low is not None and interval.high is not None
    if interval.low > threshold:
        return "pass"
    if interval.high < threshold:
        return "fail"
    return "inconclusive"


def cluster_rows(clusters: Sequence[object]) -> list[np.ndarray]:
    """Row indices per cluster, clusters in first-seen order."""
    order: dict[object, list[int]] = {}
    for i, c in enumerate(clusters):
        order.setdefault(c, []).append(i)
    return [np.asarray(v) for v in order.values()]


def clustered_bootstrap_mean(
    values: Sequence[float] | np.ndarray,
    clusters: Sequence[object],
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
) -> Interval:
    """Mean of ``values`` with a percentile interval from resampling whole clusters.

    Each replicate draws as many clusters as there are, with replacement, and takes the
    mean over all rows of the drawn clusters (so large clusters weigh as in the data).
    """
    x = np.asarray(values, dtype=np.float64)
    if len(x) != len(clusters):
        raise ValueError(f"values ({len(x)}) and clusters ({len(clusters)}) differ in length")
    keep = np.isfinite(x)
    x = x[keep]
    kept = [c for c, k in zip(clusters, keep, strict=True) if k]
    groups = cluster_rows(kept)
    method = f"cluster bootstrap mean ({n_boot} replicates)"
    if len(x) == 0:
        return not_evaluable("no finite values", method=method)
    estimate = float(x.mean())
    if len(groups) < 2:
        return Interval(estimate, None, None, len(x), len(groups), method, "one cluster")
    sums = np.array([x[g].sum() for g in groups])
    sizes = np.array([len(g) for g in groups], dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(groups), size=(n_boot, len(groups)))
    means = sums[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    return _percentile_interval(estimate, means, len(x), n_boot, confidence, method, len(groups))


def bootstrap_statistic(
    units: Sequence[U],
    statistic: Callable[[list[U]], float | None],
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    method: str = "bootstrap",
) -> Interval:
    """Any statistic of a list of independent units (e.g. concepts), with a percentile
    interval from resampling the units; replicates where it is undefined are dropped."""
    units = list(units)
    estimate = statistic(units)
    if estimate is None or not np.isfinite(estimate):
        return not_evaluable("statistic undefined on the data", len(units), len(units), method)
    rng = np.random.default_rng(seed)
    reps = []
    for _ in range(n_boot):
        sample = [units[i] for i in rng.integers(0, len(units), size=len(units))]
        value = statistic(sample)
        if value is not None and np.isfinite(value):
            reps.append(value)
    return _percentile_interval(float(estimate), reps, len(units), n_boot, confidence, method)


def _percentile_interval(
    estimate: float,
    reps: Sequence[float] | np.ndarray,
    n: int,
    n_boot: int,
    confidence: float,
    method: str,
    n_clusters: int | None = None,
) -> Interval:
    clusters = n if n_clusters is None else n_clusters
    if len(reps) < n_boot // 2:
        return Interval(estimate, None, None, n, clusters, method, "too few valid replicates")
    alpha = (1 - confidence) / 2
    low, high = np.quantile(reps, [alpha, 1 - alpha])
    return Interval(estimate, float(low), float(high), n, clusters, method)


def _paired_resamples(
    pairs: Sequence[tuple[float, float]], n_boot: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(x, y) and every bootstrap resample of them, or None when x or y is constant.

    One ``integers`` call of shape (n_boot, n) gives the stream that ``n_boot`` calls of
    size n give in :func:`bootstrap_statistic`; resamples with a constant x or y (where a
    correlation is undefined) are dropped, as there."""
    xy = np.asarray(pairs, dtype=float).reshape(-1, 2)
    x, y = xy[:, 0], xy[:, 1]
    if len(xy) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    draws = np.random.default_rng(seed).integers(0, len(xy), size=(n_boot, len(xy)))
    xs, ys = x[draws], y[draws]
    varied = (np.ptp(xs, axis=1) > 0) & (np.ptp(ys, axis=1) > 0)
    return x, y, xs[varied], ys[varied]


def _bootstrap_correlation(
    pairs: Sequence[tuple[float, float]],
    estimate: Callable[[np.ndarray, np.ndarray], float],
    replicates: Callable[[np.ndarray, np.ndarray], Sequence[float] | np.ndarray],
    confidence: float,
    n_boot: int,
    seed: int,
    method: str,
) -> Interval:
    """:func:`bootstrap_statistic` for a correlation of (x, y) units: ``estimate(x, y)`` on
    the data, ``replicates(xs, ys)`` on every varied resample at once (rows of ``xs``,
    ``ys``); undefined estimates and replicates are dropped, as there."""
    data = _paired_resamples(pairs, n_boot, seed)
    n = len(pairs)
    if data is None:
        return not_evaluable("statistic undefined on the data", n, n, method)
    x, y, xs, ys = data
    value = float(estimate(x, y))
    if not np.isfinite(value):
        return not_evaluable("statistic undefined on the data", n, n, method)
    reps = np.asarray(replicates(xs, ys) if len(xs) else [], dtype=float)
    reps = reps[np.isfinite(reps)]
    return _percentile_interval(value, reps, n, n_boot, confidence, method)


def bootstrap_pearson(
    pairs: Sequence[tuple[float, float]],
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    method: str = "pearson r, bootstrap",
) -> Interval:
    """:func:`bootstrap_statistic` with Pearson's r of (x, y) units as the statistic, every
    replicate in one vectorised call.

    The same draws (:func:`_paired_resamples`) and scipy's ``pearsonr`` along an axis,
    which gives each replicate's r bit for bit as the one-sample call does, so the
    interval is the one :func:`bootstrap_statistic` gives, about 100 times faster (2,000
    one-sample calls took 0.45 s, twice in every run's analysis).
    """
    from scipy import stats

    def replicates(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        r: np.ndarray = stats.pearsonr(xs, ys, axis=1)[0]
        return r

    return _bootstrap_correlation(
        pairs, lambda x, y: stats.pearsonr(x, y)[0], replicates, confidence, n_boot, seed, method
    )


def bootstrap_spearman(
    pairs: Sequence[tuple[float, float]],
    *,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    method: str = "spearman r, bootstrap",
) -> Interval:
    """:func:`bootstrap_statistic` with Spearman's rho of (x, y) units as the statistic,
    bit for bit, at about a twentieth of the cost.

    scipy's ``spearmanr`` ranks the two columns and returns ``np.corrcoef`` of the
    ranks; its ``axis`` means variables, not replicates, so it cannot take every
    resample at once. Here the ranks of all resamples come from one ``rankdata`` call
    (average ranks are exact, so they equal the per-sample ranks), and each replicate
    is the same ``np.corrcoef`` call on a rank table laid out as scipy lays it out,
    without the checks and the p-value scipy adds per call (2,000 calls took 1.4 s of
    every run's analysis). The draws are :func:`_paired_resamples`'s.
    """
    from scipy import stats

    def replicates(xs: np.ndarray, ys: np.ndarray) -> list[float]:
        # [replicates, 2, n]: row i, transposed, is the (n, 2) rank table spearmanr builds
        # (apply_along_axis returns it as the transpose of a C-ordered (2, n) array).
        ranks = stats.rankdata(np.stack((xs, ys), axis=1), axis=2)
        return [float(np.corrcoef(table.T, rowvar=False)[1, 0]) for table in ranks]

    return _bootstrap_correlation(
        pairs, lambda x, y: stats.spearmanr(x, y)[0], replicates, confidence, n_boot, seed, method
    )


def binomial_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """A proportion with its Wilson interval (statsmodels)."""
    from statsmodels.stats.proportion import proportion_confint

    method = "Wilson"
    if n == 0:
        return not_evaluable("no trials", method=method)
    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    p = successes / n
    # Wilson's bounds can miss 0 or 1 by a rounding error at k = 0 or k = n.
    return Interval(p, min(float(low), p), max(float(high), p), n, n, method)


# ---------------------------------------------------------------------------------------
# The concept-level (hierarchical) bootstrap
# ---------------------------------------------------------------------------------------
#
# Every unit of a concept (a prompt × sample of a steered generation, a text of a held-out
# set) shares that concept's direction, centroids and null draw, so the concept is the unit
# of replication. A replicate draws as many concepts as there are, with replacement, and
# then, for each drawn concept, as many of its units as it has, with replacement (Davison &
# Hinkley 1997, section 3.8; Field & Welsh 2007). Resampling at both stages slightly
# overstates the variance of a mean (it adds about the within-concept variance over the
# total number of units, a second time): the interval errs on the wide side, which
# is the safe side for a verdict. ``within=False`` resamples concepts only (each drawn
# concept keeps its units), the choice when a statistic must not see duplicated units (a
# split-half reliability: a unit drawn twice could fall into both halves) and the default
# for correlations (see :func:`hierarchical_correlation`: redrawn units add their noise a
# second time and pull every replicate's r toward zero).

GATHER_BUDGET = 1 << 22  # aggregate values gathered per block of replicates (32 MiB)

Aggregate = Callable[[np.ndarray], np.ndarray]
"""A per-concept aggregate, vectorised over resamples: it maps an array of ``m`` resamples
of one concept's units, shape ``(m, n_units, *unit_shape)``, to ``(m, *out_shape)``."""

Statistic = Callable[[Mapping[str, np.ndarray]], np.ndarray]
"""A statistic of per-concept aggregates, vectorised over replicates: it maps each
measure's aggregates, shape ``(replicates, concepts, *out_shape)``, to ``(replicates,)``
(NaN where it is undefined; such replicates are dropped)."""


def unit_mean(units: np.ndarray) -> np.ndarray:
    """The default aggregate: the mean over a concept's units."""
    means: np.ndarray = units.mean(axis=1)
    return means


def _sum_and_count(units: np.ndarray) -> np.ndarray:
    """Per resample: [sum of the units, number of units] (for a unit-weighted mean)."""
    sums = units.sum(axis=1)
    return np.stack([sums, np.full_like(sums, units.shape[1])], axis=-1)


def group_units(
    values: Sequence[object] | np.ndarray, concepts: Sequence[object]
) -> dict[object, np.ndarray]:
    """Rows with their concept labels as one unit array per concept (first-seen order).

    A row may be a number or a fixed-length vector (columns that must stay paired, e.g. an
    arm's effect and its null on the same unit); rows with a non-finite entry are dropped,
    and so are concepts left without rows.
    """
    x = np.asarray(values, dtype=np.float64)
    if len(x) != len(concepts):
        raise ValueError(f"values ({len(x)}) and concepts ({len(concepts)}) differ in length")
    keep = cast(  # all(axis=1) of a 2-D array: an array, not numpy's scalar
        np.ndarray,
        np.isfinite(x).reshape(len(x), -1).all(axis=1) if len(x) else np.zeros(0, bool),
    )
    out: dict[object, list[int]] = {}
    for i, c in enumerate(concepts):
        if keep[i]:
            out.setdefault(c, []).append(i)
    return {c: x[np.asarray(rows)] for c, rows in out.items()}


def _as_tables(
    units: Mapping[K, Mapping[str, object]],
) -> tuple[list[K], list[str], list[dict[str, np.ndarray]]]:
    concepts = list(units)
    tables = [{k: np.asarray(v, dtype=np.float64) for k, v in units[c].items()} for c in concepts]
    measures = sorted(tables[0]) if tables else []
    for c, table in zip(concepts, tables, strict=True):
        if sorted(table) != measures:
            raise ValueError(f"concept {c!r} has measures {sorted(table)}, expected {measures}")
        for name, array in table.items():
            if array.ndim == 0 or len(array) == 0:
                raise ValueError(f"concept {c!r} has no units for measure {name!r}")
    return concepts, measures, tables


def hierarchical_bootstrap(
    units: Mapping[K, Mapping[str, object]],
    statistic: Statistic,
    *,
    aggregate: Mapping[str, Aggregate] | None = None,
    within: bool = True,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    method: str = "hierarchical bootstrap",
) -> Interval:
    """A statistic of per-concept aggregates with a concept-level percentile interval.

    ``units[concept][measure]`` holds one concept's units of one measure: a 1-D array, or
    2-D with one row per unit when columns must be resampled together (paired). The
    measures of a concept are resampled independently (they come from different units,
    e.g. the effect from report prompts × samples and F1 from test texts). Each replicate
    draws concepts, then units within each drawn concept (unless ``within`` is False),
    recomputes every drawn concept's aggregates (``aggregate[measure]``, default the
    mean) and then the statistic across concepts. The estimate is the statistic of the
    data's own aggregates. ``n`` counts units, ``n_clusters`` concepts.
    """
    aggregate = dict(aggregate or {})
    concepts, measures, tables = _as_tables(units)
    n_units = sum(len(t[m]) for t in tables for m in measures)
    if not concepts:
        return not_evaluable("no concepts", method=method)
    n_c = len(concepts)

    def agg(name: str, resamples: np.ndarray) -> np.ndarray:
        return np.asarray(aggregate.get(name, unit_mean)(resamples), dtype=np.float64)

    data = {
        name: np.stack([agg(name, t[name][None])[0] for t in tables])[None] for name in measures
    }
    value = np.asarray(statistic(data), dtype=np.float64).reshape(-1)
    if value.shape != (1,) or not np.isfinite(value[0]):
        return not_evaluable("statistic undefined on the data", n_units, n_c, method)
    estimate = float(value[0])
    if n_c < 2:
        return Interval(estimate, None, None, n_units, n_c, method, "one concept")
    rng = np.random.default_rng(seed)
    top = rng.integers(0, n_c, size=(n_boot, n_c))
    if within:
        reps = {name: np.empty((n_boot, *data[name].shape[1:])) for name in measures}
        for c, table in enumerate(tables):
            slots = top == c
            m = int(slots.sum())
            for name in measures:
                u = table[name]
                draws = rng.integers(0, len(u), size=(m, len(u)))
                reps[name][slots] = agg(name, u[draws])
        values = np.asarray(statistic(reps), dtype=np.float64).reshape(-1)
    else:
        # Replicates in blocks: gathering every replicate's aggregates at once would hold
        # n_boot x concepts x aggregate size values (GBs for per-split reliabilities).
        size = sum(int(np.prod(data[name].shape[1:])) for name in measures)
        block = max(1, GATHER_BUDGET // max(size, 1))
        values = np.concatenate(
            [
                np.asarray(
                    statistic({name: data[name][0][top[i : i + block]] for name in measures}),
                    dtype=np.float64,
                ).reshape(-1)
                for i in range(0, n_boot, block)
            ]
        )
    values = values[np.isfinite(values)]
    return _percentile_interval(estimate, values, n_units, n_boot, confidence, method, n_c)


def hierarchical_mean(
    units: Mapping[K, object],
    *,
    weights: Literal["concepts", "units"] = "concepts",
    within: bool = True,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    method: str | None = None,
) -> Interval:
    """The mean effect over concepts with a concept-level interval.

    ``units[concept]`` is that concept's 1-D unit values (see :func:`group_units`).
    ``weights="concepts"`` is the mean of per-concept means (each concept counts once,
    as the unit of replication); ``"units"`` pools all units (a concept with more units
    weighs more, as :func:`clustered_bootstrap_mean` does).
    """
    tables = {c: {"x": v} for c, v in units.items()}
    label = method or f"hierarchical bootstrap mean over concepts ({n_boot} replicates)"
    statistics: dict[str, Statistic] = {
        "units": lambda a: a["x"][..., 0].sum(axis=1) / a["x"][..., 1].sum(axis=1),
        "concepts": lambda a: a["x"].mean(axis=1),
    }
    if weights not in statistics:
        raise ValueError(f"weights must be 'concepts' or 'units', got {weights!r}")
    return hierarchical_bootstrap(
        tables,
        statistics[weights],
        aggregate={"x": _sum_and_count} if weights == "units" else None,
        **_BootOptions(
            within=within, confidence=confidence, n_boot=n_boot, seed=seed, method=label
        ),
    )


def _same_concepts(a: Mapping[K, object], b: Mapping[K, object]) -> None:
    if set(a) != set(b):
        only = sorted(map(str, set(a) ^ set(b)))
        raise ValueError(f"the two sides must have the same concepts; unmatched: {only}")


class Bootstrap(TypedDict):
    """The bootstrap options an analysis passes on to every interval it takes: the
    interval's level, the replicates and the seed."""

    confidence: float
    n_boot: int
    seed: int


class _BootOptions(Bootstrap):
    """hierarchical_bootstrap's keyword options that its callers here pass on."""

    within: bool
    method: str


def hierarchical_margin(
    a: Mapping[K, object],
    b: Mapping[K, object],
    *,
    paired: bool = False,
    within: bool = True,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    method: str | None = None,
) -> Interval:
    """Mean over concepts of (mean of ``a``'s units − mean of ``b``'s units).

    ``paired``: unit i of ``a`` and unit i of ``b`` are the same unit (a concept arm and its
    null on one prompt × sample), so they are resampled together; otherwise the two sides
    are resampled independently within each drawn concept (e.g. on- and off-concept texts).
    """
    _same_concepts(a, b)
    label = method or f"hierarchical bootstrap margin over concepts ({n_boot} replicates)"
    kwargs = _BootOptions(
        within=within, confidence=confidence, n_boot=n_boot, seed=seed, method=label
    )
    if paired:
        tables: dict[K, Mapping[str, object]] = {}
        for c in a:
            left, right = np.asarray(a[c], dtype=float), np.asarray(b[c], dtype=float)
            if left.shape != right.shape:
                raise ValueError(f"paired sides of {c!r} differ in shape")
            tables[c] = {"d": np.stack([left, right], axis=-1)}

        def paired_diff(u: np.ndarray) -> np.ndarray:
            diffs: np.ndarray = (u[..., 0] - u[..., 1]).mean(axis=1)
            return diffs

        return hierarchical_bootstrap(
            tables, lambda g: g["d"].mean(axis=1), aggregate={"d": paired_diff}, **kwargs
        )
    tables = {c: {"a": a[c], "b": b[c]} for c in a}
    return hierarchical_bootstrap(tables, lambda g: (g["a"] - g["b"]).mean(axis=1), **kwargs)


def rowwise_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of each row of ``x`` with the same row of ``y`` (shape (R, C) → (R,));
    NaN where a row of either is constant (the correlation is undefined there)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(axis=-1) / np.sqrt((xc * xc).sum(axis=-1) * (yc * yc).sum(axis=-1))
    varied = (np.ptp(x, axis=-1) > 0) & (np.ptp(y, axis=-1) > 0) & (x.shape[-1] >= 3)
    return np.where(varied, np.clip(r, -1.0, 1.0), np.nan)


def rowwise_correlation(
    x: np.ndarray, y: np.ndarray, method: Literal["pearson", "spearman"] = "pearson"
) -> np.ndarray:
    """:func:`rowwise_pearson`, or Spearman's rho (Pearson's r of average ranks per row)."""
    if method == "spearman":  # a constant row has constant ranks: NaN there too
        from scipy import stats

        return rowwise_pearson(stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1))
    if method != "pearson":
        raise ValueError(f"method must be 'pearson' or 'spearman', got {method!r}")
    return rowwise_pearson(x, y)


def hierarchical_correlation(
    x: Mapping[K, object],
    y: Mapping[K, object],
    *,
    method: Literal["pearson", "spearman"] = "pearson",
    x_aggregate: Aggregate = unit_mean,
    y_aggregate: Aggregate = unit_mean,
    within: bool = False,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    label: str | None = None,
) -> Interval:
    """The cross-concept correlation of two per-concept aggregates, concept-level interval.

    ``x[concept]`` and ``y[concept]`` are the units each aggregate is made of (e.g. the
    effect's prompt × sample values and the test texts' scores); every replicate redraws
    concepts, recomputes both aggregates of each drawn concept and then the correlation.
    Replicates with a constant side are dropped.

    Why concepts only by default (``within=False``): a drawn concept's aggregate already
    carries its measurement noise, and redrawing its units adds that noise a second time,
    which attenuates every replicate's r and shifts the interval toward zero. Measured on
    a planted model (50 concepts, 6 units each, true r 0.9, reliability 0.6, 200 data
    sets): coverage 0.835 with ``within=True`` (interval centre 0.16 below the estimate),
    0.965 with concepts only. ``within=True`` gives the two-stage interval when wanted.
    """
    _same_concepts(x, y)
    tables = {c: {"x": x[c], "y": y[c]} for c in x}
    label = label or f"{method} r, hierarchical bootstrap over concepts"
    return hierarchical_bootstrap(
        tables,
        lambda a: rowwise_correlation(a["x"], a["y"], method),
        aggregate={"x": x_aggregate, "y": y_aggregate},
        **_BootOptions(
            within=within, confidence=confidence, n_boot=n_boot, seed=seed, method=label
        ),
    )
