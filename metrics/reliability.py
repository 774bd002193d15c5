"""Split-half reliability of per-concept measures, and correlations corrected for it.

A cross-concept correlation between two noisy per-concept measures is attenuated by
their unreliability: E[r_xy] ≈ ρ·sqrt(rel_x·rel_y) (Spearman 1904). Without the
reliabilities a "no relation" cannot be told from "a relation hidden by noise", so every
measure the analysis correlates gets one, and the correlation comes with its
disattenuated value r_xy / sqrt(rel_x·rel_y) beside the observed one.

The reliability of a per-concept measure (the effect over report prompts × samples, a
likelihood contrast over texts, F1 over test texts) is the share of its between-concept
variance that is not measurement noise: var_between / (var_between + var_within / n) for
a mean of n units. It is estimated by splitting each concept's units into two halves,
correlating the half-aggregates across concepts and stepping the half-length correlation
up to full length with the Spearman–Brown formula 2r / (1 + r).

Which split: by default ``random``, the permutation-averaged split-half (Parsons,
Kruijt & Fox 2019): many random halvings, the mean of their correlations, then
Spearman–Brown. A single split's value depends on an arbitrary assignment of units to
halves (its spread over splits is reported as ``split_sd``); the units here (prompts ×
samples, texts) have no order that an odd/even split would balance, such as practice
or fatigue in a test. ``odd_even`` (one split by position) is offered for units laid out
so that alternate positions are parallel forms, e.g. prompt-major prompts × samples
where even and odd positions are the two samples of each prompt. ``strata`` keeps
every stratum (a prompt, a template) split evenly between the halves in random splits
too, so each half sees the same prompts.

Why the mean correlation is stepped up rather than the mean of stepped-up values: the
formula is steep near r = −1, so single negative splits would dominate a mean of
corrected values. A reliability is a share of variance, so it lies in [0, 1]; a
Spearman–Brown value outside it (negative when the halves anti-correlate across
concepts, e.g. −1.36 from a half r of −0.58) estimates no reliability: it is reported as
not estimable, with its reason, its value kept only as ``spearman_brown_raw``, and a
correlation cannot be corrected with it (:class:`Disattenuated` then says so instead of
giving a NaN); nor with a reliability of 0 (the measure does not separate concepts
beyond its noise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from metrics.intervals import (
    DEFAULT_BOOT,
    Aggregate,
    Bootstrap,
    Interval,
    K,
    cluster_rows,
    hierarchical_bootstrap,
    hierarchical_correlation,
    not_evaluable,
    rowwise_pearson,
    unit_mean,
)

SplitMode = Literal["random", "odd_even"]
DEFAULT_SPLITS = 100


def spearman_brown(r: float | np.ndarray, factor: float = 2.0) -> float | np.ndarray:
    """The reliability of a measure ``factor`` times as long as one whose reliability is r."""
    return factor * r / (1.0 + (factor - 1.0) * r)


@dataclass(frozen=True)
class Reliability:
    """A Spearman–Brown corrected split-half reliability, in [0, 1]; None when it is not
    estimable (``reason`` says why)."""

    estimate: float | None
    half_r: float | None  # mean correlation between half-aggregates, before the correction
    split_sd: float | None  # sd over splits of the corrected single-split values
    n_concepts: int
    n_splits: int
    method: str
    reason: str = ""
    interval: Interval | None = None  # concept-level bootstrap interval, when asked for
    # The Spearman–Brown value of the mean half r, whatever it is: outside [0, 1] it is
    # not a reliability (``estimate`` is then None); kept so the record shows it.
    spearman_brown_raw: float | None = None

    @property
    def evaluable(self) -> bool:
        return self.estimate is not None

    @property
    def usable(self) -> bool:
        """Positive, so a correlation can be corrected with it."""
        return self.estimate is not None and self.estimate > 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def split_orders(
    n_units: int,
    n_splits: int = DEFAULT_SPLITS,
    mode: SplitMode = "random",
    strata: Sequence[object] | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Unit orders, one row per split: the even positions form half A, the odd ones half B.

    ``random``: each row permutes the units within each stratum and lays the strata end
    to end, so every stratum alternates between the halves (a stratum of two goes one to
    each half). ``odd_even``: one row, the units in order (grouped by stratum, stable).
    Half A has ceil(n/2) units, half B floor(n/2).
    """
    if n_units < 2:
        raise ValueError(f"a split-half needs at least 2 units per concept, got {n_units}")
    labels = list(strata) if strata is not None else [0] * n_units
    if len(labels) != n_units:
        raise ValueError(f"{len(labels)} strata for {n_units} units")
    blocks = cluster_rows(labels)
    if mode == "odd_even":
        return np.concatenate(blocks)[None, :]
    if mode != "random":
        raise ValueError(f"split mode must be 'random' or 'odd_even', got {mode!r}")
    rng = rng or np.random.default_rng(0)
    rows = [np.concatenate([rng.permutation(b) for b in blocks]) for _ in range(n_splits)]
    return np.stack(rows)


