"""Phase 5 Part A as a study: a composition of stages, plus resume and rescore.

``RunConfig → ConceptGraph → ProbeSet → VectorSet → GenerationPlan →
generations.jsonl → scores.jsonl → CriteriaReport → RunRecord → MLflow``

Phase 5 is an instance of the Study contract (:mod:`experiments.kernel.study`), run by
the one runner: one parent MLflow run per invocation, ending FINISHED, KILLED (Ctrl-C)
or FAILED, and one child run per concept × strength. Each generation batch is appended
to the run folder as soon as it finishes, so ``steer-eval run --resume <run id>``
finishes an interrupted run without redoing or losing anything (row seeds do not depend
on batching); ``steer-eval rescore <run id>`` (:class:`Phase5Rescore`) recomputes every
score, criterion and log from the saved texts without the model. Longer than 500 lines:
the new, resumed and rescored runs share one prepared context and one sequence of stage
calls, kept in one module rather than copied per entry point.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from experiments import tracking
from experiments.config import ConfigError, Phase, Phase5Config, RunConfig
from experiments.kernel.classifiers import ensure_classifiers
from experiments.kernel.diagnostics import steering_diagnostics
from experiments.kernel.effect import EffectReport, evaluate_effect
from experiments.kernel.generate import generate
from experiments.kernel.layers import choice_tags
from experiments.kernel.lifecycle import RunError, RunSession
from experiments.kernel.plan import CONCEPT_ARM, build_plan, run_rows
from experiments.kernel.probes import ProbeSet
from experiments.kernel.publisher import ChildWriter, Views
from experiments.kernel.score import Scorer, build_scorer, score_all
from experiments.kernel.selection import select_strengths
from experiments.kernel.study import (
    Begun,
    Finished,
    Opening,
    Resume,
    config_params,
    run_study,
)
from experiments.kernel.vectors import VectorSet, build_vectors
from experiments.phase5.analyse import (
    CriteriaReport,
    add_paired_shifts,
    evaluate_criteria,
    per_strength,
)
from experiments.phase5.context import RunContext
from experiments.phase5.likelihood import score_likelihood, texts_for
from experiments.phase5.measurement import MeasurementReport, measure
from experiments.phase5.per_concept import concept_intervals
from experiments.phase5.publish import (
    HEADLINE_KEYS,
    PHASE4_TAG,
    build_record,
    child_writer,
    log_run_inputs,
    numeric_metrics,
    parent_params,
    previous_record,
    run_name,
    views,
)
from experiments.phase5.reference_gap import reference_gaps
from experiments.phase5.samples import sample_table
from experiments.record import LayerChoice, RunRecord
from experiments.rundir import RESCORED_TAG, RunDir, join_scores, plan_order
from experiments.strength_range import BETA_TAG, choose_beta, load_range
from experiments.timer import Timer
from metrics.criteria import CriterionResult
from steering.generation import BatchStats

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from steering.models import LoadedModel

Progress = Callable[[int, int], None]


@dataclass
class Phase5Result:
    """A finished Phase 5 run: its record, and beside it what the record does not hold
    (the scored rows, the criteria as computed, the per-strength means keyed by β)."""

    record: RunRecord
    results_dir: Path
    records: pd.DataFrame
    criteria: dict[str, CriterionResult]
    per_strength: dict[float, dict[str, float | None]]
    effect: EffectReport | None = None

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def timings(self) -> dict[str, float]:
        return dict(self.record.timings)

    @property
    def tokens_per_second(self) -> float:
        return self.record.tokens_per_second


@dataclass(frozen=True)
class Scored:
    """What Phase 5's stages produce beside the record, for its views and child runs."""

    ctx: RunContext
    records: pd.DataFrame  # every row, joined with its scores, in plan order
    seed_rows: pd.DataFrame  # the concept arm's report rows, with paired shifts
    report: CriteriaReport
    effect: EffectReport
    samples: pd.DataFrame
    generation_seconds: float
    update_children: bool  # a rescore replaces the children's metrics and tables


def read_betas(run_dir: RunDir) -> dict[str, float] | None:
    path = run_dir.file(RunDir.SELECTION)
    if not path.exists():
        return None
    return {k: v["beta"] for k, v in json.loads(path.read_text())["concepts"].items()}


