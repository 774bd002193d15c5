"""The versioned run record: the typed contract between a run and everything after it.

A finished Phase 5 run writes one :class:`RunRecord` (``steering_results.json`` in its
run folder and as an MLflow artefact). Human validation, the judge panel, rescoring and
the calibration study read runs through it, never through MLflow parameter strings.
``version`` changes whenever a field changes meaning; an older or newer record fails
with a message instead of being half-read.

It is longer than 500 lines because every phase's record (Phase 5, the calibration
study, identify) and every typed block inside them live here, documented field by
field: one module is the one place a reader looks up what a record holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from experiments.config import CalibrationStudyConfig, IdentifyStudyConfig, Phase5Config
from metrics.cluster import ClusterFit
from metrics.criteria import CriterionResult
from metrics.intervals import Interval
from metrics.reliability import Reliability

RECORD_FORMAT: Final = "steer-eval/phase5-run"
# 1: the untyped steering_results.json of the first release; 2: typed; 3: predictors keyed
# f1_raw / f1_calibrated / auroc / ap (no bare f1) and effect statistics; 4: concept-level
# intervals, the specificity criteria, reliabilities and corrected correlations, the
# likelihood outcome and Δ's reference gap (statistics.measurement), the probes' test
# decisions (detection).
RECORD_VERSION = 4
MIGRATABLE = (2, 3)  # versions a rescore can read and rewrite at RECORD_VERSION


class RecordError(ValueError):
    """A run record is unreadable, of another format, or of an unsupported version."""


class CriterionRecord(BaseModel):
    """One criterion's verdict as stored; mirrors :class:`metrics.criteria.CriterionResult`."""

    model_config = ConfigDict(extra="forbid")

    key: str
    description: str
    status: str
    value: float | None
    threshold: float
    reason: str

    @classmethod
    def of(cls, result: CriterionResult) -> CriterionRecord:
        return cls(**result.to_dict())

    def result(self) -> CriterionResult:
        return CriterionResult(**self.model_dump())


# A leaf of a statistics block as written: a flag, a number (an int stays an int, a
# float a float, so a record reads and writes back byte for byte), a reason, or none.
Figure = bool | int | float | str | None


