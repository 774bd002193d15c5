"""One MLflow trace per generation, and feedback on it from code, humans and judges.

A trace's inputs are what made the text (concept, prompt, strength, seed, ...), its
output is the text. Feedback comes from three kinds of source, each named:

* ``CODE`` (``steer-eval/score``): the automated scores, Δ, the effect and coherence;
* ``HUMAN`` (the rater's id): the blind rating, attached only when ratings are imported,
  so the trace view is for analysis after rating and never shows a rater anything;
* ``LLM_JUDGE`` (the judge's name): each judge score, with the rubric version and its
  prompt-registry URI in the metadata.

Cost: a trace is written in one store transaction with its code feedback (the feedback
is added to the live trace, so it travels with it), plus one for its span. MLflow's
asynchronous export hides a server's latency, but into a local sqlite store its worker
threads only queue behind the same file: 145 traces took 13.3 s that way and 6.5 s
written synchronously (2-core machine), so a local store is written synchronously.
About 0.05 s per generation remains; ``tracking.traces: false`` turns traces off for
big grids. The key → trace id map is written to the run folder
(``traces.json``) as chunks finish, and the traces carry the key as a tag, so later
steps (human import, the panel) find them from either.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments import tracking

log = logging.getLogger(__name__)

TRACE_NAME = "generation"
KEY_TAG = "steer_eval.key"
SOURCE_RUN = "mlflow.sourceRun"
CODE_SOURCE_ID = "steer-eval/score"
# The question human raters and the judges both answer (judges.Rubric): one assessment
# name, told apart by its source (HUMAN rater id or LLM_JUDGE judge name).
RELATEDNESS = "relatedness"
CHUNK = 50
ASYNC_ENV = "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"
MAX_RATIONALE = 2000


@dataclass(frozen=True)
class Feedback:
    """One assessment of a trace; ``error`` marks an abstention (no value)."""

    name: str
    value: float | int | bool | str | None
    rationale: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class GenerationTrace:
    """What one generation's trace holds; ``feedback`` is the code feedback."""

    key: str
    inputs: dict[str, Any]
    text: str
    attributes: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    feedback: list[Feedback] = field(default_factory=list)
    # when the text was generated (Unix ns): the span's real start and end; None (a run
    # saved before generation times were recorded) leaves the time of logging
    started_ns: int | None = None
    ended_ns: int | None = None


def _source(kind: str, source_id: str):
    from mlflow.entities import AssessmentSource

    return AssessmentSource(source_type=kind, source_id=source_id)


def _metadata(values: Mapping[str, Any]) -> dict[str, str]:
    """Assessment metadata is strings: JSON for numbers, booleans and None."""
    out = {}
    for key, value in values.items():
        value = _clean(value)
        out[key] = value if isinstance(value, str) else json.dumps(value, default=str)
    return out


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None (never written as a score)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


def _log(trace_id: str, fb: Feedback, source) -> None:
    import mlflow
    from mlflow.entities import AssessmentError

    error = None
    if fb.error is not None or fb.value is None:
        error = AssessmentError(error_code="NO_SCORE", error_message=fb.error or "no value")
    mlflow.log_feedback(
        trace_id=trace_id,
        name=fb.name,
        value=_clean(fb.value) if error is None else None,
        source=source,
        error=error,
        rationale=(fb.rationale or None) and fb.rationale[:MAX_RATIONALE],
        metadata=_metadata(fb.metadata),
    )


def read_map(path: Path | None) -> dict[str, str]:
    if path is None or not path.exists():
        return {}
    return dict(json.loads(path.read_text()))


def write_map(path: Path, mapping: Mapping[str, str]) -> None:
    from experiments.rundir import atomic_write_text

    atomic_write_text(path, json.dumps(dict(sorted(mapping.items())), indent=0) + "\n")


def log_generation_traces(
    experiment_id: str,
    run_id: str,
    items: Iterable[GenerationTrace],
    map_file: Path | None = None,
    on_chunk: Callable[[int], None] | None = None,
) -> dict[str, str]:
    """Log a trace (with its code feedback) for every item whose key has none yet.

    Returns key → trace id for every key in ``map_file`` plus the new ones; the file is
    rewritten after each chunk of ``CHUNK`` traces, so an interruption loses at most one
    chunk's ids (those traces still carry their key tag).
    """
    import mlflow
    from mlflow.entities.trace_location import MlflowExperimentLocation

    tracking.client()  # the configured store, for the exporter too
    mapping = read_map(map_file)
    todo = [item for item in items if item.key not in mapping]
    if not todo:
        return mapping
    code = _source("CODE", CODE_SOURCE_ID)
    with _synchronous_export(tracking.is_local_store()):
        mlflow.tracing.set_destination(MlflowExperimentLocation(experiment_id=experiment_id))
        try:
            for start in range(0, len(todo), CHUNK):
                chunk = todo[start : start + CHUNK]
                for item in chunk:
                    mapping[item.key] = _write_trace(item, run_id, experiment_id, code)
                mlflow.flush_trace_async_logging()
                if map_file is not None:
                    write_map(map_file, mapping)
                if on_chunk is not None:
                    on_chunk(min(start + CHUNK, len(todo)))
        finally:
            mlflow.flush_trace_async_logging()
            mlflow.tracing.reset()  # the destination was this run's experiment only
    return mapping