def score(
    ctx: RunContext,
    run_dir: RunDir,
    scorer: Scorer,
    timer: Timer,
    tokens_per_second: float,
    generation_seconds: float,
    rescore: bool = False,
) -> Finished[RunRecord, Scored]:
    """Score the saved generations, judge the criteria and build the record: the
    model-free tail shared by a fresh run, a resumed one and a rescore."""
    generations = run_dir.read_generations()
    betas = read_betas(run_dir)
    expected = {k for k, _ in run_rows(ctx.config, ctx.graph, betas)}
    missing = expected - {g["key"] for g in generations}
    if missing:
        raise RunError(
            f"{len(missing)} generations are missing; resume with "
            f"`steer-eval run --resume {ctx.run_id}`"
        )
    with timer.time("embedding"):
        scores = score_all(scorer, generations)
    run_dir.write_scores(scores)
    with timer.time("analysis"):
        records = pd.DataFrame(join_scores(plan_order(run_dir.read_generations()), scores))
        seed_rows = records[(records["arm"] == CONCEPT_ARM) & (records["split"] == "report")]
        seed_rows = add_paired_shifts(seed_rows.reset_index(drop=True))
        predictor = ctx.predictor_values()  # criteria.predictor, f1_calibrated by default
        report = evaluate_criteria(seed_rows, predictor, ctx.config.criteria)
        effect = evaluate_effect(records, predictor, ctx.config)
        for synset, values in concept_intervals(records, ctx.config).items():
            effect.per_concept.setdefault(synset, {}).update(values)
    with timer.time("measurement"):
        texts = texts_for(run_dir, ctx.config, ctx.graph)
        measurement: MeasurementReport = measure(
            effect,
            ctx.config,
            ctx.detection,
            run_dir.read_likelihood(),
            reference_gaps(scorer, texts),
            texts.unpaired,
        )
    # The traces and their evaluation before the record, so its timings hold them.
    if ctx.config.tracking.traces:
        from experiments.phase5.tracing import log_traces

        with timer.time("traces"):
            log_traces(ctx, run_dir, records, rescore=rescore)
        if ctx.config.tracking.evaluation:
            from experiments.phase5.evaluation import log_evaluation

            with timer.time("evaluation"):
                log_evaluation(ctx, run_dir, records)
    record = build_record(
        ctx,
        seed_rows,
        report,
        effect,
        timer.stages,
        tokens_per_second,
        previous_record(run_dir),
        betas,
        measurement,
    )
    samples = sample_table(records, ctx.config, measurement.per_concept, run_dir)
    scored = Scored(ctx, records, seed_rows, report, effect, samples, generation_seconds, rescore)
    return Finished(record, scored)


class Phase5Shown:
    """What every Phase 5 study (run, resume, rescore) shows of its scored record: the
    views (``phase5/publish.views``, with the generation's speed when this invocation
    generated) and the per-cell child runs (updated in place by a rescore)."""

    phase: Phase = "phase5"
    record_file: str = RunDir.RECORD

    def views(self, record: RunRecord, scored: Scored) -> Views:
        shown = views(scored.ctx, record, scored.seed_rows, scored.samples)
        if scored.generation_seconds > 0:
            shown.metrics["generation/tokens_per_second"] = record.tokens_per_second
            shown.metrics["generation/seconds"] = scored.generation_seconds
        return shown

    def children(self, record: RunRecord, scored: Scored) -> ChildWriter:
        return child_writer(scored.ctx, scored.seed_rows, scored.update_children)


def phase5_result(record: RunRecord, run_dir: Path, scored: Scored) -> Phase5Result:
    return Phase5Result(
        record,
        run_dir,
        scored.seed_rows,
        scored.report.results,
        per_strength(scored.seed_rows),
        scored.effect,
    )


@dataclass
class Prepared:
    """A Phase 5 run's inputs, built from its session: what it steers with and scores by."""

    layer: int
    probes: ProbeSet
    vectors: VectorSet
    scorer: Scorer
    beta_note: str | None = None  # where a new run's β came from (strength_range.py)
    layer_choice: LayerChoice | None = None  # how ``--layer auto``/``auto-effect`` chose
    # the layer (a resumed run's as its first invocation kept it)
    # the record's diagnostics of the directions steered with, and the Phase 4 run whose
    # classifiers they came from: worked out once here, read by every ``run_context``
    diagnostics: dict[str, object] = field(default_factory=dict)
    classifier_run_id: str | None = None


