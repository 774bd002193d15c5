"""experiments.tracking.traces into a real sqlite store: batched, complete, as MLflow's own."""

from __future__ import annotations

import json

import pytest

from experiments import tracking
from experiments.tracking.traces import (
    CODE_SOURCE_ID,
    KEY_TAG,
    TRACE_NAME,
    Feedback,
    GenerationTrace,
    log_generation_traces,
    read_map,
    settle_unmapped,
    traces_of_run,
)


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        ("sqlite:///mlruns.db", True),
        ("file:///tmp/mlruns", True),
        ("mlruns", True),
        ("http://127.0.0.1:5000", False),
        ("https://mlflow.example.org", False),
        ("databricks://profile", False),
    ],
)
def test_local_store_kinds(uri, local):
    assert tracking.is_local_store(uri) is local


def _items(n: int) -> list[GenerationTrace]:
    return [
        GenerationTrace(
            key=f"dog.n.01|p{i}|n0|s+1.000",
            inputs={"concept": "dog.n.01", "prompt": "Tell me about dogs.", "seed": i},
            text=f"text {i}",
            tags={"concept": "dog.n.01", "strength": "+1"},
            feedback=[
                Feedback("delta", 0.1 * i, rationale="Δ", metadata={"core_sim": 0.5}),
                Feedback("coherence", None, error="no perplexity"),
            ],
        )
        for i in range(n)
    ]


def test_traces_land_in_a_sqlite_store_with_their_feedback(mlflow_store, tmp_path):
    """Every trace and its code feedback is in the store when the call returns, linked to
    the run, and a second call logs nothing new."""
    experiment = tracking.experiment_id("traces-test")
    run_id = tracking.start_run("traces-test", "traces")
    map_file = tmp_path / "traces.json"
    mapping = log_generation_traces(experiment, run_id, _items(3), map_file)
    assert read_map(map_file) == mapping and len(mapping) == 3
    traces = traces_of_run(experiment, run_id)
    assert {t.info.tags[KEY_TAG] for t in traces} == set(mapping)
    for trace in traces:
        by_name = {a.name: a for a in trace.info.assessments}
        assert by_name["delta"].source.source_id == CODE_SOURCE_ID
        assert by_name["coherence"].feedback.error is not None  # an abstention, not a 0
    # a second call logs nothing new
    assert log_generation_traces(experiment, run_id, _items(3), map_file) == mapping
    assert len(traces_of_run(experiment, run_id)) == 3


def test_batches_are_written_and_mapped_one_at_a_time(mlflow_store, tmp_path, monkeypatch):
    """The map file follows each batch: a crash loses at most one batch's ids."""
    import experiments.tracking.traces as traces

    monkeypatch.setattr(traces, "CHUNK", 2)
    experiment = tracking.experiment_id("traces-batches")
    run_id = tracking.start_run("traces-batches", "traces")
    seen: list[int] = []
    mapping = log_generation_traces(
        experiment, run_id, _items(5), tmp_path / "traces.json", on_chunk=seen.append
    )
    assert seen == [2, 4, 5] and len(mapping) == 5
    assert len(traces_of_run(experiment, run_id)) == 5


def _fluent_trace(experiment: str, run_id: str, item: GenerationTrace) -> str:
    """The same generation traced by MLflow's own fluent API, one trace at a time: the
    reference the batched writer must reproduce."""
    import mlflow
    from mlflow.entities import AssessmentError, AssessmentSource
    from mlflow.entities.trace_location import MlflowExperimentLocation
    from mlflow.tracing.provider import detach_span_from_context, set_span_in_context

    mlflow.tracing.set_destination(MlflowExperimentLocation(experiment_id=experiment))
    try:
        span = mlflow.start_span_no_context(
            name=TRACE_NAME,
            span_type="LLM",
            inputs=item.inputs,
            attributes=item.attributes,
            tags={KEY_TAG: item.key, **item.tags},
            metadata={"mlflow.sourceRun": run_id},
            experiment_id=experiment,
            start_time_ns=item.started_ns,
        )
        token = set_span_in_context(span)
        try:
            for fb in item.feedback:
                error = None
                if fb.error is not None:
                    error = AssessmentError(error_code="NO_SCORE", error_message=fb.error)
                mlflow.log_feedback(
                    trace_id=span.trace_id,
                    name=fb.name,
                    value=None if error else fb.value,
                    source=AssessmentSource(source_type="CODE", source_id=CODE_SOURCE_ID),
                    error=error,
                    rationale=fb.rationale,
                    metadata={k: json.dumps(v) for k, v in fb.metadata.items()} or None,
                )
        finally:
            detach_span_from_context(token)
            span.end(outputs={"text": item.text}, end_time_ns=item.ended_ns)
        mlflow.flush_trace_async_logging()
    finally:
        mlflow.tracing.reset()
    return span.trace_id


