"""The identification analysis: does detection predict steering when it alone is varied?

For every manipulation (each rotation family, label noise, the logistic C path, the
shrinkage path, the training size):

* the **slope** of the effect on AUROC within concepts (concept fixed effects;
  concept-bootstrap interval), beside a statsmodels MixedLM with a random intercept and
  slope per concept (for size: ``effect ~ x_within + x_between + log n_train``);
* the **partial slope** holding cos(direction, v*) fixed, and the **mediation** view:
  the total AUROC slope, the direct one beside cos, and the share of the total that
  cos carries (1 − direct/total), all from the same concept draws;
* every predictor's within-concept correlation with the effect, its split-half
  reliability and the disattenuated value;
* the **curve** (means over concepts per level) and the **minimum effective AUROC**
  (``dose.py``).

Pooled over all manipulated directions: the same slopes, the **heterogeneity** of the
AUROC slope across manipulations (a Wald test with the bootstrap covariance), the
**predictor ranking** (within-concept r, disattenuated r, and how often each predictor
ranks first across concept draws), the between-concept correlation at v*, and the
pre-registered **primary analysis** (``primary.py``), on the manipulated directions less
every null (``rotation:isotropic:90``, orthogonal to v*, as well as the control draws; the
record lists the manipulations that entered it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from experiments.identify.estimation import stats
from experiments.identify.estimation.cells import PREDICTORS, StudyTables
from experiments.identify.estimation.dose import minimum_effective, threshold_curve
from experiments.identify.estimation.estimands import estimate_all
from experiments.identify.estimation.estimator import identified_analysis
from experiments.identify.estimation.primary import OUTCOME, primary_result
from experiments.identify.estimation.stats import within_reliability
from experiments.identify.stages import manipulations
from experiments.identify.stages.directions import REFERENCE
from experiments.record import (
    Baseline,
    BetweenConcepts,
    CurveRow,
    EstimandResult,
    Heterogeneity,
    IdentifiedResult,
    ManipulationResult,
    Mediation,
    PooledResult,
    PredictorFit,
    PrimaryResult,
    PrimarySpec,
    RankRow,
)
from experiments.record.identify import PartialSlopes
from experiments.rows import finite
from experiments.rows import number as real
from metrics.intervals import Interval, hierarchical_mean
from metrics.stats import fisher_z_interval

if TYPE_CHECKING:
    from experiments.identify.stages.detect import Detection


def curve_table(frame: pd.DataFrame, n_boot: int, seed: int) -> list[CurveRow]:
    """Per level: means over concepts of every predictor and of the effect (with a
    concept-level interval for AUROC and the effect)."""
    out = []
    for level, group in frame.groupby("level", sort=True):
        means = {
            column: float(group[column].mean()) if group[column].notna().any() else None
            for column in (*PREDICTORS, OUTCOME, "effect_above_null")
        }
        row: dict[str, object] = {
            "level": real(level),
            "n_concepts": int(group["concept"].nunique()),
            **means,
        }
        for column in ("auroc", OUTCOME):
            units = {c: g[column].dropna().to_numpy() for c, g in group.groupby("concept")}
            units = {c: u for c, u in units.items() if len(u)}
            mean = means[column]  # the mean over rows, as before
            if len(units) >= 2:
                ci = hierarchical_mean(units, n_boot=n_boot, seed=seed)
                row[column] = Interval(mean, ci.low, ci.high, ci.n, ci.n_clusters, ci.method)
            elif mean is not None:
                row[column] = Interval(mean)
        out.append(CurveRow.model_validate(row))
    return out


def mediation(frame: pd.DataFrame, n_boot: int, seed: int, confidence: float = 0.95) -> Mediation:
    """Total AUROC slope, direct slope beside cos(v, v*), cos's slope, and the share of
    the total carried by cos, from one set of concept draws."""
    total_p = stats.cross_products(frame, ["auroc", OUTCOME])
    both_p = stats.cross_products(frame, ["auroc", "cos_ref", OUTCOME])
    concepts = sorted(set(total_p) & set(both_p))
    if len(concepts) < 2:
        return Mediation(evaluable=False, reason=f"{len(concepts)} concepts")
    total_p = {c: total_p[c] for c in concepts}
    both_p = {c: both_p[c] for c in concepts}
    draws = stats.concept_draws(len(concepts), n_boot, seed)
    whole = np.arange(len(concepts))[None]
    total = stats.replicate_coefficients(total_p, 1, whole)[0, 0]
    direct, cos = stats.replicate_coefficients(both_p, 2, whole)[0]
    t_reps = stats.replicate_coefficients(total_p, 1, draws)[:, 0]
    d_reps = stats.replicate_coefficients(both_p, 2, draws)
    alpha = (1 - confidence) / 2

    method = f"concept bootstrap ({n_boot} replicates)"

    def interval(estimate: float | None, values: np.ndarray) -> Interval:
        values = values[np.isfinite(values)]
        if len(values) < n_boot // 2:
            return Interval(estimate, None, None, 0, len(concepts), method, "too few replicates")
        low, high = (float(v) for v in np.quantile(values, [alpha, 1 - alpha]))
        return Interval(estimate, low, high, 0, len(concepts), method)

    with np.errstate(invalid="ignore", divide="ignore"):
        share_reps = 1 - d_reps[:, 0] / t_reps
        share = 1 - direct / total if total else np.nan
    return Mediation(
        evaluable=True,
        total_auroc=interval(float(total), t_reps),
        direct_auroc=interval(float(direct), d_reps[:, 0]),
        cos_ref=interval(float(cos), d_reps[:, 1]),
        share_via_cos=interval(float(share) if np.isfinite(share) else None, share_reps),
        n_concepts=len(concepts),
    )


GOOD_COS = 0.7  # "good directions": cos(v, v*) at least this (the outcomes' validation rows)


def _cell_halves(tables: StudyTables, measure: str, rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """``measure``'s halves keyed by equal-geometry cell (concept|angle|band)."""
    out: dict[str, np.ndarray] = {}
    for cell, group in rows.groupby("cell", sort=True):
        found = tables.halves_for(measure, group)
        if found:
            (halves,) = found.values()
            out[str(cell)] = halves
    return out


