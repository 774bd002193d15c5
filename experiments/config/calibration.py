"""Phase 6's calibration study (``steer-eval calibrate``): its own section,
:class:`CalibrationConfig`, and its top model."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from experiments.config.base import EXCLUDE, HashRule, Seed, _check_train_size, _Strict
from experiments.config.common import RunConfig


class CalibrationConfig(_Strict):
    """Phase 6: probes along a training curve, their detection quality and their steering."""

    sizes: list[str] = Field(
        # The largest size is the train template pool (16): 20x20x20 would repeat texts.
        default_factory=lambda: ["1x1x1", "2x2x2", "5x5x5", "10x10x10", "16x16x16"],
        min_length=1,
    )
    sources: list[str] = Field(default_factory=lambda: ["classifier", "diffmean"], min_length=1)
    probe_seeds: list[Seed] = Field(default_factory=lambda: [0, 1], min_length=1)
    layers: list[int] | None = Field(None, description="null = the steering layer only")
    predictors: list[str] = Field(
        default_factory=lambda: [
            "f1_calibrated",
            "auroc",
            "ap",
            "f1_raw",
            "cos_probe_diffmean",
            "train_separation",
        ],
        min_length=1,
    )
    effect_threshold: float = Field(
        0.05,
        ge=0,
        le=2,
        description="effective: the effect above null has its interval above this",
    )
    experiment: str = Field("phase6-calibration", description="the study's MLflow experiment")
    results_dir: Annotated[str, EXCLUDE] = Field(
        "results/phase6", description="where the study's run folders are written"
    )

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value: list[str]) -> list[str]:
        for text in value:
            _check_train_size(text)
        if len(set(value)) != len(value):
            raise ValueError("must not repeat a training size")
        return value


class CalibrationStudyConfig(RunConfig):
    """Phase 6, the calibration study (``steer-eval calibrate``, ``configs/phase6.yaml``)."""

    OWN_SECTION: ClassVar[str] = "calibration"

    phase: Annotated[Literal["calibration"], EXCLUDE] = "calibration"
    # Every other phase's hash carries it at its defaults, as their shared config did.
    calibration: Annotated[CalibrationConfig, HashRule(absent="default")] = Field(
        default_factory=CalibrationConfig
    )
