"""Phase 5's record, :class:`RunRecord` (``steering_results.json``), and what it holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from experiments.config import Phase5Config
from experiments.record.base import _Block, read_record
from experiments.record.measurement import Measurement
from metrics.criteria import CriterionResult
from metrics.intervals import Interval

RECORD_FORMAT: Final = "steer-eval/phase5-run"
# 1: the untyped steering_results.json of the first release; 2: typed; 3: predictors keyed
# f1_raw / f1_calibrated / auroc / ap (no bare f1) and effect statistics; 4: concept-level
# intervals, the specificity criteria, reliabilities and corrected correlations, the
# likelihood outcome and Δ's reference gap (statistics.measurement), the probes' test
# decisions (detection); 5: the effect summaries typed, each outcome an Interval
# (statistics.effect) and the effect above the nulls apart (statistics.above_null); the
# measurement block typed (record/measurement.py).
RECORD_VERSION = 5
READABLE = (4,)  # versions every reader reads as this one (their blocks migrate)
MIGRATABLE = (2, 3)  # versions a rescore can read and rewrite at RECORD_VERSION


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
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


@dataclass(frozen=True)
class CriterionInterval(Interval):
    """A v2 criterion's interval (``kernel/effect.py``); a correlation's carries its
    Spearman interval beside it (left out of the JSON where there is none)."""

    spearman: Interval | None = None


NO_INTERVAL: Final = CriterionInterval()  # what a criterion without one reads


class ArmEffect(_Block):
    """One arm and sign's steered texts (``statistics.effect['concept/pos']``): each
    outcome's mean with its concept-level interval (``kernel/outcomes.py``)."""

    n: int = Field(description="steered texts paired with their unsteered twin")
    outcomes: dict[str, Interval] = Field(description="per registered outcome (e, e_gated, ...)")
    gate_pass_fraction: float | None = Field(description="the share passing the gate")
    direction_fraction: float | None = Field(
        description="the share whose gated effect is positive (None when every text was gated)"
    )
    gated_reason: str = Field("", description="why gated outcomes are not evaluable, if so")


class NullEffect(_Block):
    """The concept arm's effect above a null at one sign (``statistics.above_null``:
    'above_null/pos' against random directions, 'above_null_other_concepts/pos' against
    the other concepts' directions, which has no gated effect)."""

    n: int = Field(description="units (concept, prompt, sample) paired with the null")
    gated: Interval | None = Field(description="the gated effect above the null")
    ungated: Interval = Field(description="the ungated effect above the null")


def _interval_of(row: Mapping[str, object], prefix: str, reason: str = "") -> dict[str, object]:
    """A version-4 summary's ``<prefix>_mean``/``_low``/``_high`` as an Interval's fields."""
    ends = ("estimate", "mean"), ("low", "low"), ("high", "high")
    return {k: row.get(f"{prefix}_{suffix}") for k, suffix in ends} | {"reason": reason}


