"""The runs table's default columns: the verdicts a reader compares runs on.

MLflow keeps the runs table's columns in the browser (local storage); the server has no
default. What it does read from the server is a *saved view*: the experiment tag
``mlflow.sharedViewState.<key>`` holding the view (MLflow 3.17: a JSON envelope with a
name, times and the state as a JSON string), listed under the runs table's Views and
opened by ``#/experiments/<id>/runs?viewStateShareKey=<key>`` (the UI's own Save view
writes the same tag). The suite writes one per experiment it knows and every runs-page
address it prints opens on it, so the table shows the v2 verdicts beside each run. A
view needs only ``selectedColumns``; the rest of its state takes the UI's defaults.

The columns lead with the verdicts, each a tag the publisher writes as one formatted
cell (``pass +0.412 [+0.210, +0.600]``: status, observed value and interval to three
significant digits, ``experiments/answer.verdict_cell``), named sign first so a header
cut to its column's width still says which verdict it is; the correlations corrected for
unreliability come after the observed ones, then what a rescore changed (``rescored
with``, empty on a run scored as it was made), the run's settings and size, and the UI's
own attributes last. The UI groups the columns it shows by kind (metrics, then
parameters, then tags) unless the view gives their order, and cuts every column to
about 100 pixels unless it gives their widths: so the view gives both (``columnOrder``,
``columnWidths``: the state the UI keeps when a reader drags or resizes a column), wide
enough for a verdict's cell and its header whole.
"""

from __future__ import annotations

import json

from experiments.rundir import RESCORED_TAG

VIEW_KEY = "steer-eval-columns"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
# The UI's own default columns (attributes), kept last.
ATTRIBUTES = ("attributes.`Source`", "attributes.`Models`", "attributes.`Dataset`")
# Phase 5's verdict tags (experiments/answer.verdict_tag_key of its v2 criteria), each
# sign's observed verdicts first, then the corrected correlations
# (phase5/publish.corrected_tag_key).
PHASE5_TAGS = (
    *(
        f"{sign} {key}"
        for key in ("predictor vs effect", "effect above null", "direction")
        for sign in ("pos", "neg")
    ),
    "pos corrected predictor vs effect",
    "neg corrected predictor vs effect",
    RESCORED_TAG,  # what a rescore changed, on a run whose verdicts come from it
)
PHASE5_METRICS = ("n_generations",)
PHASE5_PARAMS = ("model", "layer", "beta", "vector_source")
# Per experiment: (tags, parameters, metrics) shown by default, in this order.
DEFAULT_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "phase5-semantic-steering": (PHASE5_TAGS, PHASE5_PARAMS, PHASE5_METRICS),
    "steering-effect-study": (PHASE5_TAGS, PHASE5_PARAMS, PHASE5_METRICS),
}


# Pixels per column: a verdict's cell ("inconclusive -0.0466 [-0.119, +0.0146]") and a
# corrected correlation's whole; the settings' names and values.
VERDICT_WIDTH = 270
CORRECTED_WIDTH = 220
SETTING_WIDTH = 120

VIEW_NAME = "steer-eval: the verdicts"
# A saved view's envelope carries times; a fixed one keeps the tag's value the same
# from run to run (so it is written once, not on every run).
VIEW_TIME_MS = 1795651200000  # 2026-11-26


def view_state(tags: tuple[str, ...], params: tuple[str, ...], metrics: tuple[str, ...]) -> str:
    """The saved view's tag value, MLflow 3.17's envelope (name, times, and the state as
    a JSON string): the verdict tags, then the parameters and metrics, the UI's
    attributes last. The UI lists it under the runs table's Views as :data:`VIEW_NAME`."""
    columns = [
        *(f"tags.`{t}`" for t in tags),
        *(f"params.`{p}`" for p in params),
        *(f"metrics.`{m}`" for m in metrics),
        *ATTRIBUTES,
    ]
    widths = {
        **{f"tags.`{t}`": CORRECTED_WIDTH if "corrected" in t else VERDICT_WIDTH for t in tags},
        **{f"params.`{p}`": SETTING_WIDTH for p in params},
        **{f"metrics.`{m}`": SETTING_WIDTH for m in metrics},
    }
    state = json.dumps(
        {"selectedColumns": columns, "columnOrder": columns, "columnWidths": widths},
        separators=(",", ":"),
    )
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