def figure_number(value: Figure) -> float | None:
    """A number of a statistics block as it is (an int or a float), else None (a
    missing or not evaluable one, or a leaf that is no number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


class RunStatistics(BaseModel):
    """The figures behind the criteria (``RunRecord.statistics``), the keys
    ``phase5/publish.build_record`` writes. An older record (version 2 has only
    ``f1_vs_magnitude``) reads with the others empty; ``measurement`` is left out of the
    JSON when the run measured none, as the untyped record left it out."""

    model_config = ConfigDict(extra="forbid")

    f1_vs_magnitude: dict[str, Figure] = Field(
        default_factory=dict,
        description="the seed design's criterion 3: the correlation over concepts of the "
        "classifier's F1 with the steering magnitude (metrics.criteria.CorrelationResult "
        "as a dict: evaluable, method, r, p_value, ci_low, ci_high, n, reason, ...)",
    )
    effect: dict[str, dict[str, Figure]] = Field(
        default_factory=dict,
        description="per arm and sign ('concept/pos', 'random/neg', 'prompt/pos', "
        "'above_null/pos', 'above_null_other_concepts/neg', ...): the signed effect's "
        "means and intervals, n, gate and direction fractions (kernel/effect.py)",
    )
    intervals: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="per v2 criterion key: its concept-level interval "
        "(metrics.intervals.Interval as a dict: estimate, low, high, n, n_clusters, "
        "method, reason; a correlation's also its Spearman interval, a dict)",
    )
    slopes: dict[str, float | None] = Field(
        default_factory=dict,
        description="per concept: the OLS slope of Δ on strength (concept arm), when more "
        "than 3 strengths ran (kernel/effect.slopes)",
    )
    measurement: dict[str, Any] | None = Field(
        default=None,
        description="phase5/measurement.MeasurementReport.statistics: reliability, "
        "corrected_correlations and, when measured, likelihood, "
        "likelihood_vs_effect_by_direction, reference_gap",
    )

    @model_serializer(mode="wrap")
    def _written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.measurement is None:
            data.pop("measurement", None)
        return data


class LayerRow(BaseModel):
    """One candidate layer of a ``--layer`` rule: what the rule read there."""

    model_config = ConfigDict(extra="forbid")

    auroc: float | None = Field(
        None, description="the probes' mean test AUROC at the layer (what `auto` ranks by)"
    )
    beta: float | None = Field(
        None, description="auto-effect: the β steered with there (the run's own choose_beta)"
    )
    effect: float | None = Field(
        None,
        description="auto-effect: the gated effect above random directions on the selection "
        "prompts, both signs pooled (what `auto-effect` ranks by, with low and high)",
    )
    low: float | None = Field(None, description="the effect's interval over concepts: low")
    high: float | None = Field(None, description="the effect's interval over concepts: high")
    effect_pos: float | None = Field(None, description="the effect at s > 0 alone")
    effect_neg: float | None = Field(None, description="the effect at s < 0 alone")
    texts: int | None = Field(None, description="auto-effect: the texts generated there")
    gate_pass: float | None = Field(
        None, description="auto-effect: the share of the concept arm's steered texts passing"
    )
    reason: str = Field("", description="why the effect is not evaluable there ('' if it is)")


class LayerChoice(BaseModel):
    """How ``--layer auto`` or ``--layer auto-effect`` chose the run's layer."""

    model_config = ConfigDict(extra="forbid")

    rule: Literal["auto", "auto-effect"]
    optimises: str = Field(description="what the rule maximises, in words")
    layer: int = Field(description="the layer it chose")
    layers: dict[str, LayerRow] = Field(description="per candidate layer (as text)")
    seconds: float = Field(0.0, description="what choosing took: probes, texts, scoring")


class RunRecord(BaseModel):
    """What a finished run measured, with the config that produced it."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["steer-eval/phase5-run"] = RECORD_FORMAT
    version: int = RECORD_VERSION
    run_id: str
    experiment: str
    # A Phase 5 config; an older record's config (every phase's sections, no ``phase:``)
    # is read in that layout (RunConfig._old_layout), so old runs still rescore.
    config: Phase5Config
    model_id: str
    layer: int
    alpha: float
    beta: float
    classifier_run_id: str | None = None
    classifier_dir: str | None = None
    predictors: dict[str, dict[str, float | None]] = Field(
        default_factory=dict,
        description="per concept: the classifier's held-out metrics (auroc, ap, f1_raw, "
        "f1_calibrated, ...)",
    )
    per_strength: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    per_concept: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    criteria: dict[str, CriterionRecord] = Field(default_factory=dict)
    statistics: RunStatistics = Field(
        default_factory=RunStatistics,
        description="correlations and other figures behind criteria",
    )
    diagnostics: dict[str, object] = Field(
        default_factory=dict,
        description="'directions': cosine matrix of the steering directions, their cosines "
        "with the format axis and each probe's cosine with its diffmean; 'imported_vectors' "
        "(vector_source: file): what reading the file said, e.g. the layer taken from a "
        "file of several and how many were ignored",
    )
    detection: dict[str, dict[str, object]] = Field(
        default_factory=dict,
        description="per concept: the probe's test-split decisions (test_scores, "
        "test_labels) and calibrated threshold, for the predictor's reliability",
    )
    n_generations: int = 0
    timings: dict[str, float] = Field(default_factory=dict)
    tokens_per_second: float = 0.0
    layer_choice: LayerChoice | None = Field(
        None,
        description="the rule that chose the layer (`--layer auto`: probe AUROC, "
        "`auto-effect`: measured effect) and its per-layer table; None: the layer was given",
    )

    @classmethod
    def parse(cls, text: str, source: str = "run record", migrate: bool = False) -> RunRecord:
        """Read a record of this version; with ``migrate`` (rescore) also the typed
        version 2, whose fields are a subset read the same way (its predictors may carry
        a bare ``f1``, which :meth:`predictor` maps to ``f1_raw``)."""
        return read_record(
            cls,
            text,
            source,
            migratable=MIGRATABLE if migrate else (),
            fix="; rescore it with `steer-eval rescore <run id>`",
        )

    def criterion(self, key: str) -> CriterionResult | None:
        stored = self.criteria.get(key)
        return stored.result() if stored is not None else None

    def set_criterion(self, result: CriterionResult) -> None:
        self.criteria[result.key] = CriterionRecord.of(result)

    def predictor(self, name: str | None = None) -> dict[str, float]:
        """Per-concept classifier quality that criterion 3 correlates with steering:
        ``name`` or the run's ``criteria.predictor`` (F1 at a calibrated threshold)."""
        return predictor_values(self.predictors, name or self.config.criteria.predictor)


