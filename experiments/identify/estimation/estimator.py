"""The identified estimator (identify v2, issue 36): does AUROC predict the effect at equal
geometry, whatever shape the effect takes in cos(v, v*)?

The v1 primary pooled every manipulation under concept fixed effects and one straight
line in cos. Then differences between manipulations at equal cos, and curvature of the
effect in cos, load onto AUROC: a toy in which AUROC does nothing reads "supported" when
the effect is concave in cos and "contradicted" when it is convex (``simulate.py``; the
tests keep that failure on record). Here:

* **fixed effects per (concept, manipulation)**: a manipulation may shift a concept's
  effect as a whole without that shift being credited to AUROC;
* **a flexible function of cos with its own shape per manipulation**: a cubic B-spline
  (``spline_df`` ≥ 4 degrees of freedom beyond the fixed effect) per manipulation. AUROC
  is then credited only with what it explains beyond every manipulation's own curve in
  cos: how AUROC differs between concepts and draws at the same cos within a family.
  Where AUROC is one function of the angle for every concept (a rotation family without
  spread), the family carries no information about AUROC and says so (not identified),
  instead of turning curvature into a slope;
* **AUROC and probit(AUROC)** (≈ d′/√2, without the ceiling at 1) as predictors;
* **iso-cos** (:func:`iso_cos`): the designed version of matched pairs: at fixed
  angles, nuisances chosen to spread AUROC; within (concept, angle) beside the nuisance's
  own effect and the dose;
* **matched pairs** (:func:`matched_pairs`): two directions of one concept from
  different manipulations whose cos differ by at most ``tolerance``: the slope of
  Δeffect on ΔAUROC through the origin, no functional form in cos at all;
* **inference with 25 clusters**: the wild cluster bootstrap-t with CR1 standard errors
  (``metrics.cluster``), the F-corrected Wald test for equal slopes across manipulations
  given the flexible cos (``heterogeneity_given_cos``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypedDict, cast

import numpy as np
import pandas as pd

from experiments.identify.estimation.variance import demean
from experiments.identify.stages.directions import REFERENCE
from experiments.record.identified import (
    FamilySlopes,
    IdentifiedResult,
    IsoCos,
    IsoCosAngle,
    MatchedPairs,
    NameFreeDetection,
)
from experiments.rows import finite
from metrics.cluster import (
    ClusterFit,
    cluster_covariance,
    wald_f,
    wild_cluster_restricted,
    wild_cluster_t,
)

# AUROC is clipped to [1/(2·n_pairs), 1 − 1/(2·n_pairs)] before the probit, n_pairs the
# positive × negative pairs of the test split (20 × 20): a perfect detector is then
# probit 2.97, not infinite.
TEST_PAIRS = 400
SPLINE_DF = 4


class _Boot(TypedDict):
    """The bootstrap options every estimate of one study passes on."""

    n_boot: int
    seed: int


class _BootSpline(_Boot):
    spline_df: int


def probit_auroc(auroc: pd.Series | np.ndarray, n_pairs: int = TEST_PAIRS) -> np.ndarray:
    from scipy.stats import norm

    eps = 1 / (2 * n_pairs)
    return cast(np.ndarray, norm.ppf(np.clip(np.asarray(auroc, dtype=np.float64), eps, 1 - eps)))


def log_kl(kl: pd.Series) -> np.ndarray:
    """log next-token KL (the dose), KL floored at 1e-8 nats so an unmoved token is finite."""
    return np.log(np.clip(kl.astype(float).to_numpy(), 1e-8, None))


def with_probit(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(probit_auroc=probit_auroc(frame["auroc"]))


def spline_basis(values: np.ndarray, df: int = SPLINE_DF) -> np.ndarray:
    """A cubic B-spline basis of ``df + 1`` columns on the values' range (a partition of
    unity: with a fixed effect, ``df`` free columns). Uniform knots, so a family with few
    distinct levels gets a rank-deficient basis rather than coincident knots."""
    from sklearn.preprocessing import SplineTransformer

    values = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    if np.ptp(values) == 0:
        return np.ones((len(values), 1))
    n_knots = max(df - 1, 2)  # degree 3: n_knots + 2 columns
    return cast(
        np.ndarray,
        SplineTransformer(n_knots=n_knots, degree=3, knots="uniform").fit_transform(values),
    )


def design(
    frame: pd.DataFrame,
    predictors: Sequence[str],
    *,
    family: str = "manipulation",
    cos: str = "cos_ref",
    covariates: Sequence[str] = (),
    spline_df: int = SPLINE_DF,
    by_family: Sequence[str] = (),
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(X demeaned within (concept, family), its column names, the concept of each row):
    ``predictors``, then the covariates (each interacted with the family when named in
    ``by_family``), and a spline in cos per family."""
    fam = frame[family].astype(str).to_numpy()
    columns: list[np.ndarray] = []
    names: list[str] = []
    families = sorted(set(fam))
    for p in (*predictors, *covariates):
        values = frame[p].to_numpy(dtype=np.float64)
        if p in by_family:
            for m in families:
                columns.append(np.where(fam == m, values, 0.0))
                names.append(f"{p}|{m}")
        else:
            columns.append(values)
            names.append(p)
    cos_values = frame[cos].to_numpy(dtype=np.float64)
    for m in families:
        mask = fam == m
        basis = spline_basis(cos_values[mask], spline_df)
        for k in range(basis.shape[1]):
            col = np.zeros(len(frame))
            col[mask] = basis[:, k]
            columns.append(col)
            names.append(f"spline[{m}]{k}")
    x = np.column_stack(columns)
    return demean(x, _groups(frame, family)), names, frame["concept"].astype(str).to_numpy()


