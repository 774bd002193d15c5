"""One MLflow trace per generation, and feedback on it from code, humans and judges.

A trace's inputs are what made the text (concept, prompt, strength, seed, ...), its
output is the text. Feedback comes from three kinds of source, each named:

* ``CODE`` (``steer-eval/score``): the automated scores, Δ, the effect and coherence;
  the GenAI evaluation's code scorers are ``CODE`` too, each under its own name;
* ``HUMAN`` (the rater's id): the blind rating, attached only when ratings are imported,
  so the trace view is for analysis after rating and never shows a rater anything;
* ``LLM_JUDGE`` (the judge's name): each judge score, with the rubric version and its
  prompt-registry URI in the metadata.

Cost: traces are built in memory by MLflow's own span processor (so their info,
metadata and spans are what ``mlflow.start_span`` writes) and written in batches of
``CHUNK``: one ``start_trace`` per trace, which carries its tags, metadata and every
code feedback, then one ``log_spans`` for the whole batch. MLflow's exporter writes
each trace as it ends, spans first, so its ``start_trace`` then found the row and took
the store's slower merge path: 145 traces took 6.2-7.9 s that way (2-core machine), and
the batches take about a quarter of it (bench/README.md, issue 39).
``tracking.traces: false`` turns traces off for big grids. The key → trace id map is
written to the run folder (``traces.json``) after each batch, and the traces carry the
key as a tag, so later steps (human import, the panel) find them from either; a batch
cut short by a crash is finished or rewritten on resume (:func:`settle_unmapped`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments import tracking

if TYPE_CHECKING:
    from mlflow.entities import AssessmentSource, Trace
    from mlflow.entities import Feedback as FeedbackEntity
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.sdk.trace.id_generator import IdGenerator

log = logging.getLogger(__name__)

TRACE_NAME = "generation"
KEY_TAG = "steer_eval.key"
SOURCE_RUN = "mlflow.sourceRun"
CODE_SOURCE_ID = "steer-eval/score"
# The question human raters and the judges both answer (judges.Rubric): one assessment
# name, told apart by its source (HUMAN rater id or LLM_JUDGE judge name).
RELATEDNESS = "relatedness"
CHUNK = 50
MAX_RATIONALE = 2000


@dataclass(frozen=True)
class Feedback:
    """One assessment of a trace; ``error`` marks an abstention (no value)."""

    name: str
    value: float | int | bool | str | None
    rationale: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    # the CODE source's id when not steer-eval/score (a GenAI evaluation scorer's name)
    source_id: str | None = None
    # attached to the trace's span, as MLflow's evaluation attaches a scorer's feedback
    on_span: bool = False


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


def _source(kind: str, source_id: str) -> AssessmentSource:
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


def _log(trace_id: str, fb: Feedback, source: AssessmentSource) -> None:
    """Store one feedback on a stored trace (its own transaction)."""
    import mlflow

    mlflow.log_assessment(trace_id=trace_id, assessment=_assessment(trace_id, fb, source))


def read_map(path: Path | None) -> dict[str, str]:
    return dict(json.loads(path.read_text())) if path is not None and path.exists() else {}


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
    rewritten after each batch of ``CHUNK`` traces, so an interruption loses at most one
    batch's ids (those traces still carry their key tag: :func:`settle_unmapped`).
    """
    tracking.client()  # the configured store
    mapping = read_map(map_file)
    todo = [item for item in items if item.key not in mapping]
    if not todo:
        return mapping
    builder = _TraceBuilder(experiment_id, run_id)
    for start in range(0, len(todo), CHUNK):
        chunk = todo[start : start + CHUNK]
        traces = [builder.build(item) for item in chunk]
        _write_batch(experiment_id, traces)
        for item, trace in zip(chunk, traces, strict=True):
            mapping[item.key] = trace.info.trace_id
        if map_file is not None:
            write_map(map_file, mapping)
        if on_chunk is not None:
            on_chunk(min(start + CHUNK, len(todo)))
    return mapping


