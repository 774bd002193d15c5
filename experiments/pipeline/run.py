"""Phase 5 Part A as a composition of stages, plus resume and rescore.

``ExperimentConfig → ConceptGraph → ProbeSet → VectorSet → GenerationPlan →
generations.jsonl → scores.jsonl → CriteriaReport → RunRecord → MLflow``

One parent MLflow run per invocation and one child run per concept × strength. Each
generation batch is appended to the run folder as soon as it finishes, so
``steer-eval run --resume <run id>`` finishes an interrupted run without redoing or
losing anything (row seeds do not depend on batching); ``steer-eval rescore <run id>``
recomputes every score, criterion and log from the saved texts without the model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments import tracking
from experiments.concepts import ConceptGraph, load_concepts
from experiments.config import ExecutionConfig, ExperimentConfig
from experiments.execution import Executor, make_executor
from experiments.pipeline.analyse import add_paired_shifts, evaluate_criteria, per_strength
from experiments.pipeline.context import RunContext
from experiments.pipeline.diagnostics import steering_diagnostics
from experiments.pipeline.effect import EffectReport, evaluate_effect, select_betas
from experiments.pipeline.generate import generate, plan_order
from experiments.pipeline.plan import CONCEPT_ARM, build_plan, planned_rows
from experiments.pipeline.probes import ensure_classifiers
from experiments.pipeline.publish import numeric_metrics, publish, start_parent
from experiments.pipeline.score import Scorer, build_scorer, score_all
from experiments.pipeline.timer import Timer
from experiments.pipeline.vectors import build_vectors
from experiments.record import RunRecord
from experiments.rundir import RunDir
from steering.generation import BatchStats


class RunError(RuntimeError):
    """A Phase 5 run cannot start, resume or rescore; the message says why and what to do."""


@dataclass
class Phase5Result:
    run_id: str
    results_dir: Path
    records: pd.DataFrame
    criteria: dict
    per_strength: dict
    timings: dict[str, float]
    tokens_per_second: float
    record: RunRecord
    effect: EffectReport | None = None


def _graph(config: ExperimentConfig) -> ConceptGraph:
    return load_concepts(
        config.concepts.file, limit=config.concepts.limit, synsets=config.concepts.synsets
    )


def _locate(run_id: str, results_dir: str | Path | None) -> RunDir:
    return RunDir.locate(tracking.get_run(run_id), results_dir)


SELECTION_FILE = "selection.json"


def expected_keys(
    config: ExperimentConfig, graph: ConceptGraph, betas: dict[str, float] | None
) -> set[str]:
    keys = {k for k, _ in planned_rows(config, graph, "report", betas)}
    if config.selection.mode == "heldout":
        keys |= {k for k, _ in planned_rows(config, graph, "selection")}
    return keys


def joined_records(run_dir: RunDir, scores: list[dict]) -> pd.DataFrame:
    by_key = {s["key"]: s for s in scores}
    return pd.DataFrame([{**g, **by_key[g["key"]]} for g in plan_order(run_dir.read_generations())])


def read_betas(run_dir: RunDir) -> dict[str, float] | None:
    path = run_dir.file(SELECTION_FILE)
    if not path.exists():
        return None
    return {k: v["beta"] for k, v in json.loads(path.read_text())["concepts"].items()}


def score_and_publish(
    ctx: RunContext,
    run_dir: RunDir,
    scorer: Scorer,
    timer: Timer,
    tokens_per_second: float,
    generation_seconds: float,
    rescore: bool = False,
) -> Phase5Result:
    """Score the saved generations, judge the criteria and publish: the model-free tail
    shared by a fresh run, a resumed one and a rescore."""
    generations = run_dir.read_generations()
    betas = read_betas(run_dir)
    missing = expected_keys(ctx.config, ctx.graph, betas) - {g["key"] for g in generations}
    if missing:
        raise RunError(
            f"{len(missing)} generations are missing; resume with "
            f"`steer-eval run --resume {ctx.run_id}`"
        )
    with timer.time("embedding"):
        scores = score_all(scorer, generations)
    run_dir.write_scores(scores)
    with timer.time("analysis"):
        records = joined_records(run_dir, scores)
        seed_rows = records[(records["arm"] == CONCEPT_ARM) & (records["split"] == "report")]
        seed_rows = add_paired_shifts(seed_rows.reset_index(drop=True))
        predictor = ctx.predictor_values()  # criteria.predictor, f1_calibrated by default
        report = evaluate_criteria(seed_rows, predictor, ctx.config.criteria)
        effect = evaluate_effect(records, predictor, ctx.config)
    with timer.time("logging"):
        record = publish(
            ctx,
            run_dir,
            seed_rows,
            report,
            effect,
            timer.stages,
            tokens_per_second,
            generation_seconds,
            update_children=rescore,
            betas=betas,
        )
    if ctx.config.tracking.traces:
        from experiments.pipeline.tracing import log_traces

        with timer.time("traces"):
            log_traces(ctx, run_dir, records, rescore=rescore)
    tracking.log_metrics(ctx.run_id, {f"time/{k}": v for k, v in timer.stages.items()})
    return Phase5Result(
        ctx.run_id,
        run_dir.path,
        seed_rows,
        report.results,
        per_strength(seed_rows),
        dict(timer.stages),
        tokens_per_second,
        record,
        effect,
    )


def select_strengths(
    config: ExperimentConfig,
    graph: ConceptGraph,
    vectors,
    lm,
    run_dir: RunDir,
    scorer: Scorer,
    timer: Timer,
    on_batch=None,
    on_step=None,
    executor: Executor | None = None,
) -> tuple[dict[str, float], BatchStats]:
    """Held-out selection: generate the selection prompts over the β grid, score them and
    choose β per concept (saved to ``selection.json``, so a resume reuses the choice)."""
    plan = build_plan(config, graph, vectors, "selection")
    stats = generate(
        config, plan, vectors, lm, run_dir, timer, on_batch, on_step, executor=executor
    )
    rows = [g for g in plan_order(run_dir.read_generations()) if g.get("split") == "selection"]
    with timer.time("embedding"):
        scores = score_all(scorer, rows)
    by_key = {s["key"]: s for s in scores}
    chosen = select_betas(pd.DataFrame([{**g, **by_key[g["key"]]} for g in rows]), config)
    run_dir.write_json(SELECTION_FILE, {"grid": config.selection.beta_grid, "concepts": chosen})
    return {k: v["beta"] for k, v in chosen.items()}, stats


def run_phase5(
    config: ExperimentConfig | None = None,
    resume: str | None = None,
    lm=None,
    embedder=None,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    results_dir: str | Path | None = None,
    execution: dict | None = None,
) -> Phase5Result:
    """Run (or resume) the whole Part A grid and log it; returns the parent run's results.

    ``execution`` overrides ``config.execution`` fields (``{"executor": "ray"}``), also on
    a resume: where the rows are generated does not change them."""
    say = progress or (lambda _msg: None)
    timer = Timer()
    run_dir: RunDir | None = None
    if resume:
        run_dir = _locate(resume, results_dir)
        config = run_dir.load_config()
    if config is None:
        raise RunError("run_phase5 needs a config or a run id to resume")
    if execution:
        merged = {**config.execution.model_dump(), **execution}
        try:
            chosen = ExecutionConfig.model_validate(merged)
        except ValueError as exc:  # pydantic's ValidationError
            raise RunError(f"invalid execution settings {execution}: {exc}") from None
        config = config.model_copy(update={"execution": chosen})
    with timer.time("model_load"):
        if lm is None:
            from steering.models import load_model

            say(f"loading model {config.model}")
            lm = load_model(config.model, config.device, config.dtype, config.model_load_format)
        if embedder is None:
            from metrics.embedder import load_embedder

            embedder = load_embedder(config.embedding.model)
    graph = _graph(config)
    layer = lm.check_layer(config.layer if config.layer is not None else lm.default_layer)
    say("preparing classifiers, steering vectors and centroids")
    with timer.time("classifiers"):
        probes = ensure_classifiers(config, lm, graph, layer)
    classifier_run_id = probes.run_id or tracking.remembered_run(probes.directory)
    with timer.time("vectors"):
        vectors = build_vectors(config, lm, graph, probes, layer)
    with timer.time("centroids"):
        scorer = build_scorer(config, graph, embedder)
    ctx = RunContext(
        run_id=resume or "",
        config=config,
        graph=graph,
        model_id=lm.model_id,
        layer=layer,
        alpha=vectors.alpha,
        predictors={k: numeric_metrics(p.metrics) for k, p in probes.probes.items()},
        classifier_run_id=classifier_run_id,
        classifier_dir=str(probes.directory),
        diagnostics={
            "directions": steering_diagnostics(
                vectors.numpy_directions(),
                probes.probes,
                probes.format_axis,
                config.steering.vector_source,
                floor=probes.diagnostics.get("format_axis_floor"),
            )
        },
    )
    if resume:
        tracking.client().update_run(resume, "RUNNING")
    else:
        ctx.run_id = start_parent(ctx, config.tracking.results_dir)
        run_dir = RunDir(config.tracking.results_dir, ctx.run_id)
    assert run_dir is not None
    run_dir.create()
    run_dir.write_config(config)
    run_dir.write_json(RunDir.CENTROIDS, scorer.texts())
    executor = make_executor(config, lm)
    try:
        totals = BatchStats()
        betas = None
        if config.selection.mode == "heldout":
            say(f"run {ctx.run_id}: choosing β per concept on the selection prompts")
            betas, stats = select_strengths(
                config, graph, vectors, lm, run_dir, scorer, timer, on_batch, on_step, executor
            )
            totals.add(stats)
        plan = build_plan(config, graph, vectors, "report", betas)
        say(f"run {ctx.run_id}: generating {len(plan.rows)} rows into {run_dir.path}")
        totals.add(generate(config, plan, vectors, lm, run_dir, timer, on_batch, on_step, executor))
        executor.close()
        tracking.log_metrics(ctx.run_id, {"execution/retries": executor.retries})
        say("scoring, pairing and logging")
        result = score_and_publish(
            ctx, run_dir, scorer, timer, totals.tokens_per_second, totals.seconds
        )
    except BaseException:
        tracking.end_run(ctx.run_id, "KILLED")
        raise
    finally:
        executor.close()
    tracking.end_run(ctx.run_id)
    return result


# Sections a rescore may change: they act on saved texts, not on what was generated.
RESCORE_SECTIONS = ("metrics", "gate", "criteria", "centroids", "embedding")


def rescore_config(run_dir: RunDir, overrides: list[str]) -> ExperimentConfig:
    """The run's config with ``overrides`` applied, refusing any that would need new text."""
    from experiments.config import ConfigError, load_config, parse_override

    for text in overrides:
        path, _ = parse_override(text)
        if path[0] not in RESCORE_SECTIONS:
            raise ConfigError(
                f"rescore cannot change {'.'.join(path)}: it changes what was generated; "
                f"start a new run instead (rescore may change {', '.join(RESCORE_SECTIONS)})"
            )
    run_dir.load_config()  # a clear error when the folder is missing
    return load_config(run_dir.file(RunDir.CONFIG), overrides)


