"""A run's generations in MLflow's GenAI evaluation views, projected from saved numbers.

The evaluation is a child run of the parent tagged as an evaluation run
(``mlflow.runType: genai_evaluate``), so the experiment's *Evaluation runs* page lists
it and its *Traces* tab shows every evaluated generation with its assessments, judge
and human ratings included once Parts B and C attach them to the same traces. Its
scorers are MLflow code scorers (``@scorer``) that read per-generation values the
pipeline computed (no model is called); their means are the evaluation run's metrics.

Why not ``mlflow.genai.evaluate``: the scorers only read saved values, yet its harness
ran them in a thread pool and stored each assessment in its own transaction (7.6-8.1 s
for 60 generations on 2 cores). Here the same writes are a projection: each scorer's
feedback (name, source, value, the scorer's definition digest and the evaluation run,
as MLflow's harness writes them) rides in its trace's single write
(:func:`scorer_feedback`, used by the traces stage), and :func:`link_evaluation`
links the traces to the run, tags it and logs the means (``np.mean`` over the values in
trace order, MLflow's ``mean`` aggregation). A rescore replaces the scorers' earlier
assessments on those traces, so each trace holds one value per scorer.

The run itself (``RUN_NAME``, tagged ``EVALUATION_TAG``) is opened and closed by the
kernel's publisher (``open_child`` / ``close_child``), where every run is opened:
``experiments/phase5/evaluation.py`` names it in the traces stage and closes it once
:func:`link_evaluation` has written it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from experiments import tracking
from experiments.tracking.traces import KEY_TAG, Feedback

if TYPE_CHECKING:
    from mlflow.entities import Trace
    from mlflow.genai.scorers import Scorer


EVALUATION_TAG = "steer_eval.evaluation"  # on the child run: "genai"
RUN_NAME = "genai evaluation"
SOURCE_RUN_KEY = "mlflow.assessment.sourceRunId"  # where MLflow notes the scorer's run
SCORER_DIGEST_KEY = "mlflow.assessment.scorerDigest"
RUN_TYPE_TAG = "mlflow.runType"
RUN_TYPE = "genai_evaluate"
SCORERS_DIGEST_TAG = "mlflow.genaiEvaluate.scorersDigest"
LINK_BATCH = 100  # MLflow links at most 100 traces to a run per call


def code_scorer(name: str, values: Mapping[str, Mapping[str, object]], description: str) -> Scorer:
    """An MLflow code scorer that returns the saved ``values[key][name]`` of the trace's
    generation (its key tag); its mean is the evaluation run's ``<name>/mean``. A
    generation without a value for ``name`` (another sign's scorer) gets none: no
    assessment, and it is left out of the mean. The projection never calls it; it is the
    scorer's definition, whose digest the run and each assessment carry."""
    from mlflow.genai.scorers import scorer

    def read(trace: Trace) -> object:
        return values[trace.info.tags[KEY_TAG]].get(name)

    return scorer(read, name=name, description=description, aggregations=["mean"])


def _scorers(
    values: Mapping[str, Mapping[str, object]], descriptions: Mapping[str, str]
) -> list[Scorer]:
    return [code_scorer(n, values, d) for n, d in descriptions.items()]


def scorer_feedback(
    child: str,
    values: Mapping[str, Mapping[str, object]],
    descriptions: Mapping[str, str],
) -> dict[str, list[Feedback]]:
    """Per generation key, the feedback of each scorer in ``descriptions`` that has a
    value for it: the assessments MLflow's evaluation harness would log on its trace."""
    from mlflow.genai.scorers.scorer_utils import get_scorer_definition_digest

    digests = {s.name: get_scorer_definition_digest(s) for s in _scorers(values, descriptions)}
    out: dict[str, list[Feedback]] = {}
    for key, row in values.items():
        items = []
        for name in descriptions:
            value = row.get(name)
            if value is None:
                continue
            metadata: dict[str, str | None] = {SOURCE_RUN_KEY: child}
            if digests[name]:
                metadata = {SCORER_DIGEST_KEY: digests[name], **metadata}
            score = cast("float | int | bool | str", value)  # a scorer's value
            items.append(Feedback(name, score, metadata=metadata, source_id=name, on_span=True))
        out[key] = items
    return out


def evaluation_metrics(
    keys: Sequence[str], values: Mapping[str, Mapping[str, object]], names: Sequence[str]
) -> dict[str, float]:
    """``<name>/mean`` per scorer: the mean of its values over ``keys`` in that order,
    booleans as 0/1 and missing values left out, as MLflow's ``mean`` aggregation."""
    out: dict[str, float] = {}
    for name in names:
        scores = [float(cast(float, v)) for k in keys if (v := values[k].get(name)) is not None]
        if scores:
            out[f"{name}/mean"] = float(np.mean(scores))
    return out


def link_evaluation(
    child: str,
    trace_ids: Mapping[str, str],
    values: Mapping[str, Mapping[str, object]],
    descriptions: Mapping[str, str],
) -> dict[str, float]:
    """Link the evaluated traces to the evaluation run, tag it as MLflow's evaluation
    tags its runs and log the scorers' means; returns the means (the caller closes the
    run: ``kernel.publisher.close_child``)."""
    from mlflow.genai.evaluation.lineage import get_scorers_digest

    keys = [k for k in values if k in trace_ids]
    ids = [trace_ids[k] for k in keys]
    client = tracking.client()
    for start in range(0, len(ids), LINK_BATCH):
        client.link_traces_to_run(ids[start : start + LINK_BATCH], child)
    tags = {RUN_TYPE_TAG: RUN_TYPE}
    if digest := get_scorers_digest(_scorers(values, descriptions)):
        tags[SCORERS_DIGEST_TAG] = json.dumps(digest)
    tracking.set_tags(child, tags)
    metrics = evaluation_metrics(keys, values, list(descriptions))
    tracking.log_metrics(child, metrics)
    return metrics