def outcome_reliability(
    tables: StudyTables, pooled: pd.DataFrame, n_boot: int, seed: int
) -> dict[str, Interval]:
    """How reliably the likelihood outcome (and AUROC) tell directions apart where the
    estimands compare them: split-half (texts; test texts for AUROC), Spearman–Brown,
    within concepts among good directions (cos(v, v*) ≥ :data:`GOOD_COS`), among the
    directions people build (the primary's rows), and within the equal-geometry cells
    (keyed and resampled by cell). A reliability near 0 means the
    measure cannot rank those directions, whatever its slope says. With the likelihood
    measured at both signs (``identify.strengths`` holding 1 and −1): each sign's
    reliability and their within-concept r, observed and disattenuated (a direction that
    pulls toward the concept harder should push away harder: r near −1)."""
    from experiments.identify.estimation.variance import equal_geometry_rows, practitioner_rows

    def reliability(measure: str, rows: pd.DataFrame) -> Interval:
        return within_reliability(tables.halves_for(measure, rows), n_boot=n_boot, seed=seed)

    good = pooled[pooled["cos_ref"] >= GOOD_COS]
    signs = [c for c in ("effect_at_1", "effect_at_-1") if c in good and tables.halves.get(c)]
    # the likelihood, AUROC, and the likelihood at each sign of the strength
    out = {f"{m}_good_directions": reliability(m, good) for m in (OUTCOME, "auroc", *signs)}
    if len(signs) == 2:  # toward and away from the concept: do they rank directions alike?
        both = good.dropna(subset=signs)
        agree = stats.disattenuated_within(
            both, "effect_at_1", "effect_at_-1",
            tables.halves_for("effect_at_1", both), tables.halves_for("effect_at_-1", both),
            n_boot=n_boot, seed=seed,
        )  # fmt: skip
        out["sign_agreement_r_good_directions"] = agree.observed
        out["sign_agreement_r_disattenuated_good_directions"] = agree.corrected
    built = practitioner_rows(pooled, OUTCOME)
    if built["manipulation"].nunique() > 1:  # where the practitioner's estimand compares
        for measure in (OUTCOME, "auroc"):
            out[f"{measure}_practitioner_directions"] = reliability(measure, built)
    cells = equal_geometry_rows(pooled, OUTCOME)
    if not cells.empty:
        for measure in (OUTCOME, "auroc"):
            out[f"{measure}_equal_geometry_cells"] = within_reliability(
                _cell_halves(tables, measure, cells), n_boot=n_boot, seed=seed
            )
    return out


