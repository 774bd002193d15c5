"""Stage: the run record, and everything a finished run writes and logs.

From the criteria report this builds the typed :class:`~experiments.record.RunRecord`,
writes the run folder's summary, criteria table and figures, and logs the parent run's
metrics, tags and artefacts plus one child run per concept × strength. Publishing
again (after a resume or a rescore) updates what is there instead of duplicating it.

The runner (``kernel/study.run_study``) publishes what this module projects; Phase 5's
study (``phase5/run.py``) calls it. Longer than 500 lines: the record and every
projection of it (folder, metrics, tags, child runs) stay in one module, so a new run, a
resume and a rescore publish through the same code.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.answer import value_interval
from experiments.kernel.diagnostics import log_diagnostics
from experiments.kernel.effect import SIGNS, EffectReport, specificity_margin
from experiments.kernel.publisher import ChildWriter, Views, child_run, close_child
from experiments.phase5.analyse import (
    CriteriaReport,
    cell_metrics,
    concept_magnitudes,
    criteria_metrics,
    criteria_thresholds,
    per_strength,
    strength_label,
)
from experiments.phase5.answer import answer_of
from experiments.phase5.context import RunContext
from experiments.phase5.measurement import MeasurementReport
from experiments.phase5.report import (
    criteria_of,
    figures_of,
    sample_links,
    specificity_matrices,
    summary_text,
)
from experiments.phase5.samples import samples_csv
from experiments.record import (
    CriterionRecord,
    Measurement,
    RunRecord,
    RunStatistics,
    figure_number,
    steered_intervention,
)
from experiments.record.phase5 import NO_INTERVAL
from experiments.rows import View, aggregates, columns, number
from experiments.rundir import RunDir
from experiments.tracking.context import MAX_TAG_LEN
from metrics.intervals import Interval

if TYPE_CHECKING:
    from pathlib import Path

    from experiments.config import Phase5Config

log = logging.getLogger(__name__)
V = TypeVar("V")

# The parent run's per-text table (the run folder's samples.csv, as an MLflow table).
SAMPLES_TABLE = "samples.json"
# A child run's generations table: the row columns declared for it (experiments.rows).
CHILD_TABLE_COLUMNS = columns(View.CHILD_TABLE)


def numeric_metrics(metrics: Mapping[str, object]) -> dict[str, float | None]:
    """A probe's metrics without the nested confusion matrix."""
    return {
        k: (None if v is None else float(v))
        for k, v in metrics.items()
        if v is None or isinstance(v, int | float)
    }


# Config keys that a headline parameter already carries, so each setting is logged once:
# the headline holds the resolved value where the config leaves it to the code (layer
# null -> the middle layer, model 'embedded' -> its id). The whole config, as written,
# is the run's config.yaml artefact.
HEADLINE_KEYS = {
    "model": "model",
    "layer": "layer",
    "seed": "seed",
    "steering.mode": "mode",
    "steering.vector_source": "vector_source",
    "steering.strengths": "strengths",
    "steering.beta": "beta",
    "generation.max_new_tokens": "max_new_tokens",
    "generation.greedy": "greedy",
    "embedding.model": "embedding",
    "classifier.train": "train",
}
PHASE4_TAG = "steer_eval.phase4_run"


def parent_params(ctx: RunContext, n_concepts: int) -> dict[str, object]:
    config = ctx.config
    return deployed_params(ctx) | {
        "model": ctx.model_id,
        "layer": ctx.layer,
        "mode": config.steering.mode,
        "vector_source": config.steering.vector_source,
        "strengths": config.steering.strengths,
        "seed": config.seed,
        "config_hash": config.config_hash(),
        "alpha": round(ctx.alpha, 3),
        "beta": config.steering.beta,
        "n_concepts": n_concepts,
        "max_new_tokens": config.generation.max_new_tokens,
        "greedy": config.generation.greedy,
        "embedding": config.embedding.model,
        "train": config.classifier.train,
    }


def deployed_params(ctx: RunContext) -> dict[str, object]:
    """A vector file steered as deployed: the layers it steered (resolved from the file),
    its scale and coefficient, as headline parameters beside ``layer`` (the run's)."""
    found = steered_intervention(ctx.diagnostics)
    if found is None:
        return {}
    return {"steered_layers": found.layers, "scale": found.scale, "coefficient": found.coefficient}


