"""The Phase 4 classifier record and the Phase 6 calibration study's record."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from experiments.config import CalibrationStudyConfig
from experiments.record.base import _Record


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