class _TraceBuilder:
    """Builds finished traces in memory with MLflow's own span processor, so each trace's
    info (source metadata, the run link, the request and response previews, timings)
    and its span are what ``mlflow.start_span_no_context`` would have made; an exporter
    that only collects replaces the one that writes each trace as it ends.

    Why not MLflow's exporter: it writes one trace per transaction pair and, spans first,
    sends ``start_trace`` down the store's merge path (module docstring)."""

    def __init__(self, experiment_id: str, run_id: str) -> None:
        import mlflow
        from mlflow.tracing.processor.mlflow_v3 import MlflowV3SpanProcessor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

        finished: list[Trace] = []

        class Collect(SpanExporter):
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                from mlflow.tracing.trace_manager import InMemoryTraceManager

                manager = InMemoryTraceManager.get_instance()
                for span in spans:
                    if span.parent is None:
                        managed = manager.pop_trace(span.context.trace_id)
                        if managed is not None:
                            finished.append(managed.trace)
                return SpanExportResult.SUCCESS

        # MLflow's own resource (no service.name tag on the traces) and ids that seeding
        # Python's `random` cannot repeat across runs
        resource = Resource(
            {
                "telemetry.sdk.language": "python",
                "telemetry.sdk.name": "mlflow",
                "telemetry.sdk.version": mlflow.__version__,
            }
        )
        provider = TracerProvider(resource=resource, id_generator=_urandom_ids())
        provider.add_span_processor(MlflowV3SpanProcessor(Collect(), export_metrics=False))
        self._tracer = provider.get_tracer(__name__)
        self._finished = finished
        self.experiment_id = experiment_id
        self.run_id = run_id
        self.code = _source("CODE", CODE_SOURCE_ID)

    def build(self, item: GenerationTrace) -> Trace:
        """The finished trace of ``item`` (an ``mlflow.entities.Trace``), not yet stored."""
        from mlflow.tracing.constant import SpanAttributeKey
        from mlflow.tracing.trace_manager import InMemoryTraceManager
        from mlflow.tracing.utils import encode_span_id, exclude_immutable_tags
        from opentelemetry.context import Context

        timed = item.started_ns is not None and item.ended_ns is not None
        attributes = {SpanAttributeKey.EXPERIMENT_ID: json.dumps(self.experiment_id)}
        if timed:
            attributes[SpanAttributeKey.START_TIME_NS] = json.dumps(item.started_ns)
        otel = self._tracer.start_span(
            TRACE_NAME,
            context=Context(),  # a root span, whatever span is current
            attributes=attributes,
            start_time=item.started_ns if timed else None,
        )
        manager = InMemoryTraceManager.get_instance()
        otel_context = otel.get_span_context()  # the SDK span's .context
        trace_id = manager.get_mlflow_trace_id_from_otel_id(otel_context.trace_id)
        span = manager.get_span_from_id(trace_id, encode_span_id(otel_context.span_id))
        span.set_span_type("LLM")
        span.set_inputs({k: _clean(v) for k, v in item.inputs.items()})
        span.set_attributes({k: _clean(v) for k, v in item.attributes.items()})
        with manager.get_trace(trace_id) as trace:
            trace.info.tags.update(exclude_immutable_tags({KEY_TAG: item.key, **item.tags}))
            trace.info.trace_metadata[SOURCE_RUN] = self.run_id
            trace.info.assessments.extend(
                _assessment(
                    trace_id,
                    fb,
                    self.code if fb.source_id is None else _source("CODE", fb.source_id),
                    span.span_id if fb.on_span else None,
                )
                for fb in item.feedback
            )
        self._finished.clear()
        # LiveSpan.end, as MLflow's fluent API ends a span: the default log level, any
        # span processors the user configured (redaction), then the processor's export
        span.end(outputs={"text": item.text}, end_time_ns=item.ended_ns if timed else None)
        if len(self._finished) != 1:
            raise RuntimeError(f"the trace of {item.key!r} was not finished by MLflow's processor")
        return self._finished.pop()