R = TypeVar("R", bound=BaseModel)


def read_record(
    cls: type[R],
    text: str,
    source: str,
    migratable: tuple[int, ...] = (),
    fix: str = "",
) -> R:
    """Any phase's record from its JSON: of ``cls``'s format and version (or one of
    ``migratable``, read as this version), else a :class:`RecordError` naming what was
    found, then ``fix``."""
    import json

    fmt = cls.model_fields["format"].default
    version = cls.model_fields["version"].default
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"{source} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise RecordError(f"{source} is not a {fmt} record (a run from an older release?){fix}")
    if data.get("version") in migratable:
        data["version"] = version
    if data.get("version") != version:
        raise RecordError(
            f"{source} is {fmt} version {data.get('version')}, this release reads version "
            f"{version}{fix}"
        )
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise RecordError(f"{source} does not match the {fmt} schema: {exc}") from exc


def predictor_values(
    predictors: Mapping[str, Mapping[str, float | None]], name: str
) -> dict[str, float]:
    """One predictor's value per concept, leaving out concepts that lack it.

    Records written before the predictors were split hold only ``f1`` (at decision > 0),
    which is what ``f1_raw`` now names, so ``f1_raw`` falls back to it.
    """
    out = {}
    for concept, values in predictors.items():
        value = values.get(name)
        if value is None and name == "f1_raw":
            value = values.get("f1")
        if value is not None:
            out[concept] = float(value)
    return out


def plain(value: object) -> object:
    """A stage output as JSON's own types (numpy scalars and arrays, tuples; a non-finite
    float as None, which is what the JSON file holds), so a record built from it equals
    the one read back."""
    import math

    import numpy as np

    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    return value


class _Record(BaseModel):
    """A phase's record: ``format`` and ``version`` first; every field documented."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    experiment: str = Field(description="the MLflow experiment of the parent run")
    model_id: str
    timings: dict[str, float] = Field(default_factory=dict, description="seconds per stage")

    @classmethod
    def parse(cls, text: str, source: str = "record") -> Self:
        """Read a record of this format and version, or fail naming what was found."""
        return read_record(cls, text, source)


class MixedSlope(BaseModel):
    """effect ~ predictor + (1 | concept) (statsmodels MixedLM): the predictor's slope."""

    evaluable: bool
    slope: float | None = None
    low: float | None = None  # 95% Wald interval
    high: float | None = None
    p_value: float | None = None
    n: int = 0  # rows (probe set × concept)
    n_concepts: int | None = None
    reason: str | None = None  # why not evaluable


class CurveLevel(BaseModel):
    """One training size of the curve: the predictor's level and the effect, each with a
    concept-bootstrap interval, and whether the size is effective."""

    size: str
    n_train: int
    level: float | None
    level_low: float | None
    level_high: float | None
    effect: float | None
    effect_low: float | None
    effect_high: float | None
    verdict: str  # pass: the effect's interval above the study's threshold