def run_name(config: Phase5Config, model_id: str, layer: int) -> str:
    """What tells two runs apart: model, layer, direction source, mode (when not the
    default additive) and β (``β heldout`` when chosen per concept)."""
    model = model_id.split(":")[-1].rstrip("/").split("/")[-1]
    mode = "" if config.steering.mode == "additive" else f" {config.steering.mode}"
    steering = config.steering
    beta = "β heldout" if config.selection.mode == "heldout" else f"β={steering.beta:g}"
    if steering.scale == "file":  # a file as deployed: its norms × coefficient k
        beta = f"k={steering.coefficient:g}"
    where = f"L{layer}"
    if steering.layers == "file":
        where += " all file layers"
    elif isinstance(steering.layers, tuple):
        where += f" layers {steering.layers[0]}-{steering.layers[1]}"
    name = "" if config.name == "phase5" else f"{config.name} "
    return f"{name}{model} {where} {steering.vector_source}{mode} {beta}"


def prompt_frame(ctx: RunContext) -> pd.DataFrame:
    """One row per concept × prompt (and split): the prompt set the run generates from."""
    from experiments.kernel.plan import run_rows

    rows: dict[tuple[str, int, str], dict[str, object]] = {}
    for _key, meta in run_rows(ctx.config, ctx.graph):
        rows.setdefault((meta["concept"], meta["prompt_index"], meta["split"]), meta)
    return pd.DataFrame(list(rows.values()), columns=["concept", "prompt_index", "split", "prompt"])


def log_run_inputs(run_id: str, ctx: RunContext, config_path: str | Path) -> None:
    """The concept graph and the prompt set as MLflow datasets of the run."""
    from experiments.tracking.datasets import concept_frame, log_dataset

    log_dataset(
        run_id, concept_frame(ctx.graph), "concept-graph", ctx.config.concepts.file, "concepts"
    )
    log_dataset(run_id, prompt_frame(ctx), "prompt-set", config_path, "prompts")


def cell_table(ctx: RunContext, records: pd.DataFrame) -> pd.DataFrame:
    """One row per concept × strength with its metrics: the parent's ``cells.json``."""
    rows = []
    for (synset, strength), cell in records.groupby(["concept", "strength"], sort=True):
        rows.append(
            {
                "concept": synset,
                "strength": number(strength),
                **cell_metrics(cell),
                f"classifier_{ctx.predictor_name}": ctx.predictor_values().get(str(synset)),
            }
        )
    return pd.DataFrame(rows)


def _child_params(ctx: RunContext, synset: str) -> dict[str, object]:
    c = ctx.config
    return {
        "concept": synset,
        "model": ctx.model_id,
        "layer": ctx.layer,
        "mode": c.steering.mode,
        "vector_source": c.steering.vector_source,
        "beta": c.steering.beta,
        "seed": c.seed,
    }


def log_children(ctx: RunContext, records: pd.DataFrame, update: bool = False) -> int:
    """Per-cell results to the parent's ``cells.json`` (always), and child runs as
    ``tracking.child_runs`` says: one per concept × strength (``per_cell``), one per
    concept with ``<metric>/s_<strength>`` metrics (``per_concept``: 10,000 concepts would
    otherwise be 30,000 runs), or ``none``. Existing children (from a resumed run) are
    kept; with ``update`` (a rescore) their metrics and tables are replaced. A child that
    a killed run left unfinished is filled in (parameters, metrics, table) and finished."""
    tracking.overwrite_table(ctx.run_id, cell_table(ctx, records), "cells.json")
    mode = ctx.config.tracking.child_runs
    if mode == "none":
        return 0
    experiment = ctx.config.experiment
    existing = {r.data.tags.get("cell"): r for r in tracking.child_runs(ctx.run_id, experiment)}
    c = tracking.client()
    logged = 0
    by = ["concept", "strength"] if mode == "per_cell" else ["concept"]
    for group, rows in records.groupby(by, sort=True):
        synset = str(group[0])
        strength = number(group[1]) if mode == "per_cell" else None
        if strength is None:
            cell_key, params = synset, _child_params(ctx, synset)
            metrics: dict[str, float | None] = {}
            for s, cell in rows.groupby("strength", sort=True):
                label = strength_label(number(s))
                metrics.update({f"{k}/s_{label}": v for k, v in cell_metrics(cell).items()})
            table = rows[["strength", *CHILD_TABLE_COLUMNS]].reset_index(drop=True)
            run_name = ctx.graph.get(synset).name
        else:
            cell_key = f"{synset}|{strength:+.3f}"
            params = {**_child_params(ctx, synset), "strength": strength}
            metrics = cell_metrics(rows)
            table = rows[CHILD_TABLE_COLUMNS].reset_index(drop=True)
            run_name = f"{ctx.graph.get(synset).name} s={strength:+g}"
        found = existing.get(cell_key)
        unfinished = found is not None and found.info.status != "FINISHED"
        if found is not None and not (update or unfinished):
            continue
        metrics[f"classifier_{ctx.predictor_name}"] = ctx.predictor_values().get(synset)
        if found is not None:
            child = found.info.run_id
            if unfinished:  # killed while it was being logged: it may lack its parameters
                tracking.log_new_params(child, params)
            tracking.log_metrics(child, metrics)
            tracking.overwrite_table(child, table, "generations.json")
            if unfinished:
                close_child(child)
                logged += 1
            continue
        with child_run(ctx.run_id, experiment, run_name, {"cell": cell_key, "phase": "5"}) as child:
            tracking.log_params_and_metrics(child, params, metrics)
            c.log_table(child, table, "generations.json")
        logged += 1
    return logged


