"""The v2 estimator's blocks of the identify record (``IdentifiedResult``: the flexible
slopes, matched pairs, iso-cos, per-family slopes, the stratified subset and its declared
outcomes, name-free detection); the record itself is ``record/identify.py``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from experiments.record.base import _Block
from metrics.cluster import ClusterFit
from metrics.intervals import Interval

# The predictors the answer reads by name from the blocks keyed by predictor
# (``identify/estimation/cells.PREDICTORS``): AUROC, and its probit under flexible_cos.
AUROC = "auroc"
PROBIT_AUROC = "probit_auroc"
# The dose of SubsetResult.dose at which each direction's next-token KL is matched.
MATCHED = "matched"


class MatchedPairs(_Block):
    """Δeffect on Δpredictor over pairs of one concept's directions from different
    manipulations at nearly equal cos(v, v*)."""

    tolerance: float
    n_pairs: int
    n_concepts: int
    evaluable: bool
    reason: str | None = None
    fit: ClusterFit | None = None


class SubsetAgreement(BaseModel):
    """An outcome's within-concept r with another on the subset: every direction, good
    ones."""

    all: Interval | None = None
    good: Interval | None = None
    good_n: int = 0  # good cells (cos ≥ 0.7)


class OutcomeSlopes(BaseModel):
    """One declared outcome on the subset (``identify/measures.py``): its flexible slope
    on each detection column it declares, beside log KL where it says so, and its
    agreement with the outcome it should agree with."""

    slopes: dict[str, ClusterFit] = Field(default_factory=dict)  # detection column -> fit
    given_dose: ClusterFit | None = None
    agreement: SubsetAgreement | None = None


class SubsetResult(_Block):
    """The stratified subset (exploratory; ``identify/subset_analysis.subset_outcomes``):
    the flexible AUROC slope at fixed and KL-matched doses, how well the doses matched,
    and each declared outcome's slopes (``identify/measures.py``: name-free, generated)."""

    evaluable: bool | None = None  # False (with ``reason``) when there was no subset
    reason: str | None = None
    concepts: list[str] = Field(default_factory=list)
    likelihood_1x: ClusterFit | None = None
    dose: dict[str, ClusterFit] = Field(default_factory=dict)  # "0.5x", ..., "matched"
    matched_share: float | None = None  # on the prompts the dose was bisected on
    matched_on: str | None = None  # the KL matched on (identify.dose_kl)
    matched_share_verify: float | None = None  # on held-apart prompts
    verify_gap_median: float | None = None
    matched_multiplier: dict[str, float] = Field(default_factory=dict)  # per manipulation
    # each declared outcome (identify/measures.py) by its key: "generated", "name_free"
    outcomes: dict[str, OutcomeSlopes] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _outcomes_of_before(cls, data: Any) -> Any:
        """Records written before the outcomes were declared kept each one's slopes in a
        field of its own (``name_free``; ``generated``, ``generated_given_dose`` and
        ``agreement``): read them as their declared outcomes."""
        if not isinstance(data, dict) or "outcomes" in data:
            return data
        data = dict(data)
        outcomes: dict[str, Any] = {}
        free = data.pop("name_free", None)
        if free:
            outcomes["name_free"] = {"slopes": {k: v for k, v in free.items() if v}}
        generated = data.pop("generated", None)
        given, agreement = data.pop("generated_given_dose", None), data.pop("agreement", None)
        if generated:
            outcomes["generated"] = {
                "slopes": {"auroc": generated},
                "given_dose": given,
                "agreement": agreement,
            }
        if outcomes:
            data["outcomes"] = outcomes
        return data


class IsoCosAngle(_Block):
    """One angle of the iso-cos analysis: the slope within (concept, angle) beside the
    covariates, the bare slope, and AUROC's mean within-concept spread there."""

    n: int = 0  # rows
    slope: ClusterFit | None = None
    without_covariates: ClusterFit | None = None
    auroc_spread: float | None = None


class IsoCos(_Block):
    """AUROC varied at fixed cos(v, v*) (``estimator.iso_cos``): per angle and pooled."""

    evaluable: bool = False
    reason: str | None = None  # why not evaluable
    covariates: list[str] = Field(default_factory=list)
    angles: dict[str, IsoCosAngle] = Field(default_factory=dict)  # angle (degrees, text)
    n_concepts: int | None = None
    pooled: ClusterFit | None = None


class FamilySlopes(_Block):
    """Each manipulation's AUROC slope beside its own spline in cos, and the F-corrected
    CR1 Wald test that the identified ones are equal (``estimator.per_family_slopes``,
    ``metrics.cluster.wald_f``)."""

    evaluable: bool = False
    reason: str | None = None  # why not evaluable
    slopes: dict[str, ClusterFit] = Field(default_factory=dict)  # manipulation -> slope
    not_identified: list[str] = Field(default_factory=list)
    n_concepts: int | None = None
    wald: float | None = None
    df: int | None = None
    F: float | None = None
    df_denominator: int | None = None
    p_value: float | None = None  # F(df, df_denominator)
    p_value_chi2: float | None = None  # χ²(df), beside it
    method: str | None = None


class NameFreeDetection(_Block):
    """The flexible slope on the AUROC of name-free test positives, and that AUROC's r
    with the named one."""

    auroc_name_free: ClusterFit | None = None
    r_auroc: float | None = None


class IdentifiedResult(_Block):
    """The v2 estimator on the pooled directions (issue 36): fixed effects per (concept,
    manipulation) and a spline in cos per manipulation, clustered inference."""

    model: str
    flexible: dict[str, ClusterFit]  # predictor (auroc, probit_auroc) -> its slope
    given_dose: dict[str, ClusterFit] = Field(default_factory=dict)  # beside log KL
    linear_cos: dict[str, ClusterFit]  # v1's model under the same inference
    matched_pairs: dict[str, MatchedPairs]
    heterogeneity_given_cos: FamilySlopes  # per-manipulation slopes, F-corrected Wald
    iso_cos: IsoCos = Field(default_factory=IsoCos)  # per angle and pooled
    by_strength: dict[str, ClusterFit] = Field(default_factory=dict)  # strength -> slope
    # the stratified subset (exploratory): fixed and KL-matched doses, the generated
    # outcome, the outcomes' agreement (subset_analysis.subset_outcomes); empty when off
    subset: SubsetResult = Field(default_factory=SubsetResult)
    # the slope on AUROC over name-free test positives, and its r with the named AUROC
    name_free: NameFreeDetection | None = None