class MinimumEffective(BaseModel):
    """The lowest predictor level among effective sizes (``reached``), or ``not_reached``."""

    status: Literal["reached", "not_reached"]
    level: float | None = None
    low: float | None = None
    high: float | None = None
    size: str | None = None
    levels_tested: int | None = None


class CurveFit(BaseModel):
    """One (sign, layer, direction source, predictor) of the calibration curve."""

    sign: Literal["both", "pos", "neg"]  # both: the effect averaged over s = ±1
    layer: int
    source: str
    predictor: str
    mixed_model: MixedSlope
    levels: list[CurveLevel]
    minimum_effective: MinimumEffective


class LayerProbes(BaseModel):
    """One layer's probe set: where it is kept and its mean test metrics."""

    model_config = ConfigDict(extra="forbid")

    directory: str = Field(description="the classifier folder later runs load it from")
    mean: dict[str, float] = Field(description="mean test metric over the concepts")


class ClassifierRecord(_Record):
    """What a Phase 4 run trained (``classifiers.json`` of its folder)."""

    format: Literal["steer-eval/phase4-classifiers"] = "steer-eval/phase4-classifiers"
    version: int = 1
    recipe: str = Field(description="the probe recipe (a new one is never mixed with old sets)")
    train: str = Field(description="the training set size, positives x negatives x neutral")
    seed: int
    config_hash: str
    concepts: list[str]
    layers: dict[str, LayerProbes] = Field(description="per decoder layer (as text)")
    best_layer: int | None = Field(description="the layer of highest mean AUROC, if several")
    seconds: float = Field(description="the one model pass and the fits, every layer")


class CalibrationRecord(_Record):
    """What a Phase 6 calibration study measured (``analysis.json`` of its folder)."""

    format: Literal["steer-eval/phase6-calibration"] = "steer-eval/phase6-calibration"
    version: int = 1
    config: CalibrationStudyConfig
    layers: list[int] = Field(description="the decoder layers probed and steered")
    threshold: float = Field(description="a size is effective when its effect's interval is above")
    main_predictor: str | None = Field(
        description="the first configured predictor that was measured: the answer's"
    )
    predictors: dict[str, dict[str, dict[str, float | None]]] = Field(
        description="per probe set (tag), per concept: its detection metrics"
    )
    results: list[CurveFit] = Field(description="both signs first, then each sign alone")


