"""What each of the suite's experiments holds: the text under the latest answer in the
experiment's description (``mlflow.note.content``), shown at the top of its runs page."""

from __future__ import annotations

EXPERIMENT_NOTES = {
    "phase4-classifiers": (
        "Phase 4: one run per `steer-eval classifiers`: each concept's probe metrics "
        "(AUROC, AP, F1 raw and calibrated on held-out texts), the probes as artefacts. "
        "The question they feed is answered in the `phase5-semantic-steering` experiment."
    ),
    "phase5-semantic-steering": (
        "Phase 5: one parent run per `steer-eval run` or `rescore`, which opens on its "
        "answer (`answer.md`: the question, the v2 verdicts per sign with intervals, the "
        "seed's criteria below) and holds the run summary in its description, the "
        "figures under `plots/`, `v2/criterion/<key>/value|low|high` metrics for the runs "
        "table; a child per concept × strength, `human-validation` and `judge-panel` "
        "children; one trace per generation (Traces tab) with Δ, effect and coherence as "
        "code feedback, human ratings and judge scores as feedback."
    ),
    "phase6-calibration": (
        "Phase 6: one parent run per `steer-eval calibrate` (the training-curve study), "
        "opening on its answer (`answer.md`: slopes of the effect on each predictor per "
        "sign, minimum effective levels), a child per probe set."
    ),
}
