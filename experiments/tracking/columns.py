"""The runs table's default columns: the verdicts a reader compares runs on.

MLflow keeps the runs table's columns in the browser (local storage); the server has no
default. What it does read from the server is a *saved view*: the experiment tag
``mlflow.sharedViewState.<key>`` holding the view (MLflow 3.17: a JSON envelope with a
name, times and the state as a JSON string), listed under the runs table's Views and
opened by ``#/experiments/<id>/runs?viewStateShareKey=<key>`` (the UI's own Save view
writes the same tag). The suite writes one per experiment it knows and every runs-page
address it prints opens on it, so the table shows the v2 verdicts beside each run. A
view needs only ``selectedColumns``; the rest of its state takes the UI's defaults.
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


VIEW_NAME = "steer-eval: the verdicts"
# A saved view's envelope carries times; a fixed one keeps the tag's value the same
# from run to run (so it is written once, not on every run).
VIEW_TIME_MS = 1795651200000  # 2026-11-26


def view_state(params: tuple[str, ...], metrics: tuple[str, ...]) -> str:
    """The saved view's tag value, MLflow 3.17's envelope (name, times, and the state as
    a JSON string): the UI's attributes, then the parameters and metrics. The UI lists
    it under the runs table's Views as :data:`VIEW_NAME`."""
    columns = [
        *ATTRIBUTES,
        *(f"params.`{p}`" for p in params),
        *(f"metrics.`{m}`" for m in metrics),
    ]
    state = json.dumps({"selectedColumns": columns}, separators=(",", ":"))
    envelope = {
        "name": VIEW_NAME,
        "createdAt": VIEW_TIME_MS,
        "updatedAt": VIEW_TIME_MS,
        "state": state,
    }
    return json.dumps(envelope, separators=(",", ":"))


def column_tags(experiment: str) -> dict[str, str]:
    """The experiment tag that holds its default columns, or none for an experiment
    without a default set."""
    columns = DEFAULT_COLUMNS.get(experiment)
    return {VIEW_TAG: view_state(*columns)} if columns else {}


def view_query(experiment: str | None) -> str:
    """``&viewStateShareKey=...`` for an experiment that has default columns, else ""."""
    return f"&viewStateShareKey={VIEW_KEY}" if experiment in DEFAULT_COLUMNS else ""