class PrimaryResult(BaseModel):
    """The pre-registered primary analysis and its verdict."""

    spec: dict[str, object]  # the pre-registration's primary: outcome, predictor, control, ...
    slope: ClusterFit
    correction: Correction | None = None  # a corrected equal-geometry slope's (v3)
    verdict: Literal[
        "supported", "contradicted", "no_practical_effect", "inconclusive", "not_evaluable"
    ]
    estimator: Literal["linear_cos", "flexible_cos", "equal_geometry", "practitioner"] = Field(
        "linear_cos",
        description="linear_cos: v1 (concept fixed effects, one straight line in cos, concept "
        "bootstrap); flexible_cos: v2 (identify/estimator.py); equal_geometry: v3 (random "
        "iso-cos nuisances, within (concept, angle, band), bare); practitioner: v3's "
        "primary (the directions people build, one β, within concept, bare)",
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


class Correction(BaseModel):
    """What the errors-in-variables equal-geometry slope corrected for
    (``identify/corrected.equal_geometry_corrected``)."""

    auroc_reliability: float | None = None  # AUROC's inside the cells (split halves)
    cos_reliability: float | None = None  # cos to the other half's diffmean: 1/2 by design
    uncorrected: float | None = None  # the bare within-cell slope on measured AUROC
    # the share of AUROC's observed within-cell variance that is reliable and beyond the
    # true geometry (corrected.beyond_geometry): near 0, the slope has nothing to use
    beyond_geometry: float | None = None


class EstimandResult(BaseModel):
    """One estimand of ``identify/estimands.py``: its question and its estimate."""

    question: str
    population: str
    operating_point: str
    status: Literal["estimated", "not_evaluable", "not_measured"]
    reason: str | None = None
    fit: ClusterFit | None = None
    correction: Correction | None = None  # the corrected equal-geometry slope's


class MatchedPairs(BaseModel):
    """Δeffect on Δpredictor over pairs of one concept's directions from different
    manipulations at nearly equal cos(v, v*)."""

    model_config = ConfigDict(extra="allow")

    tolerance: float
    n_pairs: int
    n_concepts: int
    evaluable: bool
    reason: str | None = None
    fit: ClusterFit | None = None


class _Open(BaseModel):
    """An analysis block typed where it is read; keys a later analysis adds are kept
    (a finished study must never fail at its last step on a new diagnostic)."""

    model_config = ConfigDict(extra="allow")


class NameFreeSlopes(BaseModel):
    """The subset's slope of the name-free likelihood outcome on the named AUROC and on
    the name-free AUROC."""

    auroc: ClusterFit | None = None
    auroc_name_free: ClusterFit | None = None


class SubsetAgreement(BaseModel):
    """The two outcomes' within-concept r on the subset: every direction, good ones."""

    all: Interval | None = None
    good: Interval | None = None
    good_n: int = 0  # good cells (cos ≥ 0.7)


class SubsetResult(_Open):
    """The stratified subset (exploratory; ``identify/subset_analysis.subset_outcomes``):
    the flexible AUROC slope at fixed and KL-matched doses, on name-free texts and on the
    generated outcome, how well the doses matched, and the outcomes' agreement."""

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
    name_free: NameFreeSlopes | None = None
    generated: ClusterFit | None = None
    generated_given_dose: ClusterFit | None = None
    agreement: SubsetAgreement | None = None


class IsoCosAngle(_Open):
    """One angle of the iso-cos analysis: the slope within (concept, angle) beside the
    covariates, the bare slope, and AUROC's mean within-concept spread there."""

    n: int = 0  # rows
    slope: ClusterFit | None = None
    without_covariates: ClusterFit | None = None
    auroc_spread: float | None = None


class IsoCos(_Open):
    """AUROC varied at fixed cos(v, v*) (``estimator.iso_cos``): per angle and pooled."""

    evaluable: bool = False
    reason: str | None = None  # why not evaluable
    covariates: list[str] = Field(default_factory=list)
    angles: dict[str, IsoCosAngle] = Field(default_factory=dict)  # angle (degrees, text)
    n_concepts: int | None = None
    pooled: ClusterFit | None = None


class FamilySlopes(_Open):
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


class NameFreeDetection(_Open):
    """The flexible slope on the AUROC of name-free test positives, and that AUROC's r
    with the named one."""

    auroc_name_free: ClusterFit | None = None
    r_auroc: float | None = None


class IdentifiedResult(BaseModel):
    """The v2 estimator on the pooled directions (issue 36): fixed effects per (concept,
    manipulation) and a spline in cos per manipulation, clustered inference."""

    model_config = ConfigDict(extra="allow")

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


class MediationTerm(_Open):
    estimate: float | None = None
    interval: list[float | None] = Field(default_factory=list)  # [low, high]


class Mediation(_Open):
    """How much of AUROC's total slope runs through cos(v, v*) (within concepts)."""

    evaluable: bool
    reason: str | None = None  # why not evaluable
    total_auroc: MediationTerm | None = None  # the effect's slope on AUROC alone
    direct_auroc: MediationTerm | None = None  # AUROC's slope beside cos(v, v*)
    cos_ref: MediationTerm | None = None  # cos(v, v*)'s slope beside AUROC
    share_via_cos: MediationTerm | None = None  # 1 − direct / total
    n_concepts: int | None = None


class Heterogeneity(_Open):
    """Do the manipulations' AUROC slopes differ? A Wald test on bootstrapped slopes."""

    evaluable: bool
    reason: str | None = None
    controls: list[str] = Field(default_factory=list)  # covariates beside AUROC
    slopes: dict[str, float | None] = Field(default_factory=dict)  # per manipulation
    wald: float | None = None
    df: int | None = None
    p_value: float | None = None
    replicates: int | None = None


class PredictorFit(_Open):
    """A predictor's within-concept correlation with the effect, its reliability and the
    effect's (split halves), and the correlation corrected for both."""

    observed: Interval
    reliability_x: Interval
    reliability_y: Interval
    corrected: Interval


class RankRow(_Open):
    """One predictor's pooled within-concept r, and how often it ranks first when
    concepts are resampled."""

    predictor: str
    within_r: float | None = None
    p_first: float | None = None


class MixedFit(_Open):
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


class MinimumLevel(_Open):
    """The lowest AUROC at which the effect reaches ``fraction`` of the prompting
    baseline's (isotonic fit; censored below or not reached)."""

    fraction: float
    status: str  # reached, censored_below, not_reached, or why not evaluable
    target: float | None = None  # fraction × the baseline's mean effect
    baseline_mean: float | None = None
    level: float | None = None
    low: float | None = None
    high: float | None = None
    tested: list[float] | None = None  # the AUROC range the level is read on
    replicates: dict[str, float] | None = None  # share of bootstrap replicates per status
    # an interval end on a censored replicate: at or below the lowest AUROC tested (low),
    # above the highest (high); the end is then that edge, not a measured level
    low_open: bool = False
    high_open: bool = False


class CurveRow(_Open):
    """One level of a manipulation: means over concepts of every predictor and the
    effect (AUROC with a concept-level interval)."""

    level: float | None = None
    n_concepts: int | None = None
    auroc: float | None = None
    effect: float | None = None


class PooledResult(BaseModel):
    """Every manipulation's cells together, within concepts."""

    n_cells: int
    slope_auroc: Interval  # the effect's slope on AUROC alone
    partial: dict[str, Interval]  # slopes on AUROC and cos(v, v*) together
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
    partial: dict[str, Interval]
    mixed: MixedFit
    mediation: Mediation
    predictors: dict[str, PredictorFit]
    ranking: list[RankRow]
    curve: list[CurveRow]
    minimum_effective: list[MinimumLevel]  # per target fraction of the prompting effect
    threshold_curve: list[dict[str, object]] | None = None  # the level per fraction


class Baseline(BaseModel):
    """The prompting baseline's likelihood effect (nats/token): mean and per concept."""

    mean: float | None
    per_concept: dict[str, float]
    interval: Interval | None = None  # the mean over concepts, concepts resampled


class GeneratedCheck(_Open):
    """The likelihood outcome against generated texts (``identify/crosscheck.py``): their
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


class FisherZ(BaseModel):
    """The across-concept r with its Fisher-z interval (a check beside the bootstrap)."""

    r: float | None = None
    interval: list[float | None] = Field(default_factory=list)  # [low, high]
    n_concepts: int = 0


class BetweenConcepts(_Open):
    """Across concepts at v*: r(AUROC, effect), observed and disattenuated
    (``identify/analysis.between_concepts``, ``metrics.reliability``)."""

    evaluable: bool = False
    reason: str | None = None  # why not evaluable
    observed: Interval | None = None
    corrected: Interval | None = None
    reliability_x: Reliability | None = None
    reliability_y: Reliability | None = None
    dropped_replicates: int | None = None
    fisher_z: FisherZ | None = None


class IdentifyRecord(_Record):
    """What an identification study measured (``analysis.json`` of its folder)."""

    format: Literal["steer-eval/phase6-identify"] = "steer-eval/phase6-identify"
    version: int = 1
    config: IdentifyStudyConfig
    layer: int
    alpha: float = Field(description="the median residual norm at the layer")
    betas: dict[str, float] = Field(description="v*'s held-out β per concept")
    concept_set: Literal["development", "heldout"]
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
    phase6: dict[str, object] | None = Field(None, description="a Phase 6 run re-analysed")
    resources: dict[str, float] = Field(default_factory=dict)
