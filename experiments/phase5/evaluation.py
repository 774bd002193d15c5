"""Stage: the run's steered generations in MLflow's GenAI evaluation views.

Each report-split generation steered along its concept's direction is scored by MLflow
code scorers that read what this run already computed (no model call, no new number;
the feedback is written with the generation's trace, and this stage links the traces
to the evaluation run and logs its means: experiments/tracking/evaluation.py; the run
is opened and closed by the kernel's publisher, ``open_child`` / ``close_child``):
whether it passed the coherence gate, whether it moved the way
the strength points (gated effect > 0, the unit of ``v2_direction_*``) and its effect
above the random-direction null on the same unit (the unit of
``v2_effect_above_null_*``). Each scorer is split by the sign of the strength
(``moved_as_steered_pos``, ``..._neg``) and scores only its sign's generations, so the
evaluation run's means are those criteria's estimates (``moved_as_steered_pos/mean`` is
``v2_direction_pos``'s), never a pool of both signs that matches no criterion.
``tracking.evaluation: false`` (or ``tracking.traces: false``) skips it.

MLflow's judges (``make_judge``, built-in LLM scorers) are not used here: the rows are
scored by code, and the LLM judges of Part C keep their own implementation
(``judges/``, whose package docstring says why).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from experiments import tracking
from experiments.kernel.effect import UNIT, above_null, paired_effects
from experiments.kernel.plan import CONCEPT_ARM
from experiments.kernel.publisher import close_child, open_child
from experiments.phase5.context import RunContext
from experiments.rundir import RunDir
from experiments.tracking.evaluation import (
    EVALUATION_TAG,
    RUN_NAME,
    link_evaluation,
    scorer_feedback,
)
from experiments.tracking.traces import Feedback, trace_map

MEASURES = {
    "gate_pass": "the text passed the coherence gate (not near-empty, no echo, perplexity "
    "within the gate's multiple of the concept's unsteered median, repetition within the "
    "gate's multiple of the unsteered texts', a share of alphabetic words no lower than "
    "the gate's fraction of theirs)",
    "moved_as_steered": "sign(s)·(Δ − Δ of the unsteered twin) > 0 after the gate",
    "effect_above_null": "gated effect minus the mean gated effect of the random "
    "directions on the same concept, prompt and sample",
}
SIGN_LABELS = {1: ("pos", "s > 0"), -1: ("neg", "s < 0")}
# One scorer per measure and sign: a generation is scored by its own sign's scorers only.
SCORERS = {
    f"{name}_{label}": f"{text} ({where}; the unit of the sign's criterion)"
    for name, text in MEASURES.items()
    for label, where in SIGN_LABELS.values()
}


def evaluation_run(ctx: RunContext) -> str:
    """The parent's evaluation child run, made on first use and left open until
    :func:`log_evaluation` closes it (a resume finds it by its tag)."""
    tags = {EVALUATION_TAG: "genai", "phase": "5"}
    return open_child(ctx.run_id, ctx.config.experiment, RUN_NAME, tags, key_tag=EVALUATION_TAG)


def evaluation_values(records: pd.DataFrame, ctx: RunContext) -> dict[str, dict[str, object]]:
    """Per generation key (report split, concept arm, steered): the scorers' values."""
    split = records.get("split", pd.Series("report", index=records.index))
    effects = paired_effects(records[split == "report"], ctx.config)
    concept = effects[effects["arm"] == CONCEPT_ARM]
    null = above_null(effects)
    joined = concept.merge(null[[*UNIT, "sign", "above_null"]], on=[*UNIT, "sign"], how="left")
    out: dict[str, dict[str, object]] = {}
    for _, row in joined.iterrows():
        label = SIGN_LABELS[int(row["sign"])][0]
        values: dict[str, object] = {
            f"gate_pass_{label}": bool(row["gate_pass"]),
            f"moved_as_steered_{label}": bool(row["e_gated"] > 0),
        }
        if pd.notna(row["above_null"]):
            values[f"effect_above_null_{label}"] = float(row["above_null"])
        out[str(row["key"])] = values
    return out


def _same_sign(name: str) -> set[str]:
    """The scorer names of ``name``'s sign (a generation carries its own sign's only)."""
    label = name.rsplit("_", 1)[1]
    return {f"{measure}_{label}" for measure in MEASURES}


def _plan(records: pd.DataFrame, ctx: RunContext) -> tuple[dict[str, Any], dict[str, str]]:
    """The scorers' values per generation key, and the scorers that run: those whose
    sign has generations, every one of them with a value."""
    values = evaluation_values(records, ctx)
    names = [
        n
        for n in SCORERS
        if any(n in v for v in values.values())
        and all(n in v for v in values.values() if set(v) & _same_sign(n))
    ]
    return values, {n: SCORERS[n] for n in names}


def scorer_items(ctx: RunContext, records: pd.DataFrame) -> dict[str, list[Feedback]]:
    """Per generation key, the scorers' feedback its trace carries (the traces stage
    writes it with the trace); opens the evaluation child run it names."""
    values, descriptions = _plan(records, ctx)
    return scorer_feedback(evaluation_run(ctx), values, descriptions) if values else {}


def log_evaluation(ctx: RunContext, run_dir: RunDir, records: pd.DataFrame) -> dict[str, float]:
    """Close the run's evaluation child over its traces (their scorer feedback came with
    them); returns the metrics (``gate_pass_pos/mean`` ...), also logged on the parent as
    ``evaluation/...``."""
    values, descriptions = _plan(records, ctx)
    if not values:
        return {}
    experiment_id = tracking.get_run(ctx.run_id).info.experiment_id
    ids = trace_map(experiment_id, ctx.run_id, run_dir.file(RunDir.TRACES))
    child = evaluation_run(ctx)
    metrics = link_evaluation(child, ids, values, descriptions)
    close_child(child)
    tracking.log_metrics(ctx.run_id, {f"evaluation/{k}": v for k, v in metrics.items()})
    return metrics
