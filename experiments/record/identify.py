"""The identification study's record, :class:`IdentifyRecord` (``analysis.json``), and
every typed block inside it."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from experiments.config import IdentifyStudyConfig
from experiments.record.base import _Block, _Record
from experiments.record.identified import IdentifiedResult
from metrics.cluster import ClusterFit
from metrics.intervals import Interval
from metrics.reliability import Reliability


class PrimarySpec(BaseModel):
    """The pre-registration's ``primary:`` block, as written and as a run read it
    (``identify/heldout/prereg.py`` checks it: its required keys, ``PRIMARY_KEYS``, and
    the optional ones a version added). Frozen, and dumped with only the keys the block
    gave: it travels from the YAML to the design simulation, the checks and the records,
    which write back what was registered and nothing a default filled in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    predictor: str
    outcome: str
    strength: float | None = None
    control: str | list[str] | None = None
    hypothesis: str = "positive"  # or negative
    rule: str | None = None
    estimand: str | None = None  # v3: the estimand's name (identify/estimation/estimands.py)
    estimator: str | None = None  # linear_cos when none is named
    sesoi: float | None = None  # the smallest effect of interest
    equivalence_margin: float | None = None  # no practical effect inside ±margin
    config_hash: str | None = None
    code_commit: str | None = None
    design_table: str | None = None  # v3 on: the design table the grid passed
    name: str | None = None  # v4: the primary's name (P1)
    reliability_floor: float | None = None
    multiplicity: str | None = None
    alpha: float | None = None  # the family-wise level of the co-primaries (0.05)
    co_primaries: list[dict[str, object]] | None = None

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}

    def label(self, default: str = "P1") -> str:
        """Its name (a co-primary's is always given; the primary's is P1 unless named)."""
        return self.name or default

    @property
    def family_alpha(self) -> float:
        """The family-wise level co-primaries are read at: ``alpha``, 0.05 unless given."""
        return 0.05 if self.alpha is None else self.alpha

    @property
    def controls(self) -> list[str]:
        """``control`` as a list: a single name, a list, or none."""
        return [self.control] if isinstance(self.control, str) else list(self.control or [])

    @property
    def at_strength(self) -> float:
        """The strength the primary is defined at (a required key, checked a number when
        the pre-registration is read)."""
        if self.strength is None:
            raise ValueError("the primary block names no strength")
        return self.strength


# How a primary's interval reads (``identify/estimation/primary.read_verdict``)
PrimaryVerdict = Literal[
    "supported", "contradicted", "no_practical_effect", "inconclusive", "not_evaluable"
]


class PrimaryResult(BaseModel):
    """The pre-registered primary analysis and its verdict."""

    spec: PrimarySpec  # the pre-registration's primary: outcome, predictor, control, ...
    slope: ClusterFit
    correction: Correction | None = None  # a corrected equal-geometry slope's (v3)
    # uninformative: the pool's reading of a primary whose rows miss the reliability floor
    verdict: PrimaryVerdict | Literal["uninformative"]
    estimator: Literal[
        "linear_cos", "flexible_cos", "equal_geometry", "practitioner", "practitioner_full_data"
    ] = Field(
        "linear_cos",
        description="linear_cos: v1 (concept fixed effects, one straight line in cos, concept "
        "bootstrap); flexible_cos: v2 (identify/estimation/estimator.py); equal_geometry: v3 "
        "(random iso-cos nuisances, within (concept, angle, band), bare); practitioner: v3's "
        "primary (the directions people build, one β, within concept, bare); "
        "practitioner_full_data: v4's P2 (as practitioner, without the diffmeans from "
        "fewer texts)",
    )
    manipulations: list[str] | None = Field(
        None,
        description="the manipulations whose directions entered the primary's rows (v* as "
        "'reference'); None in records written before the nulls were left out, whose rows "
        "included rotation:isotropic:90",
    )
    left_out: list[str] | None = Field(
        None,
        description="the null directions left out of the primary's rows: the control draws "
        "(null:*) and rotation:isotropic:90, orthogonal to v*",
    )


