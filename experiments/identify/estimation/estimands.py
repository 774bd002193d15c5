"""The estimands of identify, each a stated question (docs/identify.md, "The estimands").

Every estimate the study reports answers one of these questions about one population of
directions at one operating point, and is reported under its name everywhere (record,
answer, summary, findings). Declared once here, like ``rows.Measure``: the question, the
rows it uses and the estimator that answers it. One is pre-registered as the primary
(its block's ``estimand`` names it).

All slopes are in nats/token of the likelihood outcome per unit of test AUROC, with a
95% interval over concepts (the unit of replication): the wild cluster bootstrap, or
for the corrected equal-geometry slope a concept bootstrap (``corrected.CORRECTED``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from experiments.identify.estimation.corrected import as_recorded
from experiments.identify.estimation.estimator import (
    equal_geometry,
    flexible_slope,
    iso_cos,
    log_kl,
    practitioner_slope,
)
from experiments.identify.estimation.variance import FULL_DATA, PRACTITIONER
from experiments.identify.measures import LIKELIHOOD
from experiments.record.identify import EstimandResult
from metrics.cluster import ClusterFit

Y = LIKELIHOOD.column  # every estimand is a slope of the declared likelihood outcome
Fit = Callable[[pd.DataFrame, int, int], ClusterFit | None]


@dataclass(frozen=True)
class Estimand:
    """One question: its name, the question in words, the directions and operating point
    it is about, and how it is estimated from the pooled directions table."""

    name: str
    question: str
    population: str
    operating_point: str
    fit: Fit | None  # None: not measured by this study yet (said, not guessed)
    why_not: str = ""


# The directions people build beside v*: without them, no AUROC spread to rank.
BUILT = PRACTITIONER[1:]


def _slope(among: tuple[str, ...], estimate: Callable[..., ClusterFit], **options: object) -> Fit:
    """The fit of an estimand: ``estimate`` of the likelihood on AUROC with ``options``;
    None where the run has no directions of the manipulations ``among`` (when named)."""

    def fit(frame: pd.DataFrame, n_boot: int, seed: int) -> ClusterFit | None:
        if among and not frame["manipulation"].isin(among).any():
            return None
        return estimate(frame, Y, "auroc", n_boot=n_boot, seed=seed, **options)

    return fit


def _nonadditive(frame: pd.DataFrame, n_boot: int, seed: int) -> ClusterFit | None:
    """iso-cos beside the nuisance alone (90°) and the dose: v2's pooled reading."""
    if not (frame["manipulation"] == "isocos").any():
        return None
    iso = iso_cos(frame, Y, "auroc", n_boot=n_boot, seed=seed)
    return iso.pooled if iso.evaluable else None


def _dose_adjusted(frame: pd.DataFrame, n_boot: int, seed: int) -> ClusterFit | None:
    if "kl" not in frame or frame["kl"].isna().all():
        return None
    with_dose = frame.assign(log_kl=log_kl(frame["kl"]))
    return flexible_slope(with_dose, Y, "auroc", covariates=["log_kl"], n_boot=n_boot, seed=seed)


