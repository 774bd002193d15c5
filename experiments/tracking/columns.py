"""The runs table's default columns: the verdicts a reader compares runs on.

MLflow keeps the runs table's columns in the browser (local storage); the server has no
default. What it does read from the server is a *shared view*: the experiment tag
``mlflow.sharedViewState.<key>`` holding the view's JSON, opened by the address
``?viewStateShareKey=<key>`` (the UI's own Share button writes the same tag). The suite
writes one such view per experiment it knows and every experiment address it prints
carries the key, so the runs table opens with the v2 verdicts beside each run. Measured
against MLflow 3.17's UI: a view needs only ``selectedColumns``; the rest of its state
takes the UI's defaults.
"""

from __future__ import annotations

import json

VIEW_KEY = "steer-eval-columns"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
# The UI's own default columns (attributes), kept first.
ATTRIBUTES = ("attributes.`Source`", "attributes.`Models`", "attributes.`Dataset`")
PHASE5_METRICS = (
    *(
        f"v2/criterion/v2_{key}_{sign}/value"
        for sign in ("pos", "neg")
        for key in ("predictor_vs_effect", "effect_above_null", "direction")
    ),
    "correlation/predictor_vs_effect_pos/corrected",
    "correlation/predictor_vs_effect_neg/corrected",
    "n_generations",
)
PHASE5_PARAMS = ("model", "layer", "beta", "vector_source")
# Per experiment: (parameters, metrics) shown by default.
DEFAULT_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "phase5-semantic-steering": (PHASE5_PARAMS, PHASE5_METRICS),
    "steering-effect-study": (PHASE5_PARAMS, PHASE5_METRICS),
}


def view_state(params: tuple[str, ...], metrics: tuple[str, ...]) -> str:
    """The shared view's JSON: the UI's attributes, then the parameters and metrics."""
    columns = [
        *ATTRIBUTES,
        *(f"params.`{p}`" for p in params),
        *(f"metrics.`{m}`" for m in metrics),
    ]
    return json.dumps({"selectedColumns": columns}, separators=(",", ":"))


def column_tags(experiment: str) -> dict[str, str]:
    """The experiment tag that holds its default columns, or none for an experiment
    without a default set."""
    columns = DEFAULT_COLUMNS.get(experiment)
    return {VIEW_TAG: view_state(*columns)} if columns else {}


def view_query(experiment: str | None) -> str:
    """``&viewStateShareKey=...`` for an experiment that has default columns, else ""."""
    return f"&viewStateShareKey={VIEW_KEY}" if experiment in DEFAULT_COLUMNS else ""