def strength_metrics(agg: dict[float, dict[str, float | None]]) -> dict[str, float | None]:
    """The per-strength aggregates declared for MLflow (``<name>/s_<strength>``); the
    seed design's own measures go under ``seed/`` (docs/mlflow.md)."""
    out: dict[str, float | None] = {}
    for strength, values in agg.items():
        label = strength_label(strength)
        for _column, aggregate in aggregates(View.PER_STRENGTH):
            name = f"seed/{aggregate.name}" if aggregate.seed_measure else aggregate.name
            out[f"{name}/s_{label}"] = values.get(aggregate.name)
    return out


def _seed_prefixed(values: dict[str, V]) -> dict[str, V]:
    """Under ``seed/...``, except criterion 4 (human or panel), which is shared by both
    criteria sets and stays under ``criterion/...``."""
    return {key if "c4_" in key else f"seed/{key}": value for key, value in values.items()}


def _ends(prefix: str, interval: Interval) -> dict[str, float | None]:
    """``<prefix>_mean``, ``_low`` and ``_high``: an effect summary's metric names."""
    ends = ("mean", interval.estimate), ("low", interval.low), ("high", interval.high)
    return {f"{prefix}_{suffix}": value for suffix, value in ends}


def record_metrics(record: RunRecord) -> dict[str, float | None]:
    """The parent run's MLflow metrics, every one read from the record."""
    metrics = strength_metrics({float(k): v for k, v in record.per_strength.items()})
    metrics.update(_seed_prefixed(criteria_metrics(criteria_of(record, v2=False))))
    for name, arm in record.statistics.effect.items():
        metrics[f"effect/{name}/n"] = arm.n
        for outcome, interval in arm.outcomes.items():
            metrics.update(_ends(f"effect/{name}/{outcome}", interval))
        metrics[f"effect/{name}/gate_pass_fraction"] = arm.gate_pass_fraction
        metrics[f"effect/{name}/direction_fraction"] = arm.direction_fraction
    for name, null in record.statistics.above_null.items():
        metrics[f"effect/{name}/n"] = null.n
        metrics.update(_ends(f"effect/{name}/gated", null.gated or Interval()))
        metrics.update(_ends(f"effect/{name}/ungated", null.ungated))
    intervals = record.statistics.intervals
    for key, result in criteria_of(record, v2=True).items():
        metrics[f"v2/criterion/{key}"] = result.metric_value()
        metrics[f"v2/criterion/{key}/value"] = result.value
        metrics[f"v2/criterion/{key}/low"] = intervals.get(key, NO_INTERVAL).low
        metrics[f"v2/criterion/{key}/high"] = intervals.get(key, NO_INTERVAL).high
    for label, matrix in specificity_matrices(record).items():
        metrics[f"specificity/{label}/margin"] = specificity_margin(matrix)
    f1c = record.statistics.f1_vs_magnitude
    if f1c.get("evaluable"):
        for key in ("r", "p_value", "ci_low", "ci_high"):
            metrics[f"seed/f1_vs_magnitude/{key}"] = figure_number(f1c.get(key))
    predictor = record.predictor()
    if predictor:
        name = record.config.criteria.predictor
        metrics[f"mean_classifier_{name}"] = float(np.mean(list(predictor.values())))
    if record.statistics.measurement is not None:
        metrics.update(measurement_metrics(record.statistics.measurement))
    betas = ((synset, values.get("beta")) for synset, values in record.per_concept.items())
    return metrics | {
        "n_generations": float(record.n_generations),
        "alpha": record.alpha,  # α and β are parameters too; as metrics they chart
        "beta": record.beta,
        **{f"beta/{synset}": beta for synset, beta in betas if beta is not None},
    }