ESTIMANDS: tuple[Estimand, ...] = (
    Estimand(
        "practitioner_equal_norm",
        "Among the directions people build for a concept, all at one β, do the ones that "
        "detect better (AUROC on held-out texts) steer the concept better?",
        "v* (the diffmean), the logistic C path, the shrinkage (whitened) path and the "
        "diffmean from fewer training texts (variance.PRACTITIONER)",
        "one β per concept (v*'s held-out strength), compared within concept; geometry "
        "not held fixed: how far a built direction lies from v* is part of why it "
        "detects as it does",
        _slope(BUILT, practitioner_slope),
    ),
    Estimand(
        "practitioner_full_data",
        "Among the directions people build for a concept from its full training set, all "
        "at one β, do the ones that detect better steer the concept better? The primary "
        "without the diffmeans from fewer texts, whose estimation noise makes them detect "
        "and steer worse together (identify v4's co-primary P2).",
        "v*, the logistic C path and the shrinkage (whitened) path (variance.FULL_DATA)",
        "one β per concept (v*'s held-out strength), compared within concept; geometry "
        "not held fixed",
        _slope(BUILT, practitioner_slope, families=FULL_DATA),
    ),
    Estimand(
        "practitioner_within_family",
        "Within one way of building a direction (the logistic C path, the shrinkage path, "
        "the diffmean from fewer texts), all at one β, do the variants that detect better "
        "steer the concept better? The primary without the contrasts between families.",
        "as practitioner_equal_norm",
        "one β per concept; compared within (concept, family)",
        _slope(BUILT, practitioner_slope, within_family=True),
    ),
    Estimand(
        "equal_geometry",
        "At equal geometry, does a direction that detects better steer better?",
        "v* mixed at one angle (30°, 45°, 60°) with nuisances drawn at random per concept "
        "(identify.isocos_draw: random; graded nuisances in v2 runs)",
        "one β per concept (v*'s held-out strength), compared within (concept, angle, "
        "spectrum band): cos(v, v*) equal by construction; no covariate beyond, where v* "
        "comes from half the training templates (identify.reference_halves), the cosine "
        "to the other half's diffmean, both it and AUROC corrected for measurement error",
        _slope(("isocos",), equal_geometry),
    ),
    Estimand(
        "equal_geometry_uncorrected",
        "As equal_geometry, with AUROC and the geometry taken as measured: the same question "
        "answered without the errors-in-variables correction (AUROC's measurement error "
        "pulls it toward 0; the reference's own error can push it either way). Shown "
        "beside the corrected slope; the same number in a run without the reference's "
        "second half (identify.reference_halves), where no correction is possible.",
        "as equal_geometry",
        "as equal_geometry; cos(v, v*) equal by construction, AUROC as measured",
        _slope(("isocos",), equal_geometry, corrected=False),
    ),
    Estimand(
        "equal_geometry_nonadditive",
        "At equal geometry, does AUROC predict what the mixture does beyond the sum of v* "
        "and the nuisance steered alone (at the same dose)?",
        "the iso-cos directions, beside each nuisance steered alone (90°)",
        "one β per concept; the nuisance's own effect and log next-token KL held fixed",
        _nonadditive,
    ),
    Estimand(
        "equal_norm",
        "Among the directions the manipulations make around v*, at the same β and the "
        "same cos(v, v*), does AUROC predict steering?",
        "every manipulated direction (rotations, label noise, logistic C path, shrinkage, "
        "training sizes, iso-cos), nulls excluded",
        "one β per concept; (concept, manipulation) fixed effects and a spline in cos "
        "per manipulation",
        _slope((), flexible_slope),
    ),
    Estimand(
        "equal_norm_cos_per_concept",
        "As equal_norm, robust to concepts whose steering rises with cos at their own rate "
        "(steerability tied to separability): a robustness row for equal_norm.",
        "as equal_norm",
        "as equal_norm, and each (concept, manipulation) its own straight line in cos",
        _slope((), flexible_slope, cos_per_group=True),
    ),
    Estimand(
        "equal_norm_dose_adjusted",
        "As equal_norm, holding the dose (log next-token KL) fixed by regression: v2's "
        "primary. The KL measures part of the outcome (mass moved onto the concept's "
        "tokens) and follows from the direction, so this mixes a direct effect with an "
        "adjustment for a consequence; reported for comparison with v2 only.",
        "as equal_norm",
        "one β per concept; log KL after 4 neutral prompts as a covariate",
        _dose_adjusted,
    ),
    Estimand(
        "equal_dose",
        "At equal dose set by design, does a direction that detects better steer better?",
        "the stratified subset's directions, each at the β whose next-token KL matches v*'s",
        "KL matched by design (identify.subset_concepts); reported in the subset section",
        None,
        "measured on the subset only (identify/subset.py); matched on the KL without the "
        "concept's tokens and verified on held-apart prompts where identify.dose_kl and "
        "identify.dose_verify say so (v3), else checked on the prompts that set it (v2)",
    ),
    Estimand(
        "practitioner",
        "Among directions people build (diffmean, logistic, whitened, several training "
        "sizes), each at its own coherence-matched β, does AUROC rank their steering?",
        "diffmean, logistic, shrinkage and size directions",
        "each direction at its own coherence-matched β",
        None,
        "needs a strength sweep per direction; not built yet",
    ),
)


def estimate_all(frame: pd.DataFrame, n_boot: int, seed: int) -> dict[str, EstimandResult]:
    """Every estimand on the pooled directions table: its question, population, operating
    point and fit (``status``: estimated, not_evaluable with the reason, or not_measured
    with why)."""
    out: dict[str, EstimandResult] = {}
    for e in ESTIMANDS:
        words = {"question": e.question, "population": e.population,
                 "operating_point": e.operating_point}  # fmt: skip
        if e.fit is None:
            out[e.name] = EstimandResult(**words, status="not_measured", reason=e.why_not)
            continue
        found = e.fit(frame, n_boot, seed)
        # the corrected slope's reliabilities, even when refused
        fit, correction = as_recorded(found) if found is not None else (None, None)
        if fit is None or not fit.evaluable:
            reason = fit.reason if fit is not None else "the run has no rows for it"
            out[e.name] = EstimandResult(
                **words, status="not_evaluable", reason=reason, correction=correction
            )
        else:
            out[e.name] = EstimandResult(
                **words, status="estimated", fit=fit, correction=correction
            )
    return out