def prepare(session: RunSession[Phase5Config], explicit: frozenset[str] = frozenset()) -> Prepared:
    """Classifiers (trained when missing), β (a new run's, from the model's recorded
    strength range where one is: ``choose_beta``; ``explicit`` the keys given on the
    command line), steering vectors and centroids."""
    config, lm, graph, timer = session.config, session.model, session.graph, session.timer
    layer = session.layer()
    session.say("preparing classifiers, steering vectors and centroids")
    with timer.time("classifiers"):
        probes = ensure_classifiers(config, lm, graph, layer)
    note = None
    if not session.existing:  # a resumed run keeps the β its stored config holds
        choice = choose_beta(config, load_range(probes.directory), probes.directory, explicit)
        config = session.config = choice.config
        note = choice.message
        session.say(note)
    with timer.time("vectors"):
        vectors = build_vectors(config, lm, graph, probes, layer)
    if config.steering.vector_source == "file":
        from experiments.phase5.imported import imported_detection

        session.say("scoring the imported directions as detectors on the probes' test texts")
        with timer.time("imported_detection"):
            probes = imported_detection(config, lm, graph, probes, vectors, layer)
    with timer.time("centroids"):
        scorer = build_scorer(config, graph, session.text_embedder)
    return Prepared(layer, probes, vectors, scorer, note)


def with_provenance(config: RunConfig, prep: Prepared) -> Prepared:
    """``prep`` with the record's diagnostics of its directions and the Phase 4 run whose
    classifiers it uses, worked out once for every ``run_context`` of the run."""
    probes, vectors = prep.probes, prep.vectors
    diagnostics = {
        "directions": steering_diagnostics(
            vectors.numpy_directions(),
            probes.probes,
            probes.format_axis,
            config.steering.vector_source,
            floor=probes.diagnostics.get("format_axis_floor"),
        ),
        **vectors.import_diagnostics(),
    }
    phase4 = probes.run_id or tracking.remembered_run(probes.directory)
    return replace(prep, diagnostics=diagnostics, classifier_run_id=phase4)


def run_context(session: RunSession[Phase5Config], prep: Prepared, run_id: str) -> RunContext:
    """The run's context, assembled from what was prepared once its parent run is open
    and its id known (``started`` and ``stages`` each assemble it; nothing is recomputed)."""
    config, probes, vectors = session.config, prep.probes, prep.vectors
    return RunContext(
        run_id=run_id,
        config=config,
        graph=session.graph,
        model_id=session.model.model_id,
        layer=prep.layer,
        alpha=vectors.alpha,
        predictors={k: numeric_metrics(p.metrics) for k, p in probes.probes.items()},
        classifier_run_id=prep.classifier_run_id,
        classifier_dir=str(probes.directory),
        detection={
            k: {
                "test_scores": p.metrics["test_scores"],
                "test_labels": p.metrics["test_labels"],
                "threshold": p.metrics.get("threshold"),
            }
            for k, p in probes.probes.items()
            if "test_scores" in p.metrics
        },
        diagnostics=dict(prep.diagnostics),
        layer_choice=prep.layer_choice,
    )