def _interval_metrics(prefix: str, interval: Interval) -> dict[str, float | None]:
    """``prefix`` (the estimate) and ``prefix/low``, ``prefix/high`` of an interval."""
    return {prefix: interval.estimate, f"{prefix}/low": interval.low,
            f"{prefix}/high": interval.high}  # fmt: skip


def measurement_metrics(measurement: Measurement) -> dict[str, float | None]:
    """Each measure's reliability (``reliability/<measure>``, with its interval where
    one was computed) and each correlation observed and corrected for unreliability
    (``correlation/<pair>/observed|corrected``, with ``/low`` and ``/high``), so runs can
    be compared on them in the runs table (the record keeps the reasons)."""
    out: dict[str, float | None] = {}
    for name, rel in measurement.reliability.items():
        out[f"reliability/{name}"] = rel.estimate
        if rel.interval is not None and rel.interval.low is not None:
            out[f"reliability/{name}/low"] = rel.interval.low
            out[f"reliability/{name}/high"] = rel.interval.high
    for name, pair in measurement.corrected_correlations.items():
        for which, interval in (("observed", pair.observed), ("corrected", pair.corrected)):
            out.update(_interval_metrics(f"correlation/{name}/{which}", interval))
    return out


def threshold_params(record: RunRecord) -> dict[str, float]:
    """Every criterion's threshold as a parameter, named as its verdict metric is."""
    return {
        **_seed_prefixed(criteria_thresholds(criteria_of(record, v2=False))),
        **criteria_thresholds(criteria_of(record, v2=True), prefix="v2/"),
    }


def run_note(ctx: RunContext) -> str:
    """The description's header: where the classifiers came from and what else is here."""
    lines = []
    if ctx.classifier_run_id:
        try:
            phase4 = tracking.get_run(ctx.classifier_run_id)
            link = f"#/experiments/{phase4.info.experiment_id}/runs/{ctx.classifier_run_id}"
            lines.append(
                f"Classifiers: Phase 4 run [{phase4.info.run_name}]({link}) "
                f"(`{ctx.classifier_run_id}`)."
            )
        except LookupError:
            lines.append(f"Classifiers: Phase 4 run `{ctx.classifier_run_id}` (not in this store).")
    if ctx.config.tracking.traces:
        lines.append(
            "One trace per generation (Traces tab): inputs concept, prompt, strength, seed; "
            "feedback Δ, effect and coherence from code, human ratings and judge scores "
            "once imported."
        )
    return "".join(f"> {line}\n>\n" for line in lines) + ("\n" if lines else "")


def build_record(
    ctx: RunContext,
    records: pd.DataFrame,
    report: CriteriaReport,
    effect: EffectReport,
    timings: dict[str, float],
    tokens_per_second: float,
    previous: RunRecord | None = None,
    betas: dict[str, float] | None = None,
    measurement: MeasurementReport | None = None,
) -> RunRecord:
    """The typed record; criteria set later (criterion 4 from Parts B and C) are kept."""
    criteria = {k: CriterionRecord.of(v) for k, v in report.results.items()}
    criteria.update({k: CriterionRecord.of(v) for k, v in effect.criteria.items()})
    per_concept: dict[str, dict[str, float | None]] = {
        k: {"magnitude": v} for k, v in concept_magnitudes(records).items()
    }
    for synset, values in effect.per_concept.items():
        per_concept.setdefault(synset, {}).update(values)
    for synset, beta in (betas or {}).items():
        per_concept.setdefault(synset, {})["beta"] = beta
    for synset, values in (measurement.per_concept if measurement else {}).items():
        per_concept.setdefault(synset, {}).update(values)
    if previous is not None:  # Parts B and C's verdicts outlive a rescore
        for key, stored in previous.criteria.items():
            if key.startswith(("c4", "v2_c4")) and stored.status != "pending":
                criteria[key] = stored
    return RunRecord(
        run_id=ctx.run_id,
        experiment=ctx.config.experiment,
        config=ctx.config,
        model_id=ctx.model_id,
        layer=ctx.layer,
        alpha=ctx.alpha,
        beta=ctx.config.steering.beta,
        classifier_run_id=ctx.classifier_run_id,
        classifier_dir=ctx.classifier_dir,
        predictors=ctx.predictors,
        per_strength={str(k): v for k, v in per_strength(records).items()},
        per_concept=per_concept,
        criteria=criteria,
        statistics=RunStatistics(
            f1_vs_magnitude=report.f1_correlation.to_dict(),
            effect=effect.summary,
            above_null=effect.above,
            intervals=effect.intervals,
            slopes=effect.slopes,
            measurement=measurement.statistics if measurement else None,
        ),
        diagnostics={
            **ctx.diagnostics,  # "directions": the steering directions' cosines
            **{
                f"specificity_{SIGNS[sign]}": matrix.to_dict()
                for sign, matrix in effect.specificity.items()
            },
        },
        detection=ctx.detection,
        n_generations=len(records),
        timings=dict(timings),
        tokens_per_second=tokens_per_second,
        layer_choice=ctx.layer_choice,
    )


