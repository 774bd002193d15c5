"""The identification study's views of its record: files, figures, MLflow parent and
children (the publisher, ``kernel/publisher.py``, writes and mirrors them).

The parent run (experiment ``phase6-identify``) carries the slopes, the mediation
result, the minimum effective levels, the predictor ranking, the primary analysis and
the figures (per-concept trajectories of AUROC against the effect coloured by
manipulation; slopes; dose–response; predictors; the generation check), with the
answer and summary markdown at the top of its description. One child run per
manipulation carries its curve (a table and a figure) and its own slopes.
"""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pandas as pd

from experiments.identify.answer import answer_of
from experiments.identify.estimation.cells import StudyTables
from experiments.identify.figures import figures, manipulation_figure
from experiments.identify.summary import summary_markdown
from experiments.kernel.publisher import ChildRun, Views
from experiments.record import IdentifyRecord, ManipulationResult
from experiments.rundir import RunDir
from metrics.intervals import Interval


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_-./" else "_" for ch in text)


def put_interval(metrics: dict[str, float | None], name: str, fit: Interval | None) -> None:
    """``name``, ``name/low``, ``name/high`` of an interval, each where it is a finite number."""
    if fit is not None:
        for value, suffix in ((fit.estimate, ""), (fit.low, "/low"), (fit.high, "/high")):
            if value is not None and np.isfinite(value):
                metrics[f"{name}{suffix}"] = float(value)


def manipulation_metrics(
    result: ManipulationResult,
) -> tuple[dict[str, float | None], dict[str, str]]:
    """Metrics and status tags of one manipulation (names without the manipulation)."""
    metrics: dict[str, float | None] = {}
    tags: dict[str, str] = {}
    put_interval(metrics, "slope_auroc", result.slope_auroc)
    for key, interval in result.partial.items():
        put_interval(metrics, f"partial/{key}", interval)
    med = result.mediation
    if med.evaluable:
        for key in ("total_auroc", "direct_auroc", "cos_ref", "share_via_cos"):
            put_interval(metrics, f"mediation/{key}", getattr(med, key))
    for m in result.minimum_effective:
        name = f"min_auroc/f{m.fraction:g}"
        tags[name.replace("/", ".")] = m.status
        if m.level is not None and m.level.estimate is not None:
            put_interval(metrics, name, m.level)
    for p, d in result.predictors.items():
        put_interval(metrics, f"within_r/{p}", d.observed)
        put_interval(metrics, f"within_r_disattenuated/{p}", d.corrected)
        put_interval(metrics, f"reliability/{p}", d.reliability_x)
        put_interval(metrics, "reliability/effect", d.reliability_y)
    for term in result.mixed.terms:
        put_interval(metrics, f"mixed/{term}", result.mixed.term(term))
    return metrics, tags