def _version_4_effect(data: dict[str, Any]) -> dict[str, Any]:
    """A version-4 ``statistics.effect`` (one dict of loose numbers per arm/sign and per
    null, keyed ``e_mean``, ``gated_low``, ...) as version 5 types it."""
    effect, arms, nulls = data.get("effect") or {}, {}, {}
    if "above_null" in data or not all(
        isinstance(v, dict) and "outcomes" not in v for v in effect.values()
    ):
        return data
    for name, row in effect.items():
        reason, n = str(row.get("gated_reason") or ""), int(row.get("n") or 0)
        if name.startswith("above_null"):
            other = name.startswith("above_null_other")  # no gated effect above that null
            gated = None if other else _interval_of(row, "gated", reason)
            nulls[name] = {"n": n, "gated": gated, "ungated": _interval_of(row, "ungated")}
            continue
        arms[name] = {
            "n": n,
            "outcomes": {
                o: _interval_of(row, o, reason if o == "e_gated" else "")
                for o in ("e", "e_gated", "combined")
            },
            "gate_pass_fraction": row.get("gate_pass_fraction"),
            "direction_fraction": row.get("direction_fraction"),
            "gated_reason": reason,
        }
    return {**data, "effect": arms, "above_null": nulls}


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
    effect: dict[str, ArmEffect] = Field(
        default_factory=dict,
        description="per arm and sign ('concept/pos', 'random/neg', 'prompt/pos'): each "
        "outcome's mean and interval, n, gate and direction fractions (kernel/effect.py)",
    )
    above_null: dict[str, NullEffect] = Field(
        default_factory=dict,
        description="per null and sign ('above_null/pos', 'above_null_other_concepts/neg'): "
        "the concept arm's effect above it, gated and ungated",
    )
    intervals: dict[str, CriterionInterval] = Field(
        default_factory=dict,
        description="per v2 criterion key: its concept-level interval (estimate, low, "
        "high, n, n_clusters, method, reason; a correlation's also its Spearman interval)",
    )
    slopes: dict[str, float | None] = Field(
        default_factory=dict,
        description="per concept: the OLS slope of Δ on strength (concept arm), when more "
        "than 3 strengths ran (kernel/effect.slopes)",
    )
    measurement: Measurement | None = Field(
        default=None,
        description="phase5/measurement.py: reliabilities, corrected correlations and, when "
        "measured, the likelihood outcome and Δ's reference gap (record/measurement.py)",
    )

    @model_validator(mode="before")
    @classmethod
    def _of_version_4(cls, data: Any) -> Any:
        return _version_4_effect(data) if isinstance(data, dict) else data

    @model_serializer(mode="wrap")
    def _written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.measurement is None:
            data.pop("measurement", None)
        for interval in data.get("intervals", {}).values():
            if isinstance(interval, dict) and interval.get("spearman", True) is None:
                del interval["spearman"]
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
    effect: Interval | None = Field(
        None,
        description="auto-effect: the gated effect above random directions on the selection "
        "prompts, both signs pooled, with its interval over concepts (`auto-effect` ranks "
        "by its low end), or why it is not evaluable there",
    )
    effect_pos: float | None = Field(None, description="the effect at s > 0 alone")
    effect_neg: float | None = Field(None, description="the effect at s < 0 alone")
    texts: int | None = Field(None, description="auto-effect: the texts generated there")
    gate_pass: float | None = Field(
        None, description="auto-effect: the share of the concept arm's steered texts passing"
    )

    @model_validator(mode="before")
    @classmethod
    def _of_version_4(cls, data: Any) -> Any:
        """Version 4 kept the effect's estimate, ends and reason as loose fields."""
        if not isinstance(data, dict) or ("low" not in data and "reason" not in data):
            return data
        data = dict(data)
        ends = {k: data.pop(k, None) for k in ("low", "high")}
        reason = data.pop("reason", "") or ""
        if data.get("effect") is not None or reason:
            data["effect"] = {"estimate": data.get("effect"), **ends, "reason": reason}
        return data

    @property
    def low(self) -> float | None:
        """The effect's low end (what auto-effect ranks by); None when not evaluable."""
        return self.effect.low if self.effect is not None else None


class LayerChoice(BaseModel):
    """How ``--layer auto`` or ``--layer auto-effect`` chose the run's layer."""

    model_config = ConfigDict(extra="forbid")

    rule: Literal["auto", "auto-effect"]
    optimises: str = Field(description="what the rule maximises, in words")
    layer: int = Field(description="the layer it chose")
    layers: dict[str, LayerRow] = Field(description="per candidate layer (as text)")
    seconds: float = Field(0.0, description="what choosing took: probes, texts, scoring")


class SteeredIntervention(_Block):
    """A vector file steered as deployed (``steering.layers``, ``scale: file``), as the
    record's ``diagnostics.intervention`` keeps it (``kernel/vectors.Intervention``)."""

    layer: int  # the run's layer, where α is measured
    layers: list[int]  # every layer steered in one pass
    scale: str  # file: the file's own vectors × coefficient; else normalised at β·α_l
    coefficient: float | None = None
    beta: float | None = None
    alphas: dict[str, float] = Field(default_factory=dict)  # layer -> median residual norm
    norms: dict[str, dict[str, float]] = Field(default_factory=dict)  # concept -> layer -> ‖v‖
    betas: dict[str, dict[str, float]] = Field(default_factory=dict)  # what each amounts to
    adds: str = ""  # what the hooks add, in words


def steered_intervention(diagnostics: Mapping[str, object]) -> SteeredIntervention | None:
    """The intervention a run steered with, read typed from its diagnostics; None for one
    layer at α·β."""
    found = diagnostics.get("intervention")
    return SteeredIntervention.model_validate(found) if isinstance(found, dict) else None


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
        "file of several and how many were ignored; 'intervention' (steering.layers or "
        "scale file): the layers steered, scale, coefficient, each layer's α, the file's "
        "norms and the β each layer amounts to (kernel/vectors.Intervention)",
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
            migratable=READABLE + (MIGRATABLE if migrate else ()),
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
