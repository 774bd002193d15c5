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
from typing import Any

import numpy as np
import pandas as pd

from experiments.identify.answer import answer_of
from experiments.identify.cells import StudyTables
from experiments.identify.figures import figures, manipulation_figure
from experiments.identify.summary import summary_markdown
from experiments.kernel.publisher import ChildRun, Views
from experiments.record import IdentifyRecord
from experiments.rundir import RunDir


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_-./" else "_" for ch in text)


def _put(metrics: dict[str, Any], name: str, interval: dict[str, Any] | None) -> None:
    if not interval:
        return
    for key, suffix in (("estimate", ""), ("low", "/low"), ("high", "/high")):
        value = interval.get(key)
        if value is not None and np.isfinite(value):
            metrics[f"{name}{suffix}"] = float(value)


def manipulation_metrics(result: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    """Metrics and status tags of one manipulation (names without the manipulation)."""
    metrics: dict[str, float | None] = {}
    tags: dict[str, str] = {}
    _put(metrics, "slope_auroc", result["slope_auroc"])
    for key, interval in result["partial"].items():
        _put(metrics, f"partial/{key}", interval)
    med = result["mediation"]
    if med.get("evaluable"):
        for key in ("total_auroc", "direct_auroc", "cos_ref", "share_via_cos"):
            est, (low, high) = med[key]["estimate"], med[key]["interval"]
            _put(metrics, f"mediation/{key}", {"estimate": est, "low": low, "high": high})
    for m in result["minimum_effective"]:
        name = f"min_auroc/f{m['fraction']:g}"
        tags[name.replace("/", ".")] = m["status"]
        if m.get("level") is not None:
            _put(
                metrics, name, {"estimate": m["level"], "low": m.get("low"), "high": m.get("high")}
            )
    for p, d in result["predictors"].items():
        _put(metrics, f"within_r/{p}", d["observed"])
        _put(metrics, f"within_r_disattenuated/{p}", d["corrected"])
        _put(metrics, f"reliability/{p}", d["reliability_x"])
        _put(metrics, "reliability/effect", d["reliability_y"])
    mixed = result["mixed"]
    if mixed.get("evaluable"):
        for term, fit in mixed["terms"].items():
            _put(metrics, f"mixed/{term}", fit)
    return metrics, tags


def parent_metrics(analysis: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    metrics: dict[str, float | None] = {}
    tags: dict[str, str] = {}
    for m, result in analysis["manipulations"].items():
        mm, mt = manipulation_metrics(result)
        metrics.update({f"{slug(m)}/{k}": v for k, v in mm.items()})
        tags.update({f"{slug(m).replace('/', '.')}.{k}": v for k, v in mt.items()})
    pooled = analysis["pooled"]
    _put(metrics, "pooled/slope_auroc", pooled["slope_auroc"])
    for key, interval in pooled["partial"].items():
        _put(metrics, f"pooled/partial/{key}", interval)
    for name in ("heterogeneity", "heterogeneity_given_cos"):
        h = pooled[name]
        if h.get("evaluable"):
            metrics[f"pooled/{name}/wald"] = h["wald"]
            metrics[f"pooled/{name}/p_value"] = h["p_value"]
    for row in pooled["ranking"]:
        metrics[f"pooled/rank/{row['predictor']}/within_r"] = row["within_r"]
        metrics[f"pooled/rank/{row['predictor']}/p_first"] = row["p_first"]
    for p, d in pooled["predictors"].items():
        _put(metrics, f"pooled/within_r_disattenuated/{p}", d["corrected"])
    primary = analysis.get("primary")
    if primary:
        _put(metrics, "primary/slope", primary["slope"])
        tags["identify.primary_verdict"] = primary["verdict"]
    validation = analysis.get("validation") or {}
    if validation.get("evaluable"):
        _put(metrics, "validation/pooled_r", validation["pooled_r"])
        _put(metrics, "validation/within_r", validation["within"]["observed"])
        _put(metrics, "validation/within_r_disattenuated", validation["within"]["corrected"])
    between = analysis.get("between_concepts") or {}
    if between.get("evaluable"):
        _put(metrics, "between/auroc_vs_effect_r", between["observed"])
        _put(metrics, "between/auroc_vs_effect_r_disattenuated", between["corrected"])
    for key, value in (analysis.get("resources") or {}).items():
        metrics[f"resources/{key}"] = float(value)
    return metrics, tags


def views(
    record: IdentifyRecord,
    tables: StudyTables,
    validation_cells: pd.DataFrame,
    phase6_frame: pd.DataFrame | None,
) -> Views:
    """What the identification study shows of its record."""
    analysis = record.model_dump(mode="json")
    drawn = figures(tables, analysis, validation_cells)
    metrics, tags = parent_metrics(analysis)
    files = {RunDir.DIRECTIONS: tables.directions.to_csv(index=False)}
    if len(validation_cells):
        files[RunDir.VALIDATION_CELLS] = validation_cells.to_csv(index=False)
    if phase6_frame is not None:
        files[RunDir.PHASE6_CURVE] = phase6_frame.to_csv(index=False)
    return Views(
        answer=answer_of(record, tuple(drawn)),
        summary=summary_markdown(record.run_id, analysis, record.timings),
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
        metrics, tags = manipulation_metrics(result)
        frame = tables.curve(m)
        out.append(
            ChildRun(
                key_tag="identify.manipulation",
                name=m,
                tags={"phase": "6-identify", "identify.manipulation": m, **tags},
                metrics=metrics,
                tables={
                    "curve.json": pd.DataFrame(result["curve"]).replace({np.nan: None}),
                    "cells.json": frame.replace({np.nan: None}),
                },
                texts={"analysis.json": json.dumps(result, indent=1, default=str)},
                figures={
                    f"plots/{slug(m).replace('/', '_')}.png": partial(
                        manipulation_figure, m, frame, result
                    )
                },
            )
        )
    return out
