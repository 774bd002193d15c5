"""The Phase 4 classifier record and the Phase 6 calibration study's record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from experiments.config import CalibrationStudyConfig
from experiments.record.base import _Record
from metrics.intervals import Interval

MIXED_METHOD = "MixedLM, random intercept per concept (Wald)"


@dataclass(frozen=True)
class MixedSlope(Interval):
    """effect ~ predictor + (1 | concept) (statsmodels MixedLM): the predictor's slope
    with its 95% Wald interval (``n`` rows, ``n_clusters`` concepts) and p-value."""

    method: str = MIXED_METHOD
    p_value: float | None = None


class CurveLevel(BaseModel):
    """One training size of the curve: the predictor's level and the effect, each with a
    concept-bootstrap interval, and whether the size is effective."""

    size: str
    n_train: int
    level: Interval
    effect: Interval
    verdict: str  # pass: the effect's interval above the study's threshold


class MinimumEffective(BaseModel):
    """The lowest predictor level among effective sizes (``reached``), or ``not_reached``."""

    status: Literal["reached", "not_reached"]
    level: Interval | None = None  # the reached size's level, with its interval
    size: str | None = None
    levels_tested: int | None = None


def _version_1_fit(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 curve fit (slopes, levels and minimum levels as loose numbers) in the
    Intervals version 2 writes."""
    mm = data["mixed_model"]
    if not isinstance(mm, dict) or "evaluable" not in mm:
        return data
    mixed = {"estimate": mm.get("slope"), "low": mm.get("low"), "high": mm.get("high")}
    mixed |= {"n": mm.get("n", 0), "n_clusters": mm.get("n_concepts") or 0}
    mixed |= {"reason": mm.get("reason") or "", "p_value": mm.get("p_value")}
    ends = ("estimate", ""), ("low", "_low"), ("high", "_high")  # a level's, an effect's keys
    levels = [
        {
            "size": row["size"],
            "n_train": row["n_train"],
            "level": {k: row[f"level{s}"] for k, s in ends},
            "effect": {k: row[f"effect{s}"] for k, s in ends},
            "verdict": row["verdict"],
        }
        for row in data["levels"]
    ]
    least = dict(data["minimum_effective"])
    if least.get("status") == "reached":
        least["level"] = {
            "estimate": least["level"],
            "low": least.pop("low"),
            "high": least.pop("high"),
        }
    return {**data, "mixed_model": mixed, "levels": levels, "minimum_effective": least}


class CurveFit(BaseModel):
    """One (sign, layer, direction source, predictor) of the calibration curve."""

    sign: Literal["both", "pos", "neg"]  # both: the effect averaged over s = ±1
    layer: int
    source: str
    predictor: str
    mixed_model: MixedSlope
    levels: list[CurveLevel]
    minimum_effective: MinimumEffective

    @model_validator(mode="before")
    @classmethod
    def _of_version_1(cls, data: Any) -> Any:
        return _version_1_fit(data) if isinstance(data, dict) else data


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
    # 2: slopes, levels and minimum levels are Intervals (version 1: loose numbers)
    version: int = 2
    MIGRATABLE: ClassVar[tuple[int, ...]] = (1,)
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
