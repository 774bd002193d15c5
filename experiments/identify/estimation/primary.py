"""The pre-registered primary on a directions table and its reading.

:func:`primary_result` fits the estimator a pre-registration names on the rows the
primary reads (:meth:`StudyTables.primary_rows`: every null left out) and
:func:`read_verdict` reads its interval by the pre-registered rule; a run scores it
(``analysis.analyse``), the pool scores it once on the pooled shards
(``heldout/shards.py``) and the design simulation scores it on every toy
(``simulation/design.py``).
"""

from __future__ import annotations

import pandas as pd

from experiments.identify.estimation import stats
from experiments.identify.estimation.cells import StudyTables, null_rows
from experiments.identify.estimation.corrected import as_recorded
from experiments.identify.estimation.estimator import (
    equal_geometry,
    flexible_slope,
    log_kl,
    practitioner_slope,
    with_probit,
)
from experiments.identify.estimation.variance import BUILT_FAMILIES
from experiments.identify.measures import LIKELIHOOD, OUTCOMES
from experiments.record import PrimaryResult, PrimarySpec, PrimaryVerdict
from metrics.cluster import ClusterFit
from metrics.intervals import Bootstrap, Interval

OUTCOME = LIKELIHOOD.column  # the likelihood outcome's directions-table column


def primary_result(
    tables: StudyTables, primary: PrimarySpec, n_boot: int, seed: int, confidence: float = 0.95
) -> PrimaryResult:
    """The pre-registered analysis and its verdict. ``estimator: linear_cos`` (v1, the
    default of a pre-registration that names none): the pooled within-concept slope of
    the outcome on the predictor beside the control, concept-bootstrap interval;
    ``flexible_cos`` (v2, ``estimator.py``): (concept, manipulation) fixed effects and a
    spline in cos per manipulation, the control's other covariates beside, wild cluster
    bootstrap-t interval; ``equal_geometry`` and ``practitioner`` (v3, the estimands of
    the same names). Its rows are :meth:`StudyTables.primary_rows` (every null left
    out, ``rotation:isotropic:90`` included); the result names the manipulations that
    entered (``manipulations``, v* as ``reference``) and the nulls left out (``left_out``)."""
    rows = tables.primary_rows()
    frame = with_probit(rows)
    predictor, y = primary.predictor, OUTCOMES[primary.outcome].column
    estimator = primary.estimator or "linear_cos"
    controls = [c for c in primary.controls if c and c != "none"]
    boot = Bootstrap(n_boot=n_boot, seed=seed, confidence=confidence)
    found: Interval
    if estimator == "equal_geometry":  # v3: iso-cos, random nuisances, bare
        found = equal_geometry(frame, y, predictor, **boot)
    elif estimator in BUILT_FAMILIES:  # v3, v4: the directions people build, one β, bare
        found = practitioner_slope(frame, y, predictor, families=BUILT_FAMILIES[estimator], **boot)
    elif estimator == "flexible_cos":
        covariates = [c for c in controls if c != "cos_ref"]
        if "log_kl" in covariates:  # the dose: log next-token KL at the direction's β
            frame = frame.assign(log_kl=log_kl(frame["kl"]))
        found = flexible_slope(frame, y, predictor, covariates=covariates, **boot)
    else:
        found = stats.fe_coefficients(frame, y, [predictor, *controls], **boot)[predictor]
    if not isinstance(found, ClusterFit):  # v1's concept-bootstrap interval
        found = ClusterFit.of(found.to_dict())
    fit, correction = as_recorded(found)
    return PrimaryResult(
        spec=primary,
        slope=fit,
        **({"correction": correction} if correction else {}),
        verdict=read_verdict(fit, primary.hypothesis, primary.equivalence_margin),
        estimator=estimator,
        manipulations=_entered(estimator, rows),
        left_out=_left_out(tables.directions),
    )


def _entered(estimator: str, rows: pd.DataFrame) -> list[str]:
    """The manipulations the primary's estimator compares."""
    present = sorted(str(m) for m in rows["manipulation"].unique())
    if estimator == "equal_geometry":  # the equal-geometry cells only (below 90°)
        return ["isocos"]
    if estimator in BUILT_FAMILIES:
        return [m for m in present if m in BUILT_FAMILIES[estimator]]
    return present


def _left_out(directions: pd.DataFrame) -> list[str]:
    """The null directions (ids; manipulations where a table has no ids) the primary
    leaves out."""
    null = directions[null_rows(directions)]
    column = "direction" if "direction" in null else "manipulation"
    return sorted(str(d) for d in null[column].unique())


def read_verdict(fit: Interval, hypothesis: str, margin: float | None = None) -> PrimaryVerdict:
    """The pre-registered reading of one interval: ``no_practical_effect`` when a margin
    is registered and the whole interval lies inside ±margin (two one-sided tests at the
    interval's level: with a 95% interval, each at 2.5%, stricter than the usual 90%
    TOST); else ``supported`` when it excludes 0 on the hypothesised side,
    ``contradicted`` on the other, ``inconclusive`` otherwise."""
    ends = fit.ends()
    if ends is None:
        return "not_evaluable"
    _, low, high = ends
    if margin is not None and -margin < low and high < margin:
        return "no_practical_effect"
    above, below = low > 0, high < 0
    if above or below:
        return "supported" if above == (hypothesis == "positive") else "contradicted"
    return "inconclusive"
