"""The run context: what scoring and publishing a run need besides its records.

It holds no model, so ``steer-eval rescore`` rebuilds it from the stored run record.
"""

from __future__ import annotations

from dataclasses import dataclass

from experiments.concepts import ConceptGraph
from experiments.config import ExperimentConfig


@dataclass
class RunContext:
    """What publishing a run needs besides its records; no model, so rescore can build it."""

    run_id: str
    config: ExperimentConfig
    graph: ConceptGraph
    model_id: str
    layer: int
    alpha: float
    predictors: dict[str, dict[str, float | None]]
    classifier_run_id: str | None = None
    classifier_dir: str | None = None

    @property
    def f1(self) -> dict[str, float]:
        return {k: float(v["f1"]) for k, v in self.predictors.items() if v.get("f1") is not None}