class Phase5(Phase5Shown):
    """Phase 5 Part A, new or resumed (a :class:`~experiments.kernel.study.Study`)."""

    def __init__(
        self,
        explicit: frozenset[str] = frozenset(),
        on_batch: Progress | None = None,
        on_step: Progress | None = None,
        layer_choice: LayerChoice | None = None,
    ) -> None:
        self.explicit = explicit  # the config keys the command line set (a β of one's own)
        self.layer_choice = layer_choice  # the rule that chose the layer, and its table
        self.on_batch, self.on_step = on_batch, on_step

    def begin(self, session: RunSession[Phase5Config]) -> Begun[Prepared]:
        """Classifiers, vectors and β (their layer names the run), and how the layer was
        chosen: this invocation's rule, or a resumed run's as its first kept it."""
        prep = prepare(session, self.explicit)  # a new run's β set in its config here
        prep = replace(with_provenance(session.config, prep), layer_choice=self.layer_choice)
        if session.existing is not None:
            kept = session.directory.file(RunDir.LAYER_CHOICE)
            if kept.exists():
                prep = replace(prep, layer_choice=LayerChoice.model_validate_json(kept.read_text()))
        name = run_name(session.config, session.model.model_id, prep.layer)
        tags = {"phase": "5", **({BETA_TAG: prep.beta_note} if prep.beta_note else {})}
        if self.layer_choice is not None:
            tags |= choice_tags(self.layer_choice)
        return Begun(Opening(name, tags), prep)

    def started(
        self, session: RunSession[Phase5Config], new: bool, prep: Prepared
    ) -> dict[str, object]:
        run_dir = session.directory
        if new and prep.layer_choice is not None:
            run_dir.write_json(RunDir.LAYER_CHOICE, prep.layer_choice.model_dump(mode="json"))
        ctx = run_context(session, prep, session.parent_id)
        if new:  # its inputs, and the Phase 4 run whose classifiers it uses
            if ctx.classifier_run_id:
                tracking.client().set_tag(ctx.run_id, PHASE4_TAG, ctx.classifier_run_id)
            log_run_inputs(ctx.run_id, ctx, run_dir.file(RunDir.CONFIG))
        run_dir.write_json(RunDir.CENTROIDS, prep.scorer.texts())
        # every setting not already a headline parameter, as config.<dotted key>
        return {
            **parent_params(ctx, len(ctx.graph.concepts)),
            **config_params(ctx.config, frozenset(HEADLINE_KEYS)),
        }

    def stages(
        self, session: RunSession[Phase5Config], prep: Prepared
    ) -> Finished[RunRecord, Scored]:
        ctx = run_context(session, prep, session.parent_id)  # as started made it
        config, graph, timer, say = session.config, session.graph, session.timer, session.say
        run_dir = session.directory
        totals = BatchStats()
        betas = None
        if config.selection.mode == "heldout":
            say(f"run {ctx.run_id}: choosing β per concept on the selection prompts")
            chosen, stats = select_strengths(
                session, config, prep.vectors, prep.scorer, self.on_batch, self.on_step
            )
            grid = config.selection.beta_grid
            run_dir.write_json(RunDir.SELECTION, {"grid": grid, "concepts": chosen})
            betas = {k: v["beta"] for k, v in chosen.items()}
            totals.add(stats)
        plan = build_plan(config, graph, prep.vectors, "report", betas)
        say(f"run {ctx.run_id}: generating {len(plan.rows)} rows into {run_dir.path}")
        totals.add(generate(session, plan, prep.vectors, self.on_batch, self.on_step))
        session.close_executor()
        tracking.log_metrics(ctx.run_id, {"execution/retries": session.executor.retries})
        if config.likelihood.enabled:
            say("the likelihood outcome of every direction")
            with timer.time("likelihood"):
                score_likelihood(
                    config, graph, session.model, prep.vectors, run_dir, betas, say=say
                )
        say("scoring, pairing and logging")
        return score(ctx, run_dir, prep.scorer, timer, totals.tokens_per_second, totals.seconds)


@dataclass(frozen=True)
class Rescoring:
    """What a rescore prepares from the finished run: its context as the record kept
    it, the scorer rebuilt from the (possibly overridden) config, the run's speed."""

    ctx: RunContext
    scorer: Scorer
    tokens_per_second: float


