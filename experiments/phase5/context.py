"""The run context: what scoring and publishing a run need besides its records.

It holds no model, so ``steer-eval rescore`` rebuilds it from the stored run record. It is
made whole, once the parent run is open (``phase5/run.py``: ``run_context``), and never
filled in later: it is frozen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from experiments.concepts import ConceptGraph
from experiments.config import RunConfig
from experiments.record import LayerChoice, predictor_values


@dataclass(frozen=True)
class RunContext:
    """What publishing a run needs besides its records; no model, so rescore can build it."""

    run_id: str
    config: RunConfig
    graph: ConceptGraph
    model_id: str
    layer: int
    alpha: float
    predictors: dict[str, dict[str, float | None]]
    classifier_run_id: str | None = None
    classifier_dir: str | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)  # RunRecord.diagnostics
    # Per concept: the probe's test-split decisions (test_scores, test_labels) and its
    # calibrated threshold, from which a predictor's reliability is measured.
    detection: dict[str, Any] = field(default_factory=dict)  # RunRecord.detection
    layer_choice: LayerChoice | None = None  # --layer auto / auto-effect (kernel/layers.py)

    @property
    def predictor_name(self) -> str:
        """The classifier quality criterion 3 uses (``criteria.predictor``)."""
        return self.config.criteria.predictor

    def predictor_values(self, name: str | None = None) -> dict[str, float]:
        """Per-concept values of ``name`` or of the configured predictor."""
        return predictor_values(self.predictors, name or self.predictor_name)