def half_aggregates(
    units: np.ndarray, orders: np.ndarray, aggregate: Aggregate = unit_mean
) -> np.ndarray:
    """Per split, the aggregate of half A and of half B: shape (splits, 2)."""
    units = np.asarray(units, dtype=np.float64)
    a = np.asarray(aggregate(units[orders[:, 0::2]]), dtype=np.float64)
    b = np.asarray(aggregate(units[orders[:, 1::2]]), dtype=np.float64)
    return np.stack([a, b], axis=-1)


def _halves_by_concept(
    units: Mapping[K, object],
    n_splits: int,
    mode: SplitMode,
    strata: Mapping[K, Sequence[object]] | None,
    aggregate: Aggregate,
    seed: int,
) -> dict[K, np.ndarray]:
    """Each concept's (splits, 2) half-aggregates; the seed stream runs over concepts in
    the mapping's order, so a concept's splits depend on its position, not its values."""
    rng = np.random.default_rng(seed)
    out = {}
    for concept, values in units.items():
        values = np.asarray(values, dtype=np.float64)
        labels = strata.get(concept) if strata is not None else None
        orders = split_orders(len(values), n_splits, mode, labels, rng)
        out[concept] = half_aggregates(values, orders, aggregate)
    return out


def _reliability_of_halves(halves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From half-aggregates (replicates, concepts, splits, 2): the corrected reliability
    and the mean half correlation per replicate (NaN where no split has one)."""
    a = np.moveaxis(halves[..., 0], 1, -1)  # (replicates, splits, concepts)
    b = np.moveaxis(halves[..., 1], 1, -1)
    r = rowwise_pearson(a, b)
    valid = np.isfinite(r)
    counts = valid.sum(axis=-1)
    with np.errstate(invalid="ignore"):
        mean_r = np.where(counts > 0, np.where(valid, r, 0.0).sum(axis=-1) / counts, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mean_r > -1.0, spearman_brown(mean_r), np.nan)
    return rel, mean_r


def _whole(units: np.ndarray) -> np.ndarray:
    """The identity aggregate, for per-concept values computed before the bootstrap."""
    return units


def _method(mode: SplitMode, n_splits: int) -> str:
    if mode == "odd_even":
        return "split-half (odd/even), Spearman-Brown"
    return f"split-half ({n_splits} random splits, mean r), Spearman-Brown"


def split_half_reliability(
    units: Mapping[K, object],
    *,
    mode: SplitMode = "random",
    n_splits: int = DEFAULT_SPLITS,
    strata: Mapping[K, Sequence[object]] | None = None,
    aggregate: Aggregate = unit_mean,
    seed: int = 0,
    n_boot: int = 0,
    confidence: float = 0.95,
) -> Reliability:
    """Split-half reliability (Spearman–Brown) of the per-concept aggregate of ``units``.

    ``units[concept]`` is one concept's unit values (1-D, or 2-D rows for an aggregate of
    paired columns); ``aggregate`` maps resampled unit arrays ``(m, n, ...)`` to ``(m,)``
    (default the mean). ``n_boot > 0`` adds a concept-level bootstrap interval (the same
    splits, concepts redrawn; units are not redrawn, since a unit drawn twice could land
    in both halves and inflate the correlation).
    """
    method = _method(mode, n_splits)
    splits = 1 if mode == "odd_even" else n_splits
    n_c = len(units)
    if n_c < 3:
        return Reliability(None, None, None, n_c, splits, method, f"{n_c} concepts; need 3")
    halves = _halves_by_concept(units, n_splits, mode, strata, aggregate, seed)
    stacked = np.stack(list(halves.values()))[None]  # (1, concepts, splits, 2)
    rel, mean_r = _reliability_of_halves(stacked)
    if not np.isfinite(mean_r[0]):
        reason = "the half-aggregates do not vary across concepts in any split"
        return Reliability(None, None, None, n_c, splits, method, reason)
    if not np.isfinite(rel[0]):
        reason = "the halves are perfectly anti-correlated (r = -1): no reliability"
        return Reliability(None, float(mean_r[0]), None, n_c, splits, method, reason)
    raw = float(rel[0])
    if not 0.0 <= raw <= 1.0:
        reason = (
            f"Spearman-Brown gives {raw:.3f}, outside [0, 1] (the halves "
            f"correlate at r = {float(mean_r[0]):.3f} across concepts): the measure does "
            "not separate concepts beyond its noise"
        )
        return Reliability(None, float(mean_r[0]), None, n_c, splits, method, reason, None, raw)
    per_split = _reliability_of_halves(np.moveaxis(stacked[0], 1, 0)[:, :, None, :])[0]
    with np.errstate(invalid="ignore"):
        sd = float(np.nanstd(per_split)) if np.isfinite(per_split).sum() > 1 else None
    interval = None
    if n_boot > 0:
        n_units = sum(len(np.asarray(v)) for v in units.values())
        interval = hierarchical_bootstrap(
            {c: {"h": h} for c, h in halves.items()},
            lambda g: _reliability_of_halves(g["h"])[0],
            aggregate={"h": _whole},
            within=False,
            method=f"{method}, bootstrap over concepts",
            **Bootstrap(confidence=confidence, n_boot=n_boot, seed=seed),
        )
        interval = dataclasses.replace(interval, n=n_units)
    return Reliability(raw, float(mean_r[0]), sd, n_c, splits, method, "", interval, raw)


@dataclass(frozen=True)
class Disattenuated:
    """An observed cross-concept correlation, its disattenuated value and the two
    reliabilities it was corrected with (each interval from the same concept draws)."""

    observed: Interval
    corrected: Interval
    reliability_x: Reliability
    reliability_y: Reliability
    dropped_replicates: int = 0  # replicates where a reliability was ≤ 0 (undefined there)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _unusable(name: str, rel: Reliability) -> str | None:
    if not rel.evaluable:
        return (
            f"the reliability of {name} is not estimable ({rel.reason}), so the correlation "
            "cannot be corrected"
        )
    if not rel.usable:
        return (
            f"the reliability of {name} is {rel.estimate:.3f} (<= 0): the measure does not "
            "separate concepts beyond its noise, so the correlation cannot be corrected"
        )
    return None


def disattenuated_correlation(
    x: Mapping[K, object],
    y: Mapping[K, object],
    *,
    mode: SplitMode = "random",
    n_splits: int = DEFAULT_SPLITS,
    x_strata: Mapping[K, Sequence[object]] | None = None,
    y_strata: Mapping[K, Sequence[object]] | None = None,
    x_aggregate: Aggregate = unit_mean,
    y_aggregate: Aggregate = unit_mean,
    confidence: float = 0.95,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
) -> Disattenuated:
    """Pearson's r of two per-concept aggregates across concepts, and r / sqrt(rel_x·rel_y).

    ``x[concept]`` and ``y[concept]`` are each concept's units of the two measures. Both
    intervals come from one concept-level bootstrap: every replicate redraws concepts
    and recomputes r and both split-half reliabilities on the drawn concepts (the
    splits are fixed per concept, drawn once with ``seed``). Replicates in which either
    reliability is ≤ 0 have no corrected value and are dropped (counted in
    ``dropped_replicates``); with more than half dropped the interval is not
    evaluable. The corrected value is not clipped: above 1 says the reliabilities are
    underestimated or the sample is small, which a clipped 1 would hide.
    """
    if set(x) != set(y):
        raise ValueError("x and y must have the same concepts")
    concepts = list(x)
    y = {c: y[c] for c in concepts}
    observed = hierarchical_correlation(
        x,
        y,
        x_aggregate=x_aggregate,
        y_aggregate=y_aggregate,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
    )
    rel_x, rel_y = (
        split_half_reliability(u, mode=mode, n_splits=n_splits, strata=s, aggregate=agg, seed=seed)
        for u, s, agg in ((x, x_strata, x_aggregate), (y, y_strata, y_aggregate))
    )
    n_units = sum(len(np.asarray(v)) for d in (x, y) for v in d.values())
    method = f"disattenuated pearson r ({_method(mode, n_splits)}), bootstrap over concepts"
    reason = _unusable("x", rel_x) or _unusable("y", rel_y)
    if reason is not None or not observed.evaluable:
        why = reason or f"the observed correlation is not evaluable ({observed.reason})"
        return Disattenuated(
            observed, not_evaluable(why, n_units, len(concepts), method), rel_x, rel_y
        )
    halves_x = _halves_by_concept(x, n_splits, mode, x_strata, x_aggregate, seed)
    halves_y = _halves_by_concept(y, n_splits, mode, y_strata, y_aggregate, seed)
    tables = {c: {"x": x[c], "y": y[c], "hx": halves_x[c], "hy": halves_y[c]} for c in concepts}
    dropped = [0]

    def corrected(g: Mapping[str, np.ndarray]) -> np.ndarray:
        r = rowwise_pearson(g["x"], g["y"])
        rx, ry = _reliability_of_halves(g["hx"])[0], _reliability_of_halves(g["hy"])[0]
        ok = (rx > 0) & (ry > 0)
        dropped[0] += int((~ok).sum())  # called per block of replicates (data: none)
        with np.errstate(invalid="ignore"):
            return np.where(ok, r / np.sqrt(np.where(ok, rx * ry, 1.0)), np.nan)

    interval = hierarchical_bootstrap(
        tables,
        corrected,
        aggregate={"x": x_aggregate, "y": y_aggregate, "hx": _whole, "hy": _whole},
        within=False,
        method=method,
        **Bootstrap(confidence=confidence, n_boot=n_boot, seed=seed),
    )
    interval = dataclasses.replace(interval, n=n_units)
    return Disattenuated(observed, interval, rel_x, rel_y, dropped[0])
