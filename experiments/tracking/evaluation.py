"""A run's generations in MLflow's GenAI evaluation views, scored from saved numbers.

``mlflow.genai.evaluate`` runs over the run's own traces (one per generation, already
carrying Δ, effect and coherence as code feedback) inside a child run of the parent
tagged as an evaluation run, so the experiment's *Evaluation runs* page lists it and
its *Traces* tab shows every generation with its assessments, judge and human ratings
included once Parts B and C attach them to the same traces. The scorers are MLflow
code scorers (``@scorer``) that read per-generation values the pipeline computed (no
model is called); their means are the evaluation run's metrics.

A rescore evaluates again into the same child run: the scorers' earlier assessments on
those traces are deleted first, so each trace holds one value per scorer.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Mapping, Sequence

from experiments import tracking
from experiments.tracking.traces import KEY_TAG

log = logging.getLogger(__name__)

EVALUATION_TAG = "steer_eval.evaluation"  # on the child run: "genai"
RUN_NAME = "genai evaluation"
SOURCE_RUN_KEY = "mlflow.assessment.sourceRunId"  # where MLflow notes the scorer's run


def evaluation_child(parent_run_id: str, experiment: str) -> str | None:
    for run in tracking.child_runs(parent_run_id, experiment):
        if run.data.tags.get(EVALUATION_TAG):
            return run.info.run_id
    return None


def code_scorer(name: str, values: Mapping[str, Mapping[str, object]], description: str):
    """An MLflow code scorer that returns the saved ``values[key][name]`` of the trace's
    generation (its key tag); its mean is the evaluation run's ``<name>/mean``. A
    generation without a value for ``name`` (another sign's scorer) gets none: MLflow
    logs no assessment for a None and leaves it out of the mean."""
    from mlflow.genai.scorers import scorer

    def read(trace) -> object:
        return values[trace.info.tags[KEY_TAG]].get(name)

    return scorer(read, name=name, description=description, aggregations=["mean"])


def _clear(trace_ids: Sequence[str], child: str, names: set[str]) -> int:
    """Delete the scorers' assessments a previous evaluation into ``child`` left."""
    import mlflow

    removed = 0
    for trace_id in trace_ids:
        trace = mlflow.get_trace(trace_id)
        for a in trace.info.assessments if trace is not None else []:
            if a.name in names and (a.metadata or {}).get(SOURCE_RUN_KEY) == child:
                mlflow.delete_assessment(trace_id, a.assessment_id)
                removed += 1
    return removed


def _traces(ids: Sequence[str]) -> list:
    """The traces of ``ids`` (with spans) in ``ids``' order, read in one batched store call
    (one ``get_trace`` per generation was a store round trip each)."""
    import mlflow
    from mlflow.tracing.client import TracingClient

    found = {t.info.trace_id: t for t in TracingClient().batch_get_traces(list(ids))}
    return [found.get(i) or mlflow.get_trace(i) for i in ids]


def evaluate_traces(
    experiment: str,
    parent_run_id: str,
    trace_ids: Mapping[str, str],
    values: Mapping[str, Mapping[str, object]],
    descriptions: Mapping[str, str],
    on_output: Callable[[str], None] | None = None,
) -> tuple[str, dict[str, float]]:
    """Evaluate the traces of ``values``' keys with one code scorer per name in
    ``descriptions``; returns (evaluation run id, its metrics). MLflow's own console
    output (a progress bar, a summary) goes to ``on_output`` (the log), not stdout."""
    import mlflow
    import pandas as pd

    tracking.client()  # the fluent API on the configured store
    keys = [k for k in values if k in trace_ids]
    ids = [trace_ids[k] for k in keys]
    child = evaluation_child(parent_run_id, experiment)
    if child is None:
        child = tracking.start_run(
            experiment,
            RUN_NAME,
            tags={EVALUATION_TAG: "genai", "phase": "5"},
            parent_run_id=parent_run_id,
        )
    else:
        removed = _clear(ids, child, set(descriptions))
        log.info("removed %d assessments of the previous evaluation", removed)
    traces = _traces(ids)
    scorers = [code_scorer(n, values, d) for n, d in descriptions.items()]
    captured = io.StringIO()
    with (
        mlflow.start_run(run_id=child),
        contextlib.redirect_stdout(captured),
        contextlib.redirect_stderr(captured),
    ):
        result = mlflow.genai.evaluate(data=pd.DataFrame({"trace": traces}), scorers=scorers)
    (on_output or log.debug)(captured.getvalue())
    return child, {k: float(v) for k, v in result.metrics.items()}