class Phase5Rescore(Phase5Shown):
    """A finished Phase 5 run scored again from its saved texts, with no model."""

    def __init__(self, overrides: list[str]) -> None:
        self.overrides = overrides

    def begin(self, session: RunSession[Phase5Config]) -> Begun[Rescoring]:
        run_dir, run_id = session.directory, session.existing
        assert run_id is not None
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
        with session.timer.time("centroids"):
            scorer = build_scorer(session.config, session.graph, session.text_embedder)
        ctx = RunContext(
            run_id=run_id,
            config=session.config,
            graph=session.graph,
            model_id=previous.model_id,
            layer=previous.layer,
            alpha=previous.alpha,
            predictors=previous.predictors,
            classifier_run_id=previous.classifier_run_id,
            classifier_dir=previous.classifier_dir,
            diagnostics=dict(previous.diagnostics),
            detection=dict(previous.detection),
            layer_choice=previous.layer_choice,
        )
        # reopened: its name and tags are kept
        return Begun(Opening("", {}), Rescoring(ctx, scorer, previous.tokens_per_second))

    def started(
        self, session: RunSession[Phase5Config], new: bool, prepared: Rescoring
    ) -> dict[str, object]:
        """The rescore's own config beside the run's (``config.yaml`` stays as the run
        made it: ``RunDir.write_rescored_config``), what it changed as the runs table's
        ``rescored with`` tag, and its command (``tracked_run`` keeps the run's own)."""
        import sys

        from experiments.tracking.context import RESCORE_COMMAND_TAG, is_cli

        run_id = session.parent_id
        changes = session.directory.write_rescored_config(session.config)
        tags = {"rescored.overrides": "; ".join(self.overrides)} if self.overrides else {}
        if not is_cli(sys.argv):  # a call from Python: no command line to keep
            tags[RESCORE_COMMAND_TAG] = f"rescore({run_id!r}, overrides={self.overrides!r})"
        if changes:
            tags[RESCORED_TAG] = "; ".join(changes)
        elif RESCORED_TAG in tracking.get_run(run_id).data.tags:  # back to the run's own
            tracking.client().delete_tag(run_id, RESCORED_TAG)
        tracking.set_tags(run_id, tags)
        return {}

    def views(self, record: RunRecord, scored: Scored) -> Views:
        shown = super().views(record, scored)
        shown.artefacts = (*shown.artefacts, RunDir.RESCORED_CONFIG)
        return shown

    def stages(
        self, session: RunSession[Phase5Config], prepared: Rescoring
    ) -> Finished[RunRecord, Scored]:
        return score(
            prepared.ctx, session.directory, prepared.scorer, session.timer,
            prepared.tokens_per_second, 0.0, rescore=True,
        )  # fmt: skip


def run_phase5(
    config: RunConfig | None = None,
    resume: str | None = None,
    lm: LoadedModel | None = None,
    embedder: SentenceTransformer | None = None,
    progress: Callable[[str], None] | None = None,
    on_batch: Progress | None = None,
    on_step: Progress | None = None,
    results_dir: str | Path | None = None,
    execution: dict[str, Any] | None = None,
    overrides: list[str] | None = None,
    explicit: frozenset[str] = frozenset(),
    layer_choice: LayerChoice | None = None,
) -> Phase5Result:
    """Run (or resume) the whole Part A grid and log it; returns the parent run's results.

    ``execution`` overrides ``config.execution`` fields (``{"executor": "ray"}``), also on
    a resume: where the rows are generated does not change them. ``overrides``
    (``--set`` on a resume) may change scoring only (``lifecycle.scoring_config``).
    ``explicit``: the config keys the command line set (a β of one's own is kept).
    ``layer_choice``: how ``--layer auto``/``auto-effect`` chose ``config.layer``
    (``kernel/layers.py``), kept in the record and the tags."""
    if overrides and not resume:
        raise RunError("overrides apply to a resume; give a new run its config with them")
    if config is not None and not isinstance(config, Phase5Config):
        raise ConfigError(f"run takes a Phase 5 config (phase: phase5), not {config.phase!r}")
    ran = run_study(
        Phase5(explicit, on_batch, on_step, layer_choice),
        config,
        resume=Resume(resume, "resume", tuple(overrides or ())) if resume else None,
        results_dir=results_dir,
        execution=execution,
        lm=lm,
        embedder=embedder,
        progress=progress,
    )
    return phase5_result(ran.record, ran.run_dir, ran.products)


def rescore(
    run_id: str,
    results_dir: str | Path | None = None,
    embedder: SentenceTransformer | None = None,
    overrides: list[str] | None = None,
) -> Phase5Result:
    """Recompute every score, criterion, figure and log of a finished run from its saved
    generations; no language model is loaded. ``overrides`` may change how texts are
    scored and judged (the gate, thresholds, centroids), never what was generated; they
    apply on top of an earlier rescore's, and the config they make is kept beside the
    run's own as ``config.rescored.yaml`` (``config.yaml`` is never rewritten)."""
    started = time.perf_counter()
    overrides = list(overrides or [])
    ran = run_study(
        Phase5Rescore(overrides),
        resume=Resume(run_id, "rescore", tuple(overrides)),
        results_dir=results_dir,
        embedder=embedder,
    )
    tracking.log_metrics(run_id, {"rescore/seconds": time.perf_counter() - started})
    tracking.client().set_tag(run_id, "rescored", "true")
    return phase5_result(ran.record, ran.run_dir, ran.products)


__all__ = [
    "Phase5",
    "Phase5Rescore",
    "Phase5Result",
    "Prepared",
    "RunError",
    "prepare",
    "rescore",
    "run_context",
    "run_phase5",
]