def _write_trace(item: GenerationTrace, run_id: str, experiment_id: str, code) -> str:
    """One trace, its span timed as the generation was (``started_ns``/``ended_ns``), with
    its code feedback added while it is live, so it is written with the trace."""
    import mlflow
    from mlflow.tracing.provider import detach_span_from_context, set_span_in_context

    timed = item.started_ns is not None and item.ended_ns is not None
    span = mlflow.start_span_no_context(
        name=TRACE_NAME,
        span_type="LLM",
        inputs={k: _clean(v) for k, v in item.inputs.items()},
        attributes={k: _clean(v) for k, v in item.attributes.items()} or None,
        tags={KEY_TAG: item.key, **item.tags},
        metadata={SOURCE_RUN: run_id},
        experiment_id=experiment_id,
        start_time_ns=item.started_ns if timed else None,
    )
    # The span made current (as mlflow.start_span does) so the feedback is added to the
    # live trace and written with it, not one store write per assessment.
    token = set_span_in_context(span)
    try:
        for fb in item.feedback:
            _log(span.trace_id, fb, code)
    finally:
        detach_span_from_context(token)
        span.end(outputs={"text": item.text}, end_time_ns=item.ended_ns if timed else None)
    return span.trace_id


@contextmanager
def _synchronous_export(enabled: bool) -> Iterator[None]:
    """MLflow's exporter reads ``MLFLOW_ENABLE_ASYNC_TRACE_LOGGING`` when the tracer is set
    up (``set_destination``); a user's own setting of it wins."""
    if not enabled or ASYNC_ENV in os.environ:
        yield
        return
    os.environ[ASYNC_ENV] = "false"
    try:
        yield
    finally:
        os.environ.pop(ASYNC_ENV, None)


def traces_of_run(experiment_id: str, run_id: str) -> list:
    """Every trace linked to a run, without spans (infos carry tags and assessments)."""
    import mlflow

    tracking.client()
    return mlflow.search_traces(
        locations=[experiment_id],
        run_id=run_id,
        include_spans=False,
        return_type="list",
        max_results=None,
    )


def keys_of_traces(experiment_id: str, run_id: str) -> dict[str, str]:
    """Generation key → trace id from the traces' own key tags (one of them when an older
    release logged a key twice)."""
    out: dict[str, str] = {}
    for trace in traces_of_run(experiment_id, run_id):
        key = trace.info.tags.get(KEY_TAG)
        if key:
            out.setdefault(key, trace.info.trace_id)
    return out


def trace_map(experiment_id: str, run_id: str, map_file: Path | None = None) -> dict[str, str]:
    """Generation key → trace id: the run folder's ``traces.json`` when it is here, else
    the traces' own key tags (another machine, or the file was lost)."""
    return read_map(map_file) or keys_of_traces(experiment_id, run_id)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-12)
    return a == b


def attach_feedback(
    experiment_id: str,
    run_id: str,
    feedback: Mapping[str, list[Feedback]],
    kind: str,
    source_id: str | Callable[[Feedback], str],
) -> dict[str, int]:
    """Attach feedback to traces by trace id, replacing this source's earlier verdicts.

    ``source_id`` is the rater id, judge name or code source (a function of the
    feedback when one call carries several judges). An earlier valid assessment of the
    same name and source with the same value is left alone; one with another value is
    overridden (MLflow keeps the old one, marked invalid); new ones are logged.
    Returns counts: logged, overridden, unchanged.
    """
    import mlflow

    tracking.client()
    existing: dict[tuple[str, str, str], Any] = {}
    for trace in traces_of_run(experiment_id, run_id):
        for a in trace.info.assessments or []:
            if a.valid is False or a.feedback is None or a.source is None:
                continue
            if a.source.source_type == kind:
                existing[(trace.info.trace_id, a.name, a.source.source_id)] = a
    counts = {"logged": 0, "overridden": 0, "unchanged": 0}
    for trace_id, items in feedback.items():
        for fb in items:
            sid = source_id(fb) if callable(source_id) else source_id
            source = _source(kind, sid)
            old = existing.get((trace_id, fb.name, sid))
            value = _clean(fb.value)
            if old is not None and old.feedback.error is None and value is not None:
                if _same(old.feedback.value, value):
                    counts["unchanged"] += 1
                    continue
                mlflow.override_feedback(
                    trace_id=trace_id,
                    assessment_id=old.assessment_id,
                    value=value,
                    rationale=(fb.rationale or None) and fb.rationale[:MAX_RATIONALE],
                    source=source,
                    metadata=_metadata(fb.metadata),
                )
                counts["overridden"] += 1
                continue
            if old is not None:  # an abstention replaced, or a score became one
                mlflow.delete_assessment(trace_id=trace_id, assessment_id=old.assessment_id)
            _log(trace_id, fb, source)
            counts["logged"] += 1
    return counts