def _rows(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    return frame.dropna(subset=list(columns)).reset_index(drop=True)


def flexible_slope(
    frame: pd.DataFrame,
    y: str,
    predictor: str,
    *,
    family: str = "manipulation",
    covariates: Sequence[str] = (),
    spline_df: int = SPLINE_DF,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
    cos_per_group: bool = False,
) -> ClusterFit:
    """The slope of ``y`` on ``predictor`` with (concept, family) fixed effects and a
    spline in cos per family; clustered by concept. ``cos_per_group``: besides, each
    (concept, family) its own straight line in cos, so a concept whose steering rises
    faster with cos (steerability tied to separability) does not lend that to AUROC."""
    data = _rows(frame, ["concept", family, "cos_ref", y, predictor, *covariates])
    if data.empty:
        return wild_cluster_t(np.zeros((0, 1)), np.zeros(0), np.zeros(0))
    x, _, concepts = design(
        data, [predictor], family=family, covariates=covariates, spline_df=spline_df
    )
    groups = _groups(data, family)
    yd = demean(data[[y]].to_numpy(dtype=np.float64), groups)[:, 0]
    if cos_per_group:
        cos = demean(data[["cos_ref"]].to_numpy(dtype=np.float64), groups)[:, 0]
        x, yd = partial_out(x, cos, groups), partial_out(yd[:, None], cos, groups)[:, 0]
    return wild_cluster_t(x, yd, concepts, 0, n_boot=n_boot, seed=seed, confidence=confidence)


def partial_out(block: np.ndarray, cos: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each column less its own least-squares line in the group-demeaned ``cos`` within
    each group (Frisch–Waugh–Lovell: the same slope as one cos column per group, without
    a column per concept × family). A group whose cos does not vary is left as it is."""
    _, index = np.unique(groups, return_inverse=True)
    scale = np.bincount(index, cos * cos)
    safe = np.where(scale > 1e-12, scale, np.inf)
    out = block.copy()
    for j in range(block.shape[1]):
        slope = np.bincount(index, cos * block[:, j]) / safe
        out[:, j] -= slope[index] * cos
    return out


def _groups(frame: pd.DataFrame, family: str) -> np.ndarray:
    return cast(
        np.ndarray,
        frame["concept"].astype(str).to_numpy() + "\x00" + frame[family].astype(str).to_numpy(),
    )


def linear_cos_slope(
    frame: pd.DataFrame,
    y: str,
    predictor: str,
    *,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
) -> ClusterFit:
    """The v1 estimator's model (concept fixed effects, one straight line in cos), with the
    same clustered inference: what changes between v1 and v2 is then the model only."""
    data = _rows(frame, ["concept", "cos_ref", y, predictor])
    concepts = data["concept"].astype(str).to_numpy()
    return _fe_slope(data, y, predictor, ["cos_ref"], concepts, n_boot, seed, confidence)


def per_family_slopes(
    frame: pd.DataFrame,
    y: str,
    predictor: str,
    *,
    family: str = "manipulation",
    spline_df: int = SPLINE_DF,
    n_boot: int = 1999,
    seed: int = 0,
) -> FamilySlopes:
    """Each family's own slope on ``predictor`` in one flexible model, and the
    F-corrected Wald test that the identified ones are equal (``heterogeneity_given_cos``)."""
    data = _rows(frame, ["concept", family, "cos_ref", y, predictor])
    n_concepts = int(data["concept"].nunique())
    if n_concepts < 3:
        return FamilySlopes(reason=f"{n_concepts} concepts")
    x, names, concepts = design(
        data, [predictor], family=family, spline_df=spline_df, by_family=[predictor]
    )
    yd = demean(data[[y]].to_numpy(dtype=np.float64), _groups(data, family))[:, 0]
    slopes: dict[str, ClusterFit] = {}
    ids: list[int] = []
    for j, name in enumerate(names):
        if name.startswith(f"{predictor}|"):
            slopes[name.split("|", 1)[1]] = fit = wild_cluster_t(
                x, yd, concepts, j, n_boot=n_boot, seed=seed
            )
            ids += [j] if fit.evaluable else []
    not_identified = sorted(m for m, f in slopes.items() if f.estimate is None)
    found = FamilySlopes(slopes=slopes, not_identified=not_identified, n_concepts=n_concepts)
    if len(ids) < 2:
        return found.model_copy(update={"reason": f"{len(ids)} identified slopes"})
    beta, cov = cluster_covariance(x, yd, concepts)
    r = np.zeros((len(ids) - 1, x.shape[1]))
    for i, j in enumerate(ids[1:]):
        r[i, ids[0]], r[i, j] = -1.0, 1.0
    return FamilySlopes.model_validate({**dict(found), **wald_f(beta, cov, r, n_concepts)})


def matched_pairs(
    frame: pd.DataFrame,
    y: str,
    predictor: str,
    *,
    family: str = "manipulation",
    tolerance: float = 0.02,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
) -> MatchedPairs:
    """Pairs of one concept's directions from different families with |Δcos| ≤ tolerance:
    the slope of Δy on Δpredictor through the origin (invariant to how a pair is
    ordered), clustered by concept (a direction may sit in several pairs)."""
    data = _rows(frame, ["concept", family, "cos_ref", y, predictor])
    dx, dy, who = [], [], []
    for concept, g in data.groupby("concept", sort=True):
        cos = g["cos_ref"].to_numpy(dtype=np.float64)
        fam = g[family].astype(str).to_numpy()
        xv, yv = g[predictor].to_numpy(np.float64), g[y].to_numpy(np.float64)
        i, j = np.triu_indices(len(g), k=1)
        keep = (np.abs(cos[i] - cos[j]) <= tolerance) & (fam[i] != fam[j])
        dx.append(xv[i[keep]] - xv[j[keep]])
        dy.append(yv[i[keep]] - yv[j[keep]])
        who += [str(concept)] * int(keep.sum())
    x = np.concatenate(dx) if dx else np.zeros(0)
    yy = np.concatenate(dy) if dy else np.zeros(0)
    n = len(set(who))
    found = MatchedPairs(tolerance=tolerance, n_pairs=len(x), n_concepts=n, evaluable=False)
    if n < 3:
        return found.model_copy(update={"reason": f"{n} concepts with pairs"})
    fit = wild_cluster_t(
        x[:, None], yy, np.array(who), 0, n_boot=n_boot, seed=seed, confidence=confidence
    )
    return found.model_copy(update={"evaluable": fit.evaluable, "fit": fit})


def _fe_slope(
    data: pd.DataFrame, y: str, predictor: str, covariates: Sequence[str], groups: np.ndarray,
    n_boot: int, seed: int, confidence: float = 0.95,
    fit: Callable[..., ClusterFit] = wild_cluster_t,
) -> ClusterFit:  # fmt: skip
    """The slope of ``y`` on ``predictor`` (beside ``covariates``) within ``groups``,
    clustered by concept, by ``fit``: the wild cluster bootstrap-t, or for the
    equal-geometry and practitioner estimands' bare slope (``wild_cluster_restricted``)
    its interval by inverting the restricted wild cluster bootstrap test."""
    x = demean(data[[predictor, *covariates]].to_numpy(dtype=np.float64), groups)
    yd = demean(data[[y]].to_numpy(dtype=np.float64), groups)[:, 0]
    concepts = data["concept"].astype(str).to_numpy()
    return fit(x, yd, concepts, 0, n_boot=n_boot, seed=seed, confidence=confidence)


def iso_cos(
    frame: pd.DataFrame,
    y: str = "effect",
    predictor: str = "auroc",
    *,
    manipulation: str = "isocos",
    n_boot: int = 1999,
    seed: int = 0,
) -> IsoCos:
    """The iso-cos design: at each angle, the directions of one concept share cos(v, v*)
    exactly and differ only in their nuisance. The slope of the effect on AUROC within
    (concept, angle), beside the nuisance's own effect (the same nuisance steered alone, at
    90°, same β) and, when measured, log next-token KL: per angle and pooled."""
    iso = frame[frame["manipulation"] == manipulation]
    if iso.empty:
        return IsoCos(reason="the run has no iso-cos directions")
    alone = iso[iso["level"] >= 90].set_index(["concept", "seed"])[y]
    rows = iso[iso["level"] < 90].copy()
    rows["nuisance_effect"] = [
        alone.get((c, s), np.nan) for c, s in zip(rows["concept"], rows["seed"], strict=True)
    ]
    covariates = ["nuisance_effect"]
    if "kl" in rows and rows["kl"].notna().any():
        rows["log_kl"] = log_kl(rows["kl"])
        covariates.append("log_kl")
    rows = _rows(rows, ["concept", "level", y, predictor, *covariates])
    angles = {}
    for angle, g in rows.groupby("level", sort=True):
        groups = g["concept"].astype(str).to_numpy()
        angles[f"{angle:g}"] = IsoCosAngle(
            n=len(g),
            slope=_fe_slope(g, y, predictor, covariates, groups, n_boot, seed),
            without_covariates=_fe_slope(g, y, predictor, [], groups, n_boot, seed),
            auroc_spread=float(g.groupby("concept")[predictor].std().mean()),
        )
    pooled = _fe_slope(rows, y, predictor, covariates, _groups(rows, "level"), n_boot, seed)
    return IsoCos(
        evaluable=pooled.estimate is not None, covariates=covariates, angles=angles,
        n_concepts=rows["concept"].nunique(), pooled=pooled,
    )  # fmt: skip


def has_second_half(frame: pd.DataFrame) -> bool:
    """Whether a directions table carries what the corrected equal-geometry slope needs."""
    return all(c in frame and frame[c].notna().any() for c in ("cos_half", "auroc_error_within"))


def equal_geometry(
    frame: pd.DataFrame,
    y: str = "effect",
    predictor: str = "auroc",
    *,
    manipulation: str = "isocos",
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
    corrected: bool = True,
) -> ClusterFit:
    """The equal-geometry estimand (exploratory in v3): among directions at one angle
    to v* (cos(v, v*) = cos θ exactly) whose nuisances were drawn at random for the
    concept, the slope of the outcome on AUROC within (concept, angle, spectrum band)
    cells, bare (no covariate: the nuisance's own effect and the dose are consequences of
    the draw, and adjusting for them changes the question, see docs/identify.md); the
    90° rows (the nuisance alone) are left out; clustered by concept, the interval by
    inverting the restricted wild cluster bootstrap test (``wild_cluster_restricted``).
    Graded nuisances (v2, no ``nuisance_band`` column) are stratified by (concept, angle)
    only. A run with the reference's second half (``identify.reference_halves``) gets the
    slope corrected for AUROC's and the reference's measurement error
    (:func:`equal_geometry_corrected`) unless ``corrected`` is False."""
    from experiments.identify.estimation.variance import equal_geometry_rows

    data = equal_geometry_rows(frame, y, predictor, manipulation)
    if data.empty:
        return wild_cluster_t(np.zeros((0, 1)), np.zeros(0), np.zeros(0))
    if corrected and has_second_half(data):
        from experiments.identify.estimation.corrected import equal_geometry_corrected

        return equal_geometry_corrected(
            data, y, predictor, n_boot=n_boot, seed=seed, confidence=confidence
        )
    cells = data["cell"].to_numpy()
    return _fe_slope(
        data, y, predictor, [], cells, n_boot, seed, confidence, wild_cluster_restricted
    )


def practitioner_slope(
    frame: pd.DataFrame,
    y: str = "effect",
    predictor: str = "auroc",
    *,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
    within_family: bool = False,
    families: tuple[str, ...] | None = None,
) -> ClusterFit:
    """The practitioner's estimand at equal norm (identify v3's primary): among the
    directions people build for a concept (``variance.PRACTITIONER``: v*, the logistic C
    path, the shrinkage path, the diffmean from fewer texts), all at the concept's one β,
    the slope of the outcome on AUROC within concept, bare: geometry is not held fixed,
    because how far a built direction lies from v* is part of why it detects as it does,
    and the question is whether detection predicts steering, not why. Clustered by
    concept; the interval by inverting the restricted wild cluster bootstrap test.
    ``within_family``: compared within (concept, family) instead, so that no contrast
    between ways of building a direction (whitening against the diffmean) enters.
    ``families``: which built directions (``variance.BUILT_FAMILIES``; all four by default)."""
    from experiments.identify.estimation.variance import PRACTITIONER, practitioner_rows

    data = practitioner_rows(frame, y, predictor, families or PRACTITIONER)
    if data.empty:
        return wild_cluster_t(np.zeros((0, 1)), np.zeros(0), np.zeros(0))
    groups = _groups(data, "manipulation") if within_family else data["cell"].to_numpy()
    return _fe_slope(
        data, y, predictor, [], groups, n_boot, seed, confidence, wild_cluster_restricted
    )


def identified_analysis(
    frame: pd.DataFrame,
    y: str = "effect",
    *,
    n_boot: int = 1999,
    seed: int = 0,
    spline_df: int = SPLINE_DF,
) -> IdentifiedResult:
    """Everything v2 reports on the pooled directions: the flexible slopes of AUROC and
    probit(AUROC), the v1 model under the same inference, matched pairs, per-family
    slopes and their F test."""
    frame = with_probit(frame)
    if "kl" in frame:  # the dose a direction gives the next token (nats), and its log
        frame = frame.assign(log_kl=log_kl(frame["kl"]))
    kw = _Boot(n_boot=n_boot, seed=seed)
    spline = _BootSpline(n_boot=n_boot, seed=seed, spline_df=spline_df)
    dosed = "log_kl" in frame and frame["log_kl"].notna().any()
    named = "auroc_name_free" in frame and frame["auroc_name_free"].notna().any()
    return IdentifiedResult(
        model=f"(concept, manipulation) fixed effects + cubic spline in cos(v, v*) per "
        f"manipulation ({spline_df} df)",
        flexible={p: flexible_slope(frame, y, p, **spline) for p in ("auroc", "probit_auroc")},
        # beside log next-token KL: the dose held as a covariate
        given_dose={"auroc": flexible_slope(frame, y, "auroc", covariates=["log_kl"], **spline)}
        if dosed
        else {},
        linear_cos={p: linear_cos_slope(frame, y, p, **kw) for p in ("auroc",)},
        matched_pairs={p: matched_pairs(frame, y, p, **kw) for p in ("auroc", "probit_auroc")},
        heterogeneity_given_cos=per_family_slopes(
            frame[frame["manipulation"] != REFERENCE], y, "auroc", **spline
        ),
        iso_cos=iso_cos(frame, y, "auroc", **kw),
        # detection without the name: AUROC on name-free positives
        name_free=NameFreeDetection(
            auroc_name_free=flexible_slope(frame, y, "auroc_name_free", **kw),
            r_auroc=finite(frame[["auroc", "auroc_name_free"]].corr().iloc[0, 1]),
        )
        if named
        else NameFreeDetection(),
        # the dose varied: the effect at each measured strength × β
        by_strength={
            c.removeprefix("effect_at_"): flexible_slope(frame, c, "auroc", **kw)
            for c in frame.columns
            if c.startswith("effect_at_")
        },
    )