def _view(trace) -> dict:
    """What a reader sees of a trace, ids and sizes aside."""
    info, (span,) = trace.info, trace.data.spans
    return {
        "tags": {k: v for k, v in info.tags.items() if k != "mlflow.artifactLocation"},
        "metadata": {
            k: v for k, v in info.trace_metadata.items() if not k.startswith("mlflow.trace.size")
        },
        "request_time": info.request_time,
        "execution_duration": info.execution_duration,
        "state": info.state,
        "request_preview": info.request_preview,
        "response_preview": info.response_preview,
        "assessments": sorted(
            (
                a.name,
                json.dumps(a.feedback.value),
                a.feedback.error.error_message if a.feedback.error else None,
                a.source.source_type,
                a.source.source_id,
                a.rationale,
                json.dumps(a.metadata, sort_keys=True),
            )
            for a in info.assessments
        ),
        "span": {
            "name": span.name,
            "type": span.span_type,
            "inputs": span.inputs,
            "outputs": span.outputs,
            "start": span.start_time_ns,
            "end": span.end_time_ns,
            "attributes": {
                k: v for k, v in span.attributes.items() if k not in ("mlflow.traceRequestId",)
            },
        },
    }


def test_a_batched_trace_reads_back_as_mlflows_own(mlflow_store):
    """The batched writer stores what MLflow's fluent API stores for the same generation:
    tags, metadata (the run link, previews), timings, feedback and the span."""
    import mlflow

    experiment = tracking.experiment_id("traces-same")
    run_id = tracking.start_run("traces-same", "traces")
    item = GenerationTrace(
        key="dog.n.01|p0|n0|s+1.000",
        inputs={"concept": "dog.n.01", "prompt": "Tell me about dogs.", "seed": 7},
        text="Dogs bark at the mail.",
        attributes={"layer": 3, "unsteered_twin_text": "Cats sleep."},
        tags={"concept": "dog.n.01", "strength": "+1"},
        feedback=[
            Feedback("delta", 0.25, rationale="Δ", metadata={"core_sim": 0.5}),
            Feedback("coherence", None, error="no perplexity"),
        ],
        started_ns=1_795_000_000_000_000_000,
        ended_ns=1_795_000_002_500_000_000,
    )
    ours = log_generation_traces(experiment, run_id, [item])[item.key]
    theirs = _fluent_trace(experiment, run_id, item)
    assert ours != theirs
    assert _view(mlflow.get_trace(ours)) == _view(mlflow.get_trace(theirs))
    linked = {t.info.trace_id for t in traces_of_run(experiment, run_id)}
    assert {ours, theirs} <= linked


def test_a_batch_cut_short_is_settled_on_resume(mlflow_store):
    """A trace stored without its span (a crash between the two writes) is deleted so it
    is traced again; one with its span is kept."""
    import mlflow
    from mlflow.tracing.client import TracingClient

    from experiments.tracking.traces import _TraceBuilder, _write_batch

    experiment = tracking.experiment_id("traces-settle")
    run_id = tracking.start_run("traces-settle", "traces")
    builder = _TraceBuilder(experiment, run_id)
    whole, cut = (builder.build(i) for i in _items(2))
    _write_batch(experiment, [whole])
    TracingClient().start_trace(cut.info)  # the crash: no log_spans for this one
    ids = [whole.info.trace_id, cut.info.trace_id]
    assert settle_unmapped(experiment, ids) == {whole.info.trace_id}
    assert mlflow.get_trace(whole.info.trace_id) is not None
    assert mlflow.get_trace(cut.info.trace_id, silent=True) is None