def parent_metrics(record: IdentifyRecord) -> tuple[dict[str, float | None], dict[str, str]]:
    """The parent run's metrics and tags, read from the typed record: every
    manipulation's (prefixed), the pooled slopes and tests, the primary, each estimand
    (``estimand/<name>``), each outcome reliability (``outcome_reliability/<key>``) and
    each declared outcome's subset slopes (``subset/<key>/<detector>``)."""
    metrics: dict[str, float | None] = {}
    tags: dict[str, str] = {}
    for m, result in record.manipulations.items():
        mm, mt = manipulation_metrics(result)
        metrics.update({f"{slug(m)}/{k}": v for k, v in mm.items()})
        tags.update({f"{slug(m).replace('/', '.')}.{k}": v for k, v in mt.items()})
    pooled = record.pooled
    put_interval(metrics, "pooled/slope_auroc", pooled.slope_auroc)
    for key, interval in pooled.partial.items():
        put_interval(metrics, f"pooled/partial/{key}", interval)
    for name, h in (("heterogeneity", pooled.heterogeneity),
                    ("heterogeneity_given_cos", pooled.heterogeneity_given_cos)):  # fmt: skip
        if h.evaluable:
            metrics[f"pooled/{name}/wald"] = h.wald
            metrics[f"pooled/{name}/p_value"] = h.p_value
    for row in pooled.ranking:
        metrics[f"pooled/rank/{row.predictor}/within_r"] = row.within_r
        metrics[f"pooled/rank/{row.predictor}/p_first"] = row.p_first
    for p, d in pooled.predictors.items():
        put_interval(metrics, f"pooled/within_r_disattenuated/{p}", d.corrected)
    if record.primary is not None:
        put_interval(metrics, "primary/slope", record.primary.slope)
        tags["identify.primary_verdict"] = record.primary.verdict
    for name, e in record.estimands.items():
        put_interval(metrics, f"estimand/{name}", e.fit)
    for key, r in record.outcome_reliability.items():
        put_interval(metrics, f"outcome_reliability/{key}", r)
    subset = record.identified.subset.outcomes if record.identified else {}
    for key, slopes in subset.items():  # each declared outcome (identify/measures.py)
        for detector, fit in slopes.slopes.items():
            put_interval(metrics, f"subset/{key}/{detector}", fit)
        put_interval(metrics, f"subset/{key}/given_dose", slopes.given_dose)
    validation = record.validation
    if validation.evaluable:
        put_interval(metrics, "validation/pooled_r", validation.pooled_r)
        if validation.within is not None:
            put_interval(metrics, "validation/within_r", validation.within.observed)
            put_interval(metrics, "validation/within_r_disattenuated", validation.within.corrected)
    between = record.between_concepts
    if between.evaluable:
        put_interval(metrics, "between/auroc_vs_effect_r", between.observed)
        put_interval(metrics, "between/auroc_vs_effect_r_disattenuated", between.corrected)
    for key, value in record.resources.model_dump().items():
        metrics[f"resources/{key}"] = float(value)
    return metrics, tags


def views(
    record: IdentifyRecord,
    tables: StudyTables,
    validation_cells: pd.DataFrame,
    phase6_frame: pd.DataFrame | None,
) -> Views:
    """What the identification study shows of its record."""
    drawn = figures(tables, record, validation_cells)
    metrics, tags = parent_metrics(record)
    files = {RunDir.DIRECTIONS: tables.directions.to_csv(index=False)}
    if len(validation_cells):
        files[RunDir.VALIDATION_CELLS] = validation_cells.to_csv(index=False)
    if phase6_frame is not None:
        files[RunDir.PHASE6_CURVE] = phase6_frame.to_csv(index=False)
    return Views(
        answer=answer_of(record, tuple(drawn)),
        summary=summary_markdown(record),
        files=files,
        figures=drawn,
        metrics=metrics,
        tags=tags,
        tables={"directions.json": tables.directions.replace({np.nan: None})},
        artefacts=(
            RunDir.CONFIG,
            RunDir.DIRECTIONS,
            RunDir.CONCEPT_SPLIT,
            RunDir.PREREGISTRATION,
            RunDir.VALIDATION_CELLS,
            RunDir.PHASE6_CURVE,
            RunDir.SELECTION,
        ),
        experiment=record.experiment,
    )


def children(record: IdentifyRecord, tables: StudyTables) -> list[ChildRun]:
    """One child run per manipulation: its curve (table and figure) and its slopes."""
    out = []
    for m, typed in record.manipulations.items():
        result = typed.model_dump(mode="json")
        metrics, tags = manipulation_metrics(typed)
        frame = tables.curve(m)
        out.append(
            ChildRun(
                key_tag="identify.manipulation",
                name=m,
                tags={"phase": "6-identify", "identify.manipulation": m, **tags},
                metrics=metrics,
                tables={
                    "curve.json": pd.DataFrame(
                        [row.model_dump(mode="json") for row in typed.curve]
                    ).replace({np.nan: None}),
                    "cells.json": frame.replace({np.nan: None}),
                },
                texts={"analysis.json": json.dumps(result, indent=1, default=str)},
                figures={
                    f"plots/{slug(m).replace('/', '_')}.png": partial(
                        manipulation_figure, m, frame, typed
                    )
                },
            )
        )
    return out
