"""Within-concept statistics with concept-level intervals, for the identification study.

Every manipulation gives each concept a curve of directions (cells): the question is
whether, *within* a concept, directions that detect better steer better. Concepts
differ in how easily they steer and how well they are detected, so every statistic
here is computed on concept-demeaned values (concept fixed effects): a slope, a
partial slope holding cos(direction, v*) fixed, a correlation. The concept is the unit
of replication: intervals come from :func:`metrics.intervals.hierarchical_bootstrap`
resampling concepts (``within=False``: a concept's cells are the fixed levels of a
designed manipulation, not a sample). Each concept contributes the cross-product
matrix of its demeaned columns, so a replicate is a sum of drawn concepts' matrices.

:func:`concept_draws` reproduces that helper's draws (same seed, same concepts in the
same order), so joint quantities that an interval cannot carry (the covariance of the
slopes of several manipulations, the probability that a predictor ranks first) use the
very replicates the intervals come from.

Reliability (:func:`within_reliability`): the split-half reliability of the
*within-concept* variation of a measure (its halves demeaned within concept, correlated
across cells, Spearman–Brown corrected), since that is the variation the slopes use.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import cast

import numpy as np
import pandas as pd

from experiments.record.identify import Heterogeneity, MixedFit, PredictorFit
from experiments.rows import finite
from metrics.intervals import Interval, hierarchical_bootstrap, not_evaluable
from metrics.reliability import spearman_brown

BOOT_METHOD = "concept bootstrap of within-concept cross-products"


def _one_unit(value: np.ndarray) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)[None]


def _first(units: np.ndarray) -> np.ndarray:
    return units[:, 0]


def _concept_bootstrap(
    sums: Mapping[str, np.ndarray],
    statistic: Callable[[np.ndarray], np.ndarray],
    method: str,
    n_boot: int,
    seed: int,
    confidence: float,
) -> Interval:
    """``statistic`` of the drawn concepts' ``sums`` added up, concepts resampled
    (``within=False``: one unit per concept)."""
    return hierarchical_bootstrap(
        {c: {"s": _one_unit(s)} for c, s in sums.items()},
        lambda g: statistic(g["s"].sum(axis=1)),
        aggregate={"s": _first},
        within=False,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        method=method,
    )


def cross_products(frame: pd.DataFrame, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """Per concept, Z'Z of its concept-demeaned ``columns`` (rows with a NaN dropped)."""
    data = frame[["concept", *columns]].dropna()
    out = {}
    for concept, group in data.groupby("concept", sort=True):
        z = group[list(columns)].to_numpy(dtype=np.float64)
        z = z - z.mean(axis=0)
        out[str(concept)] = z.T @ z
    return out