def predictor_table(
    tables: StudyTables, frame: pd.DataFrame, n_boot: int, seed: int
) -> dict[str, PredictorFit]:
    """Per predictor: within-concept r with the effect, reliabilities, disattenuated r."""
    y_halves = tables.halves_for(OUTCOME, frame)
    out = {}
    for p in PREDICTORS:
        if frame[p].isna().all():
            continue
        x_halves = (None if p == "cos_ref" else tables.halves_for(p, frame)) or None
        out[p] = stats.disattenuated_within(
            frame, p, OUTCOME, x_halves, y_halves, n_boot=n_boot, seed=seed
        )
    return out


def ranking(frame: pd.DataFrame, n_boot: int, seed: int) -> list[RankRow]:
    """Predictors ordered by |within-concept r| with the effect; ``p_first`` is the share
    of concept draws in which each has the largest |r|."""
    present = [p for p in PREDICTORS if frame[p].notna().any()]
    products = {p: stats.cross_products(frame, [p, OUTCOME]) for p in present}
    concepts = sorted(set.intersection(*(set(v) for v in products.values()))) if present else []
    if len(concepts) < 2:
        return []
    draws = stats.concept_draws(len(concepts), n_boot, seed)
    reps, estimates = [], {}
    for p in present:
        stack = np.stack([products[p][c] for c in concepts])
        estimates[p] = float(stats._r_from(stack.sum(axis=0)))
        reps.append(np.abs(stats._r_from(stack[draws].sum(axis=1))))
    reps_arr = np.nan_to_num(np.stack(reps, axis=1), nan=-1.0)
    first = np.bincount(reps_arr.argmax(axis=1), minlength=len(present)) / len(draws)
    rows = [
        RankRow(predictor=p, within_r=finite(estimates[p]), p_first=float(first[i]))
        for i, p in enumerate(present)
    ]
    return sorted(rows, key=lambda r: -abs(estimates[r.predictor]))


def heterogeneity(tables: StudyTables, xs: list[str], n_boot: int, seed: int) -> Heterogeneity:
    """Per-manipulation FE slopes of the effect on AUROC (beside ``xs[1:]``) from shared
    concept draws, and the Wald test that they are all equal."""
    curves = {m: tables.curve(m) for m in tables.manipulations()}
    products = {m: stats.cross_products(f, [*xs, OUTCOME]) for m, f in curves.items()}
    products = {m: p for m, p in products.items() if len(p) >= 2}
    if len(products) < 2:
        return Heterogeneity(evaluable=False, reason="fewer than 2 manipulations")
    concepts = sorted(set.intersection(*(set(p) for p in products.values())))
    draws = stats.concept_draws(len(concepts), n_boot, seed)
    whole = np.arange(len(concepts))[None]
    names = sorted(products)
    est, reps = [], []
    for m in names:
        sub = {c: products[m][c] for c in concepts}
        est.append(stats.replicate_coefficients(sub, len(xs), whole)[0, 0])
        reps.append(stats.replicate_coefficients(sub, len(xs), draws)[:, 0])
    test = stats.wald_equal(np.array(est), np.stack(reps, axis=1))
    slopes = {m: finite(e) for m, e in zip(names, est, strict=True)}
    return test.model_copy(update={"controls": xs[1:], "slopes": slopes})


def analyse_manipulation(
    tables: StudyTables,
    m: str,
    baseline: dict[str, float],
    targets: list[float],
    n_boot: int,
    seed: int,
) -> ManipulationResult:
    frame = tables.curve(m)
    fe = stats.fe_coefficients(frame, OUTCOME, ["auroc"], n_boot=n_boot, seed=seed)
    partial = stats.fe_coefficients(frame, OUTCOME, ["auroc", "cos_ref"], n_boot=n_boot, seed=seed)
    family = manipulations.family(m)
    if family is not None and family.log_level_covariate:
        mixed = stats.within_between(frame.assign(log_n=np.log(frame["level"])), OUTCOME, "auroc")
    else:
        mixed = stats.mixed_model(frame, f"{OUTCOME} ~ auroc", "~auroc", ["auroc"])
    return ManipulationResult(
        manipulation=m,
        n_cells=len(frame),
        n_concepts=int(frame["concept"].nunique()),
        slope_auroc=fe["auroc"],
        partial=PartialSlopes(**partial),
        mixed=mixed,
        mediation=mediation(frame, n_boot, seed),
        predictors=predictor_table(tables, frame, n_boot, seed),
        ranking=ranking(frame, n_boot, seed),
        curve=curve_table(frame, n_boot, seed),
        minimum_effective=[
            minimum_effective(frame, baseline, t, n_boot=min(n_boot, 1000), seed=seed)
            for t in targets
        ],
        threshold_curve=threshold_curve(frame, baseline),
    )