def _urandom_ids() -> IdGenerator:
    """OpenTelemetry ids from the OS's randomness: OpenTelemetry's default draws them from
    Python's global ``random``, which a seeded run would repeat across runs."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class UrandomIds(RandomIdGenerator):
        def generate_span_id(self) -> int:
            return int.from_bytes(os.urandom(8), "big") or 1

        def generate_trace_id(self) -> int:
            return int.from_bytes(os.urandom(16), "big") or 1

    return UrandomIds()


def _assessment(
    trace_id: str, fb: Feedback, source: AssessmentSource, span_id: str | None = None
) -> FeedbackEntity:
    """The MLflow feedback entity of ``fb`` from ``source``: an abstention (no value, or
    an error) is logged as an error, never as a score; NaN becomes no value."""
    from mlflow.entities import AssessmentError
    from mlflow.entities import Feedback as MlflowFeedback

    error = None
    if fb.error is not None or fb.value is None:
        error = AssessmentError(error_code="NO_SCORE", error_message=fb.error or "no value")
    return MlflowFeedback(
        name=fb.name,
        value=_clean(fb.value) if error is None else None,
        error=error,
        source=source,
        rationale=(fb.rationale or None) and fb.rationale[:MAX_RATIONALE],
        metadata=_metadata(fb.metadata) or None,
        trace_id=trace_id,
        span_id=span_id,
    )


def _write_batch(experiment_id: str, traces: list[Trace]) -> None:
    """Store finished traces: each trace's info (tags, metadata, feedback) in one
    ``start_trace``, then every span of the batch in one ``log_spans``. A crash between
    the two leaves traces without spans, which :func:`settle_unmapped` rewrites."""
    from mlflow.tracing.client import TracingClient
    from mlflow.tracing.utils import add_size_stats_to_trace_metadata

    client = TracingClient()
    for trace in traces:
        add_size_stats_to_trace_metadata(trace)
        client.start_trace(trace.info)
    client.log_spans(experiment_id, [span for trace in traces for span in trace.data.spans])


def settle_unmapped(experiment_id: str, trace_ids: Iterable[str]) -> set[str]:
    """Of traces that carry a key tag but are missing from ``traces.json`` (the batch a
    crash cut short), keep those whose span was stored and delete the others, so their
    generations are traced again. Returns the kept ids."""
    from mlflow.tracing.client import TracingClient

    ids = list(trace_ids)
    if not ids:
        return set()
    found = TracingClient().batch_get_traces(ids)
    kept = {t.info.trace_id for t in found if t.data.spans}
    if broken := [i for i in ids if i not in kept]:
        tracking.client().delete_traces(experiment_id, trace_ids=broken)
        log.info("deleted %d traces a crash left without their span", len(broken))
    return kept


def traces_of_run(experiment_id: str, run_id: str) -> list[Trace]:
    """Every trace linked to a run, without spans (infos carry tags and assessments)."""
    import mlflow

    tracking.client()
    found: list[Trace] = mlflow.search_traces(
        locations=[experiment_id],
        run_id=run_id,
        include_spans=False,
        return_type="list",
        max_results=None,
    )
    return found


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
    equal: bool = a == b
    return equal


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
    overridden (MLflow keeps the old one, marked invalid); new ones are logged. Feedback
    that names its own ``source_id`` (a GenAI evaluation scorer) uses it and replaces the
    old assessment outright, as a rerun of MLflow's evaluation leaves one per scorer.
    Returns counts: logged, overridden, unchanged.
    """
    import mlflow

    tracking.client()
    existing: dict[tuple[str, str, str | None], Any] = {}
    for trace in traces_of_run(experiment_id, run_id):
        for a in trace.info.assessments or []:
            if a.valid is False or a.feedback is None or a.source is None:
                continue
            if a.source.source_type == kind:
                existing[(trace.info.trace_id, a.name, a.source.source_id)] = a
    counts = {"logged": 0, "overridden": 0, "unchanged": 0}
    for trace_id, items in feedback.items():
        for fb in items:
            sid = fb.source_id or (source_id(fb) if callable(source_id) else source_id)
            source = _source(kind, sid)
            old: Any = existing.get((trace_id, fb.name, sid))
            value = _clean(fb.value)
            scored = old is not None and old.feedback.error is None and value is not None
            if scored and _same(old.feedback.value, value):
                counts["unchanged"] += 1
            elif scored and fb.source_id is None:
                mlflow.override_feedback(
                    trace_id=trace_id,
                    assessment_id=old.assessment_id,
                    value=value,
                    rationale=(fb.rationale or None) and fb.rationale[:MAX_RATIONALE],
                    source=source,
                    metadata=_metadata(fb.metadata),
                )
                counts["overridden"] += 1
            else:  # new, or the old one deleted (a scorer's rerun, an abstention replaced or made)
                if old is not None:
                    mlflow.delete_assessment(trace_id=trace_id, assessment_id=old.assessment_id)
                _log(trace_id, fb, source)
                counts["overridden" if scored else "logged"] += 1
    return counts
