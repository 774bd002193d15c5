"""The versioned run record: the typed contract between a run and everything after it.

A finished Phase 5 run writes one :class:`RunRecord` (``steering_results.json`` in its
run folder and as an MLflow artefact). Human validation, the judge panel, rescoring and
the calibration study read runs through it, never through MLflow parameter strings.
``version`` changes whenever a field changes meaning; an older or newer record fails
with a message instead of being half-read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from experiments.config import Phase5Config
from metrics.criteria import CriterionResult

RECORD_FORMAT = "steer-eval/phase5-run"
# 1: the untyped steering_results.json of the first release; 2: typed; 3: predictors keyed
# f1_raw / f1_calibrated / auroc / ap (no bare f1) and effect statistics; 4: concept-level
# intervals, the specificity criteria, reliabilities and corrected correlations, the
# likelihood outcome and Δ's reference gap (statistics["measurement"]), the probes' test
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
        return CriterionResult(**self.model_dump())  # type: ignore[arg-type]


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
    statistics: dict[str, dict] = Field(
        default_factory=dict, description="correlations and other figures behind criteria"
    )
    diagnostics: dict[str, object] = Field(
        default_factory=dict,
        description="'directions': cosine matrix of the steering directions, their cosines "
        "with the format axis and each probe's cosine with its diffmean",
    )
    detection: dict[str, dict[str, object]] = Field(
        default_factory=dict,
        description="per concept: the probe's test-split decisions (test_scores, "
        "test_labels) and calibrated threshold, for the predictor's reliability",
    )
    n_generations: int = 0
    timings: dict[str, float] = Field(default_factory=dict)
    tokens_per_second: float = 0.0

    @classmethod
    def parse(cls, text: str, source: str = "run record", migrate: bool = False) -> RunRecord:
        """Read a record of this version; with ``migrate`` (rescore) also the typed
        version 2, whose fields are a subset read the same way (its predictors may carry
        a bare ``f1``, which :meth:`predictor` maps to ``f1_raw``)."""
        import json

        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RecordError(f"{source} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
            raise RecordError(
                f"{source} is not a {RECORD_FORMAT} record (a run from an older release?); "
                f"rescore it with `steer-eval rescore <run id>`"
            )
        if migrate and data.get("version") in MIGRATABLE:
            data["version"] = RECORD_VERSION
        if data.get("version") != RECORD_VERSION:
            raise RecordError(
                f"{source} is record version {data.get('version')}, this release reads "
                f"version {RECORD_VERSION}; rescore it with `steer-eval rescore <run id>`"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise RecordError(f"{source} does not match the run record schema: {exc}") from exc

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