def between_concepts(
    tables: StudyTables,
    test_labels: dict[str, np.ndarray],
    detections: dict[tuple[str, str], Detection],
    effects: dict[tuple[str, str], np.ndarray],
    n_boot: int,
    seed: int,
) -> BetweenConcepts:
    """Across concepts, at v*: AUROC (units: test texts) against the effect (units:
    pairs), observed and disattenuated (metrics.reliability), with the observed r's
    Fisher-z interval beside the bootstrap."""
    from experiments.identify.stages.detect import auroc_rows
    from metrics.reliability import disattenuated_correlation

    concepts = sorted(
        c for c in test_labels if (c, REFERENCE) in detections and (c, REFERENCE) in effects
    )
    if len(concepts) < 4:
        return BetweenConcepts(reason=f"{len(concepts)} concepts")
    x = {
        c: np.stack([detections[(c, REFERENCE)].scores, test_labels[c]], axis=-1) for c in concepts
    }
    y = {c: np.asarray(effects[(c, REFERENCE)]) for c in concepts}
    result = disattenuated_correlation(
        x,
        y,
        x_aggregate=lambda units: auroc_rows(units[..., 0], units[..., 1]),
        x_strata={c: list(test_labels[c]) for c in concepts},
        n_boot=n_boot,
        seed=seed,
    )
    r, n = result.observed.estimate, len(concepts)
    low, high = (
        fisher_z_interval(r, n) if r is not None and np.isfinite(r) and abs(r) < 1 else (None, None)
    )
    return BetweenConcepts(
        evaluable=True,
        observed=result.observed,
        corrected=result.corrected,
        reliability_x=result.reliability_x,
        reliability_y=result.reliability_y,
        dropped_replicates=result.dropped_replicates,
        fisher_z=Interval(r, low, high, 0, n, "Fisher z over concepts"),
    )


def pooled_result(
    tables: StudyTables, pooled: pd.DataFrame, n_boot: int, seed: int
) -> PooledResult:
    """Every manipulation's cells together, within concepts: the slopes, the mediation
    through cos(v, v*), whether the manipulations' slopes differ, the predictors."""
    fe = stats.fe_coefficients(pooled, OUTCOME, ["auroc", "cos_ref"], n_boot=n_boot, seed=seed)
    alone = stats.fe_coefficients(pooled, OUTCOME, ["auroc"], n_boot=n_boot, seed=seed)
    return PooledResult(
        n_cells=len(pooled),
        slope_auroc=alone["auroc"],
        partial=PartialSlopes(**fe),
        mediation=mediation(pooled, n_boot, seed),
        heterogeneity=heterogeneity(tables, ["auroc"], n_boot, seed),
        heterogeneity_given_cos=heterogeneity(tables, ["auroc", "cos_ref"], n_boot, seed),
        predictors=predictor_table(tables, pooled, n_boot, seed),
        ranking=ranking(pooled, n_boot, seed),
    )


@dataclass(frozen=True)
class Analysis:
    """What :func:`analyse` estimates: the record's fields of the same names."""

    manipulations: dict[str, ManipulationResult]
    pooled: PooledResult
    baseline: Baseline
    identified: IdentifiedResult
    estimands: dict[str, EstimandResult]
    outcome_reliability: dict[str, Interval]
    primary: PrimaryResult | None
    outcome: str = "likelihood effect e = s·(C_s − C_0), nats per token"


def analyse(
    tables: StudyTables,
    baseline: dict[str, float],
    targets: list[float],
    primary: PrimarySpec | None,
    n_boot: int,
    seed: int,
) -> Analysis:
    """Everything above, each block typed as the record keeps it."""
    pooled = tables.pooled()
    return Analysis(
        manipulations={
            m: analyse_manipulation(tables, m, baseline, targets, n_boot, seed)
            for m in tables.manipulations()
        },
        pooled=pooled_result(tables, pooled, n_boot, seed),
        baseline=Baseline(
            mean=float(np.mean(list(baseline.values()))) if baseline else None,
            per_concept=baseline,
        ),
        identified=identified_analysis(pooled, OUTCOME, n_boot=n_boot, seed=seed),
        estimands=estimate_all(pooled, n_boot, seed),
        outcome_reliability=outcome_reliability(tables, pooled, n_boot, seed),
        primary=primary_result(tables, primary, n_boot, seed) if primary else None,
    )