def _solve(s: np.ndarray, k: int) -> np.ndarray:
    """Per replicate (leading axis): coefficients of the last column on the first k."""
    xx, xy = s[..., :k, :k], s[..., :k, k]
    out = np.full(xy.shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = np.isfinite(xx).all(axis=(-1, -2)) & (np.linalg.cond(xx) < 1e10)
    if ok.any():
        out[ok] = np.linalg.solve(xx[ok], xy[ok][..., None])[..., 0]
    return out


def fe_coefficients(
    frame: pd.DataFrame,
    y: str,
    xs: Sequence[str],
    *,
    n_boot: int,
    seed: int,
    confidence: float = 0.95,
) -> dict[str, Interval]:
    """Within-concept (fixed-effects) OLS of ``y`` on ``xs``: one interval per coefficient."""
    products = cross_products(frame, [*xs, y])
    k = len(xs)
    if len(products) < 2:
        return {x: not_evaluable(f"{len(products)} concepts") for x in xs}
    n_rows = int(frame[["concept", *xs, y]].dropna().shape[0])
    out = {}
    for j, x in enumerate(xs):

        def coefficient(s: np.ndarray, j: int = j) -> np.ndarray:
            return _solve(s, k)[:, j]

        interval = _concept_bootstrap(products, coefficient, BOOT_METHOD, n_boot, seed, confidence)
        out[x] = replace(interval, n=n_rows)
    return out


def _r_from(s: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return cast(np.ndarray, s[..., 0, 1] / np.sqrt(s[..., 0, 0] * s[..., 1, 1]))


def within_correlation(
    frame: pd.DataFrame, x: str, y: str, *, n_boot: int, seed: int, confidence: float = 0.95
) -> Interval:
    """Pearson r of concept-demeaned x and y, pooled over concepts, concept-level interval."""
    products = cross_products(frame, [x, y])
    if len(products) < 2:
        return not_evaluable(f"{len(products)} concepts")
    return _concept_bootstrap(
        products, _r_from, f"within-concept r, {BOOT_METHOD}", n_boot, seed, confidence
    )


def concept_draws(n_concepts: int, n_boot: int, seed: int) -> np.ndarray:
    """The concept indices of every replicate, as hierarchical_bootstrap draws them."""
    return np.random.default_rng(seed).integers(0, n_concepts, size=(n_boot, n_concepts))


def replicate_coefficients(
    products: Mapping[str, np.ndarray], k: int, draws: np.ndarray
) -> np.ndarray:
    """The FE coefficients of every replicate ([n_boot, k]) for concepts in sorted order."""
    return _solve(np.stack([products[c] for c in sorted(products)])[draws].sum(axis=1), k)


def wald_equal(estimates: np.ndarray, replicates: np.ndarray) -> Heterogeneity:
    """Are m slopes equal (the test's part of a :class:`Heterogeneity` block)? Wald
    statistic of the m − 1 contrasts to the first slope with their bootstrap covariance,
    referred to χ² with the covariance's rank as its degrees of freedom (directions in
    which the replicates do not vary are left out, not inverted)."""
    from scipy.stats import chi2

    estimates = np.asarray(estimates, dtype=np.float64)
    reps = np.asarray(replicates, dtype=np.float64)
    reps = reps[np.isfinite(reps).all(axis=1)]
    m = len(estimates)
    if m < 2 or len(reps) < 10:
        return Heterogeneity(evaluable=False, reason=f"{m} slopes, {len(reps)} replicates")
    contrast = np.hstack([-np.ones((m - 1, 1)), np.eye(m - 1)])
    d = contrast @ estimates
    cov = np.atleast_2d(np.cov((reps @ contrast.T).T))
    values, vectors = np.linalg.eigh(cov)
    keep = values > 1e-10 * max(float(values.max()), 1e-300)
    if not keep.any():
        return Heterogeneity(evaluable=False, reason="the slopes do not vary across concept draws")
    projected = vectors[:, keep].T @ d
    stat = float((projected**2 / values[keep]).sum())  # d' Σ⁺ d on Σ's non-null space
    df = int(keep.sum())
    p_value = float(chi2.sf(stat, df))
    return Heterogeneity(evaluable=True, wald=stat, df=df, p_value=p_value, replicates=len(reps))


def demeaned_halves(halves: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per concept: [splits, 3] = ΣAA, ΣBB, ΣAB of its cells' half values ([cells,
    splits, 2]) demeaned over the concept's cells."""
    out = {}
    for concept, h in halves.items():
        h = np.asarray(h, dtype=np.float64)
        if h.shape[0] < 2:
            continue
        d = h - h.mean(axis=0, keepdims=True)
        a, b = d[..., 0], d[..., 1]
        out[concept] = np.stack([(a * a).sum(0), (b * b).sum(0), (a * b).sum(0)], axis=-1)
    return out


def _reliability_from(s: np.ndarray) -> np.ndarray:
    """[..., splits, 3] summed sums -> Spearman–Brown of the mean split correlation."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = s[..., 2] / np.sqrt(s[..., 0] * s[..., 1])
        valid = np.isfinite(r)
        count = valid.sum(axis=-1)
        mean_r = np.where(
            count > 0, np.where(valid, r, 0.0).sum(axis=-1) / np.maximum(count, 1), np.nan
        )
        return np.where(mean_r > -1, spearman_brown(mean_r), np.nan)


def within_reliability(
    halves: Mapping[str, np.ndarray], *, n_boot: int, seed: int, confidence: float = 0.95
) -> Interval:
    """Split-half reliability of the within-concept variation of a measure.

    ``halves[concept]`` is [cells, splits, 2]: each cell's value on half A and half B of
    its units for each split (the same splits for every cell of the concept)."""
    return reliability_of_sums(
        demeaned_halves(halves), n_boot=n_boot, seed=seed, confidence=confidence
    )


def reliability_of_sums(
    sums: Mapping[str, np.ndarray], *, n_boot: int, seed: int, confidence: float = 0.95
) -> Interval:
    """:func:`within_reliability` from each concept's demeaned sums ([splits, 3],
    :func:`demeaned_halves`): what a shard keeps, so shards pool without their rows."""
    if len(sums) < 2:
        return not_evaluable(f"{len(sums)} concepts with at least 2 cells")
    return _concept_bootstrap(
        sums,
        _reliability_from,
        "within-concept split-half (Spearman-Brown), concept bootstrap",
        n_boot,
        seed,
        confidence,
    )


def disattenuated_within(
    frame: pd.DataFrame,
    x: str,
    y: str,
    x_halves: Mapping[str, np.ndarray] | None,
    y_halves: Mapping[str, np.ndarray],
    *,
    n_boot: int,
    seed: int,
    confidence: float = 0.95,
) -> PredictorFit:
    """The within-concept r of x and y, both reliabilities and r / sqrt(rel_x·rel_y), each
    with a concept-level interval from the same draws. ``x_halves`` None: x is exact
    (reliability 1, e.g. a cosine computed without sampling)."""
    observed = within_correlation(frame, x, y, n_boot=n_boot, seed=seed, confidence=confidence)
    products = cross_products(frame, [x, y])
    rel_y = within_reliability(y_halves, n_boot=n_boot, seed=seed, confidence=confidence)
    rel_x = (
        Interval(1.0, 1.0, 1.0, 0, len(products), "exact (no sampling)")
        if x_halves is None
        else within_reliability(x_halves, n_boot=n_boot, seed=seed, confidence=confidence)
    )
    hy = demeaned_halves(y_halves)
    hx = demeaned_halves(x_halves) if x_halves is not None else None
    concepts = sorted(set(products) & set(hy) & (set(hx) if hx is not None else set(products)))
    if len(concepts) < 2 or not observed.evaluable:
        corrected = not_evaluable("too few concepts or no observed correlation")
    else:
        units = {
            c: {
                "m": _one_unit(products[c]),
                "hy": _one_unit(hy[c]),
                **({"hx": _one_unit(hx[c])} if hx is not None else {}),
            }
            for c in concepts
        }

        def statistic(g: Mapping[str, np.ndarray]) -> np.ndarray:
            r = _r_from(g["m"].sum(axis=1))
            ry = _reliability_from(g["hy"].sum(axis=1))
            rx = _reliability_from(g["hx"].sum(axis=1)) if "hx" in g else np.ones_like(ry)
            ok = (rx > 0) & (ry > 0)
            with np.errstate(invalid="ignore"):
                return np.where(ok, r / np.sqrt(np.where(ok, rx * ry, 1.0)), np.nan)

        corrected = hierarchical_bootstrap(
            units,
            statistic,
            aggregate={k: _first for k in ("m", "hy", "hx")},
            within=False,
            confidence=confidence,
            n_boot=n_boot,
            seed=seed,
            method="disattenuated within-concept r, concept bootstrap",
        )
    return PredictorFit(
        observed=observed, reliability_x=rel_x, reliability_y=rel_y, corrected=corrected
    )


def mixed_model(
    frame: pd.DataFrame, formula: str, re_formula: str | None, terms: Sequence[str]
) -> MixedFit:
    """statsmodels MixedLM with a random intercept (and ``re_formula`` slopes) per concept;
    the listed fixed terms with their model-based 95% intervals. A fit with random slopes
    that fails or does not converge falls back to random intercepts, and says so."""
    import statsmodels.formula.api as smf

    columns = sorted({"concept", *_names(formula), *(_names(re_formula) if re_formula else ())})
    data = frame[columns].dropna()
    if len(data) < 6 or data["concept"].nunique() < 3:
        return MixedFit(evaluable=False, reason=f"{len(data)} rows; too few to fit", n=len(data))
    attempts = [re_formula, None] if re_formula else [None]
    last = ""
    for re in attempts:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model = smf.mixedlm(formula, data, groups=data["concept"], re_formula=re)
                fit = model.fit(reml=True)
            converged = bool(getattr(fit, "converged", True)) and not any(
                "converge" in str(w.message).lower() or "singular" in str(w.message).lower()
                for w in caught
            )
            ci = fit.conf_int()
            if converged or re is None:
                return MixedFit(
                    evaluable=True, formula=formula, random=re or "~1", converged=converged,
                    n=len(data), n_concepts=int(data["concept"].nunique()),
                    terms={
                        term: {k: finite(v) for k, v in (
                            ("estimate", fit.params[term]), ("low", ci.loc[term, 0]),
                            ("high", ci.loc[term, 1]), ("p_value", fit.pvalues[term]),
                        )}
                        for term in terms
                        if term in fit.params.index
                    },
                    note=f"random slopes did not fit ({last}); random intercepts only"
                    if re != re_formula else None,
                )  # fmt: skip
            last = "did not converge"
        except (ValueError, np.linalg.LinAlgError) as exc:
            last = f"{type(exc).__name__}: {exc}"
    return MixedFit(evaluable=False, reason=last or "fit failed", n=len(data))


def within_between(data: pd.DataFrame, y: str, x: str) -> MixedFit:
    """:func:`mixed_model` of ``y ~ x_within + x_between + log_n`` (``data`` holds
    ``log_n``), a random slope on x_within: ``x`` as its concept's mean and the deviation."""
    between = data.groupby("concept")[x].transform("mean")
    data = data.assign(x_between=between, x_within=data[x] - between)
    terms = ["x_within", "x_between", "log_n"]
    return mixed_model(data, f"{y} ~ {' + '.join(terms)}", "~x_within", terms)