class Resources(_Block):
    """What the run cost (``identify/study.peak_memory``); a figure not measured (the
    card's, off CUDA) is left out of the JSON, as the untyped record left it out."""

    wall_seconds: float | None = None
    peak_rss_mib: float | None = None
    peak_gpu_mib: float | None = None  # on CUDA

    @model_serializer(mode="wrap")
    def _measured(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        return {k: v for k, v in handler(self).items() if v is not None}


class Correction(BaseModel):
    """What the errors-in-variables equal-geometry slope corrected for
    (``identify/estimation/corrected.equal_geometry_corrected``)."""

    auroc_reliability: float | None = None  # AUROC's inside the cells (split halves)
    cos_reliability: float | None = None  # cos to the other half's diffmean: 1/2 by design
    uncorrected: float | None = None  # the bare within-cell slope on measured AUROC
    # the share of AUROC's observed within-cell variance that is reliable and beyond the
    # true geometry (corrected.beyond_geometry): near 0, the slope has nothing to use
    beyond_geometry: float | None = None


class EstimandResult(BaseModel):
    """One estimand of ``identify/estimation/estimands.py``: its question and its estimate."""

    question: str
    population: str
    operating_point: str
    status: Literal["estimated", "not_evaluable", "not_measured"]
    reason: str | None = None
    fit: ClusterFit | None = None
    correction: Correction | None = None  # the corrected equal-geometry slope's


def _interval_of_term(term: Any, n_concepts: Any) -> Any:
    """A version-1 ``{estimate, interval: [low, high]}`` term (or ``{r, interval,
    n_concepts}``) as the :class:`Interval` version 2 writes."""
    if not isinstance(term, dict) or "interval" not in term:
        return term
    low, high = [*term["interval"], None, None][:2]
    estimate = term.get("estimate", term.get("r"))
    return {"estimate": estimate, "low": low, "high": high, "n_clusters": n_concepts or 0}


class Mediation(_Block):
    """How much of AUROC's total slope runs through cos(v, v*) (within concepts); each
    term with its concept-bootstrap interval."""

    evaluable: bool
    reason: str | None = None  # why not evaluable
    total_auroc: Interval | None = None  # the effect's slope on AUROC alone
    direct_auroc: Interval | None = None  # AUROC's slope beside cos(v, v*)
    cos_ref: Interval | None = None  # cos(v, v*)'s slope beside AUROC
    share_via_cos: Interval | None = None  # 1 − direct / total
    n_concepts: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _terms_of_version_1(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        terms = ("total_auroc", "direct_auroc", "cos_ref", "share_via_cos")
        n = data.get("n_concepts")
        return {k: _interval_of_term(v, n) if k in terms else v for k, v in data.items()}


class Heterogeneity(_Block):
    """Do the manipulations' AUROC slopes differ? A Wald test on bootstrapped slopes."""

    evaluable: bool
    reason: str | None = None
    controls: list[str] = Field(default_factory=list)  # covariates beside AUROC
    slopes: dict[str, float | None] = Field(default_factory=dict)  # per manipulation
    wald: float | None = None
    df: int | None = None
    p_value: float | None = None
    replicates: int | None = None


class PredictorFit(_Block):
    """A predictor's within-concept correlation with the effect, its reliability and the
    effect's (split halves), and the correlation corrected for both."""

    observed: Interval
    reliability_x: Interval
    reliability_y: Interval
    corrected: Interval


class RubricValidity(_Block):
    """The AxBench rubric as an outcome of identify's directions
    (``identify/estimation/rubric.rubric_validity``, ``RunDir.AXBENCH_IDENTIFY`` in the run
    folder): the rubric's and the likelihood's reliabilities among good directions (cos(v,
    v*) ≥ ``good_cos``), their agreements, and each good direction's means; ``judges`` the
    panel that rated."""

    good_cos: float
    n_texts: int
    n_directions: int
    n_concepts: int
    evaluable: bool
    reason: str | None = None
    reliability_rubric: Interval | None = None
    reliability_likelihood: Interval | None = None
    agreement_likelihood: PredictorFit | None = None
    reliability_generated: Interval | None = None
    agreement_generated: PredictorFit | None = None
    per_direction: list[dict[str, str | int | float]] = Field(default_factory=list)
    judges: list[str] = Field(default_factory=list)

    def stored(self) -> dict[str, object]:
        """The JSON the run folder and the child run keep: the fields the study set."""
        return self.model_dump(mode="json", exclude_unset=True)


class RankRow(_Block):
    """One predictor's pooled within-concept r, and how often it ranks first when
    concepts are resampled."""

    predictor: str
    within_r: float | None = None
    p_first: float | None = None


class MixedFit(_Block):
    """MixedLM with a random intercept (and random slopes where they converged)."""

    evaluable: bool
    reason: str | None = None
    formula: str | None = None
    random: str | None = None
    converged: bool | None = None
    n: int | None = None
    n_concepts: int | None = None
    terms: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    note: str | None = None

    def term(self, name: str) -> Interval | None:
        """One fixed term's estimate and model-based interval (None where it was not
        fitted); its p-value stays in ``terms``."""
        found = self.terms.get(name) if self.evaluable else None
        return Interval.of(found) if found is not None else None


class MinimumLevel(_Block):
    """The lowest AUROC at which the effect reaches ``fraction`` of the prompting
    baseline's (isotonic fit; censored below or not reached), with its censoring-aware
    interval (``identify/estimation/dose.py``)."""

    fraction: float
    status: str  # reached, censored_below, not_reached, or why not evaluable
    target: float | None = None  # fraction × the baseline's mean effect
    baseline_mean: float | None = None
    # the level (censored_below: the lowest AUROC tested) and its interval over concept
    # replicates; an end on a censored replicate is the tested edge (low_open, high_open)
    level: Interval | None = None
    tested: list[float] | None = None  # the AUROC range the level is read on
    replicates: dict[str, float] | None = None  # share of bootstrap replicates per status
    low_open: bool = False
    high_open: bool = False
    note: str | None = None  # why there is no target (a baseline that is not positive)
    reason: str | None = None  # why not evaluable (too few concepts)

    @model_validator(mode="before")
    @classmethod
    def _level_of_version_1(cls, data: Any) -> Any:
        """Version 1 kept ``level``, ``low``, ``high`` and ``method`` as loose values."""
        loose = isinstance(data, dict) and (
            isinstance(data.get("level"), int | float) or {"low", "high", "method"} & data.keys()
        )
        if not loose:
            return data
        data = dict(data)
        ends = {k: data.pop(k, None) for k in ("level", "low", "high", "method")}
        if any(ends[k] is not None for k in ("level", "low", "high")):
            data["level"] = {"estimate": ends["level"], "low": ends["low"],
                             "high": ends["high"], "method": ends["method"] or ""}  # fmt: skip
        return data


class ThresholdPoint(_Block):
    """The point answer (no bootstrap) for one target fraction of the prompting baseline:
    the level of AUROC where the effect reaches it, or why there is none."""

    fraction: float
    target: float
    status: str
    level: float | None = None


class CurveRow(_Block):
    """One level of a manipulation: means over concepts of every predictor and the
    effect, AUROC's and the effect's with a concept-level interval (its ends None with
    fewer than two concepts)."""

    level: float | None = None
    n_concepts: int | None = None
    auroc: Interval | None = None
    effect: Interval | None = None
    # the other predictors' means (identify/estimation/cells.PREDICTORS) and the effect
    # above the null
    ap: float | None = None
    f1_calibrated: float | None = None
    cos_ref: float | None = None
    lens: float | None = None
    kl: float | None = None
    effect_above_null: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _of_version_2(cls, data: Any) -> Any:
        """Version 2 kept the means and the ends as loose numbers (``auroc_low``)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name in ("auroc", "effect"):
            ends = {k: data.pop(f"{name}_{k}", None) for k in ("low", "high")}
            if isinstance(data.get(name), int | float):
                data[name] = {"estimate": data[name], **ends}
        return data


class PartialSlopes(_Block):
    """The effect's slopes on AUROC and cos(v, v*) together, within concepts."""

    auroc: Interval | None = None
    cos_ref: Interval | None = None

    def items(self) -> list[tuple[str, Interval]]:
        """The slopes estimated, by name (a metric's name)."""
        return [
            (k, v) for k, v in (("auroc", self.auroc), ("cos_ref", self.cos_ref)) if v is not None
        ]


class PooledResult(BaseModel):
    """Every manipulation's cells together, within concepts."""

    n_cells: int
    slope_auroc: Interval  # the effect's slope on AUROC alone
    partial: PartialSlopes  # slopes on AUROC and cos(v, v*) together
    mediation: Mediation
    heterogeneity: Heterogeneity  # do the manipulations' AUROC slopes differ (Wald)?
    heterogeneity_given_cos: Heterogeneity  # the same beside cos(v, v*)
    predictors: dict[str, PredictorFit]
    ranking: list[RankRow]


class ManipulationResult(BaseModel):
    """One manipulation of detection quality: its slopes, curve and minimum levels."""

    manipulation: str
    n_cells: int
    n_concepts: int
    slope_auroc: Interval
    partial: PartialSlopes
    mixed: MixedFit
    mediation: Mediation
    predictors: dict[str, PredictorFit]
    ranking: list[RankRow]
    curve: list[CurveRow]
    minimum_effective: list[MinimumLevel]  # per target fraction of the prompting effect
    threshold_curve: list[ThresholdPoint] | None = None  # the level per fraction


class Baseline(BaseModel):
    """The prompting baseline's likelihood effect (nats/token): mean and per concept."""

    mean: float | None
    per_concept: dict[str, float]
    interval: Interval | None = None  # the mean over concepts, concepts resampled


class GeneratedCheck(_Block):
    """The likelihood outcome against generated texts (``identify/estimation/crosscheck.py``): their
    r over cells and within concepts (observed, both reliabilities, disattenuated), at v*
    across concepts, and the generation arms' mean effects."""

    evaluable: bool = False
    reason: str | None = None  # why not evaluable
    n_cells: int | None = None
    pooled_r: Interval | None = None
    within: PredictorFit | None = None
    between_at_reference: Interval | None = None
    generation_null: Interval | None = None
    generation_prompt: Interval | None = None
    generation_reference: Interval | None = None
    per_direction: list[dict[str, float | str]] = Field(default_factory=list)


class BetweenConcepts(_Block):
    """Across concepts at v*: r(AUROC, effect), observed and disattenuated
    (``identify/estimation/analysis.between_concepts``, ``metrics.reliability``)."""

    evaluable: bool = False
    reason: str | None = None  # why not evaluable
    observed: Interval | None = None
    corrected: Interval | None = None
    reliability_x: Reliability | None = None
    reliability_y: Reliability | None = None
    dropped_replicates: int | None = None
    # the across-concept r with its Fisher-z interval (a check beside the bootstrap)
    fisher_z: Interval | None = None

    @model_validator(mode="before")
    @classmethod
    def _fisher_z_of_version_1(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("fisher_z"), dict):
            return data
        fz = data["fisher_z"]
        return {**data, "fisher_z": _interval_of_term(fz, fz.get("n_concepts"))}


class Phase6Fit(_Block):
    """One (layer, source, predictor, sign) of a Phase 6 curve re-analysed: the within and
    between-concept terms of a mixed model beside log n, and the within-concept slope."""

    layer: int
    source: str
    predictor: str
    sign: str
    mixed: MixedFit
    within_slope_given_log_n: Interval | None = None


class Phase6Reanalysis(_Block):
    """A Phase 6 run's training curve re-scored and re-analysed
    (``identify/estimation/phase6.py``)."""

    run: str
    run_dir: str | None = None
    fits: list[Phase6Fit] = Field(default_factory=list)


class IdentifyRecord(_Record):
    """What an identification study measured (``analysis.json`` of its folder)."""

    format: Literal["steer-eval/phase6-identify"] = "steer-eval/phase6-identify"
    # 2: mediation terms and the Fisher-z check are Intervals (version 1: [low, high]);
    # 3: a curve row's AUROC and effect are Intervals (version 2: loose ends)
    version: int = 3
    MIGRATABLE: ClassVar[tuple[int, ...]] = (1, 2)
    config: IdentifyStudyConfig
    layer: int
    alpha: float = Field(description="the median residual norm at the layer")
    betas: dict[str, float] = Field(description="v*'s held-out β per concept")
    concept_set: Literal["development", "heldout", "listed"]
    label: str = Field(description="exploratory, confirmatory, or forced re-scoring")
    preregistration: dict[str, object] | None = None
    outcome: str = Field(description="what the effect is, in words and units")
    manipulations: dict[str, ManipulationResult]
    pooled: PooledResult
    baseline: Baseline
    primary: PrimaryResult | None = None
    estimands: dict[str, EstimandResult] = Field(
        default_factory=dict,
        description="every estimand by name, each a stated question (absent before v3)",
    )
    outcome_reliability: dict[str, Interval] = Field(
        default_factory=dict,
        description="split-half reliabilities of the outcome and AUROC where the estimands "
        "compare directions (absent before v3)",
    )
    identified: IdentifiedResult | None = Field(
        None, description="the v2 estimator (absent from runs before it)"
    )
    between_concepts: BetweenConcepts = Field(default_factory=BetweenConcepts)
    validation: GeneratedCheck = Field(
        default_factory=GeneratedCheck,
        description="the likelihood outcome against generated texts",
    )
    phase6: Phase6Reanalysis | None = Field(None, description="a Phase 6 run re-analysed")
    resources: Resources = Field(default_factory=Resources)