def rescore(
    run_id: str,
    results_dir: str | Path | None = None,
    embedder=None,
    overrides: list[str] | None = None,
) -> Phase5Result:
    """Recompute every score, criterion, figure and log of a finished run from its saved
    generations; no language model is loaded. ``overrides`` may change how texts are
    scored and judged (the gate, thresholds, centroids), never what was generated; the
    run's stored config is updated to say so."""
    started = time.perf_counter()
    run_dir = _locate(run_id, results_dir)
    config = rescore_config(run_dir, list(overrides or []))
    if overrides:
        run_dir.write_config(config)
        tracking.client().set_tag(run_id, "rescored.overrides", "; ".join(overrides))
    try:
        previous = run_dir.read_record(migrate=True)
    except LookupError:
        raise RunError(
            f"run {run_id} has no run record; finish it with `steer-eval run --resume {run_id}`"
        ) from None
    except ValueError as exc:
        raise RunError(
            f"run {run_id}'s record cannot be read by this release ({exc}); start a new run"
        ) from None
    timer = Timer()
    with timer.time("model_load"):
        if embedder is None:
            from metrics.embedder import load_embedder

            embedder = load_embedder(config.embedding.model)
    graph = _graph(config)
    with timer.time("centroids"):
        scorer = build_scorer(config, graph, embedder)
    ctx = RunContext(
        run_id=run_id,
        config=config,
        graph=graph,
        model_id=previous.model_id,
        layer=previous.layer,
        alpha=previous.alpha,
        predictors=previous.predictors,
        classifier_run_id=previous.classifier_run_id,
        classifier_dir=previous.classifier_dir,
        diagnostics=dict(previous.diagnostics),
    )
    result = score_and_publish(
        ctx, run_dir, scorer, timer, previous.tokens_per_second, 0.0, rescore=True
    )
    tracking.log_metrics(run_id, {"rescore/seconds": time.perf_counter() - started})
    tracking.client().set_tag(run_id, "rescored", "true")
    return result


def load_record(run_id: str, results_dir: str | Path | None = None) -> RunRecord:
    """A finished run's record: the local copy, else the MLflow artefact."""
    run = tracking.get_run(run_id)
    run_dir = RunDir.locate(run, results_dir)
    if run_dir.file(RunDir.RECORD).exists():
        return run_dir.read_record()
    import mlflow

    try:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=RunDir.RECORD)
    except Exception as exc:
        raise RunError(f"run {run_id} has no {RunDir.RECORD}; is it a finished run?") from exc
    return RunRecord.parse(Path(path).read_text(), source=f"{run_id}/{RunDir.RECORD}")


__all__ = ["Phase5Result", "RunError", "load_record", "rescore", "run_phase5"]