def _names(formula: str | None) -> list[str]:
    import re

    if not formula:
        return []
    tokens = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", formula)
    return [t for t in tokens if t not in {"C", "np", "log"}]


def pooled_correlation(
    frame: pd.DataFrame, x: str, y: str, *, n_boot: int, seed: int, confidence: float = 0.95
) -> Interval:
    """Pearson r over all cells (between and within concepts mixed), concept-level interval."""
    data = frame[["concept", x, y]].dropna()
    sums = {}
    for concept, group in data.groupby("concept", sort=True):
        a, b = group[x].to_numpy(float), group[y].to_numpy(float)
        sums[str(concept)] = np.array(
            [len(a), a.sum(), b.sum(), (a * a).sum(), (b * b).sum(), (a * b).sum()]
        )
    if len(sums) < 2:
        return not_evaluable(f"{len(sums)} concepts")

    def statistic(s: np.ndarray) -> np.ndarray:
        n, sa, sb, saa, sbb, sab = np.moveaxis(s, -1, 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            cov = sab - sa * sb / n
            return cast(np.ndarray, cov / np.sqrt((saa - sa**2 / n) * (sbb - sb**2 / n)))

    return _concept_bootstrap(
        sums, statistic, "pooled r over cells, concept bootstrap", n_boot, seed, confidence
    )