def views(
    ctx: RunContext,
    record: RunRecord,
    records: pd.DataFrame,
    samples: pd.DataFrame | None = None,
) -> Views:
    """What Phase 5 shows of its record (the publisher writes and mirrors it);
    ``samples``: the per-text table (``phase5/samples.py``), when the caller made it."""
    figures = figures_of(ctx, record, records)
    if samples is not None and samples.empty:
        samples = None
    has_samples = samples is not None
    texts = sample_links(record.run_id) if has_samples else {}
    return Views(
        answer=answer_of(record, tuple(sorted(figures)), texts),
        summary=summary_text(record, ctx),
        figures=figures,
        metrics=record_metrics(record),
        tags={
            "criteria": ", ".join(f"{k}={v.status}" for k, v in record.criteria.items()),
            **{f"criterion.{k}": v.status for k, v in record.criteria.items()},
            **reason_tags(record),
            **corrected_tags(record),
        },
        params=threshold_params(record),
        files={RunDir.SAMPLES: samples_csv(samples)} if samples is not None else {},
        tables={SAMPLES_TABLE: samples} if samples is not None else {},
        artefacts=(
            RunDir.GENERATIONS,
            RunDir.SCORES,
            RunDir.CONFIG,
            RunDir.CENTROIDS,
            *((RunDir.SAMPLES,) if has_samples else ()),
        ),
        note_header=run_note(ctx),
        experiment=record.experiment,
        also_note=(record.config.tracking.classifier_experiment,),
    )


CORRECTED_PAIRS = ("predictor_vs_effect",)


def corrected_tag_key(pair: str, sign: str) -> str:
    """The tag (runs-table column) of a correlation corrected for unreliability, sign
    first as the verdicts' (``pos corrected predictor vs effect``)."""
    return f"{sign} corrected {pair.replace('_', ' ')}"


def corrected_tags(record: RunRecord) -> dict[str, str]:
    """Each headline correlation corrected for unreliability as a formatted cell
    (``+0.512 [+0.100, +0.800]``; its reason when it could not be corrected), beside the
    observed verdict's in the runs table."""
    measurement = record.statistics.measurement
    corrected = measurement.corrected_correlations if measurement is not None else {}
    out = {}
    for pair in CORRECTED_PAIRS:
        for sign in ("pos", "neg"):
            if (found := corrected.get(f"{pair}_{sign}")) is None:
                continue
            d = found.corrected
            shown = value_interval(d.estimate, d.low, d.high)
            if shown or d.reason:
                out[corrected_tag_key(pair, sign)] = (shown or f"n/a ({d.reason})")[:MAX_TAG_LEN]
    return out


def reason_tags(record: RunRecord) -> dict[str, str]:
    """``criterion.<key>.reason`` for each criterion that is not evaluable: why, as the
    answer says it (criterion 4 is left out: Parts B and C retag its status later)."""
    return {
        f"criterion.{k}.reason": c.reason[:MAX_TAG_LEN]
        for k, c in record.criteria.items()
        if c.status == "not_evaluable" and c.reason and "c4_" not in k
    }


def previous_record(run_dir: RunDir) -> RunRecord | None:
    """The record a resume or rescore publishes over (Parts B and C's verdicts live in
    it); None for a new run or one whose record this release cannot read."""
    if not run_dir.file(RunDir.RECORD).exists():
        return None
    try:
        return run_dir.read_record(migrate=True)
    except (LookupError, ValueError):
        return None


def child_writer(ctx: RunContext, records: pd.DataFrame, update: bool) -> ChildWriter:
    """Phase 5's child runs (``log_children``: filled in on a resume, updated on a
    rescore) and the directions' diagnostics, written once the parent is mirrored."""

    def write(run_id: str) -> None:
        n = log_children(ctx, records, update=update)
        log_diagnostics(run_id, ctx.diagnostics.get("directions", {}))
        log.info("logged %d child runs", n)

    return ChildWriter(write)
