"""Phase 5's config (``steer-eval run``): the shared settings, with its experiment and
results folder in its tracking section."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from experiments.config.base import EXCLUDE, HashRule
from experiments.config.common import RunConfig
from experiments.config.sections import TrackingConfig


class Phase5TrackingConfig(TrackingConfig):
    """Phase 5's tracking: the shared settings plus its experiment and results folder."""

    # In every phase's hash: the phases' one config carried it (at this default) before
    # the studies had models of their own.
    experiment: Annotated[str, HashRule(absent="default")] = Field(
        "phase5-semantic-steering", description="the MLflow experiment of Phase 5 runs"
    )
    results_dir: Annotated[str, EXCLUDE] = Field(
        "results/phase5", description="where Phase 5 run folders are written"
    )


class Phase5Config(RunConfig):
    """Phase 5 (``steer-eval run``); ``configs/phase5.yaml`` holds the seed's values."""

    OWN_SECTION: ClassVar[str] = "tracking"

    phase: Annotated[Literal["phase5"], EXCLUDE] = "phase5"
    tracking: Phase5TrackingConfig = Field(default_factory=Phase5TrackingConfig)
