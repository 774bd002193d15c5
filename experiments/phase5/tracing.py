"""Stage: one MLflow trace per generation, with its automated scores as feedback.

It runs after scoring, because the feedback is the scores: Δ, the effect (the signed
change of Δ against the row's unsteered twin, as the v2 criteria use it) and coherence
(the v2 gate's fluency: the concept's unsteered median perplexity over the text's own,
capped at 1, and 0 for a near-empty text or an echo of the prompt). Every generation of
the run gets a trace, null-control and selection rows included, since human raters and
the judges rate those too. A steered trace carries its twins as span attributes: the
unsteered twin's text and Δ, and for a concept-arm row the random twin's (the samples
table's: text, arm, key, Δ, effect, gate and reason), so a reader of one trace sees what
entered the null. ``tracking.traces: false`` skips the stage.

A rescore replaces changed code feedback on the existing traces (MLflow keeps the old
value, marked invalid); a resume traces only the rows that have no trace yet, by the
run folder's ``traces.json`` and the traces' own key tags (a run killed between a batch
and the map file that lists it does not trace those rows twice).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pandas as pd

from experiments import tracking
from experiments.kernel.effect import UNIT, paired_effects
from experiments.kernel.gate import row_fluency
from experiments.kernel.plan import CONCEPT_ARM
from experiments.phase5.context import RunContext
from experiments.phase5.samples import random_twins
from experiments.rows import View, columns
from experiments.rundir import RunDir
from experiments.tracking.traces import (
    CODE_SOURCE_ID,
    Feedback,
    GenerationTrace,
    attach_feedback,
    keys_of_traces,
    log_generation_traces,
    read_map,
    settle_unmapped,
    write_map,
)

log = logging.getLogger(__name__)

INPUT_FIELDS = ("concept", "concept_name", "prompt", "strength", "seed", "arm", "beta", "split")
# Each feedback's metadata: the row columns declared for it (experiments.rows).
DELTA_DETAIL = columns(View.TRACE_DELTA)
COHERENCE_DETAIL = columns(View.TRACE_COHERENCE)


def _get(row: pd.Series, name: str, default: Any = None) -> Any:
    value = row.get(name, default)
    return None if isinstance(value, float) and pd.isna(value) else value


SCORES = ["delta_0", "e", "e_gated", "gate_pass", "gate_reason", "fluency"]


def _per_row_scores(
    records: pd.DataFrame, ctx: RunContext
) -> tuple[pd.DataFrame, dict[str, dict[str, object]]]:
    """Δ's twin, e, the gate and fluency per key: the effect stage's own pairing, split
    by split; and per concept-arm steered key, its random twin (the samples table's:
    ``phase5/samples.random_twins``) as span attributes."""
    parts = []
    twins: dict[str, dict[str, object]] = {}
    records = records.assign(split=records.get("split", "report"))
    for _split, rows in records.groupby("split"):
        steered = paired_effects(rows, ctx.config)
        parts.append(steered.set_index("key")[SCORES])
        twins.update(_random_twin_attributes(steered))
        base = rows[rows["strength"] == 0]
        ppl0 = base["concept"].map(base.groupby("concept")["perplexity"].median())
        broken = base["near_empty"].astype(bool) | base["is_echo"].astype(bool)
        parts.append(
            pd.DataFrame(
                {"fluency": row_fluency(base["perplexity"], ppl0, broken).to_numpy()},
                index=base["key"],
            )
        )
    return (pd.concat(parts) if parts else pd.DataFrame()), twins


def _random_twin_attributes(effects: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Per concept-arm steered key: the text, Δ, effect and gate of its random twin (the
    first random direction on the same prompt, sample and sign), what entered the null."""
    random = random_twins(effects)
    concept = effects[effects["arm"] == CONCEPT_ARM]
    out = {}
    for key, unit in zip(
        concept["key"], concept[[*UNIT, "sign"]].itertuples(index=False), strict=True
    ):
        if tuple(unit) not in random.index:
            continue
        twin = random.loc[tuple(unit)]
        out[key] = {
            "random_twin_text": twin["text"],
            "random_twin_arm": twin["arm"],
            "random_twin_key": twin["key"],
            "random_twin_delta": float(twin["delta"]),
            "random_twin_effect": float(twin["e"]),
            "random_twin_gate": "pass" if bool(twin["gate_pass"]) else "fail",
            "random_twin_gate_reason": twin["gate_reason"],
        }
    return out


def code_feedback(row: pd.Series, scores: pd.Series | None) -> list[Feedback]:
    """Δ, the effect (steered rows with a twin) and coherence of one generation."""
    out = [
        Feedback(
            "delta",
            _get(row, "delta"),
            rationale="Δ = cos(text, core centroid) − cos(text, negative centroid)",
            metadata={k: _get(row, k) for k in DELTA_DETAIL if k in row},
        )
    ]
    if scores is not None and _get(scores, "e") is not None:
        out.append(
            Feedback(
                "effect",
                _get(scores, "e"),
                rationale="sign(s) · (Δ − Δ of the unsteered twin)",
                metadata={
                    "delta_0": _get(scores, "delta_0"),
                    "e_gated": _get(scores, "e_gated"),
                    "gate_pass": bool(scores["gate_pass"]),
                    "gate_reason": _get(scores, "gate_reason") or "",
                },
            )
        )
    if scores is not None and _get(scores, "fluency") is not None:
        out.append(
            Feedback(
                "coherence",
                _get(scores, "fluency"),
                rationale="median unsteered perplexity / perplexity, capped at 1; 0 if broken",
                metadata={k: _get(row, k) for k in COHERENCE_DETAIL if k in row},
            )
        )
    return out


def _twin_texts(records: pd.DataFrame) -> dict[tuple[str, str, int, int], str]:
    """The unsteered twin's text per unit (split, concept, prompt, sample): the strength-0
    row every steered row of that unit is paired with."""
    split = records.get("split", pd.Series("report", index=records.index))
    base = records[records["strength"] == 0].assign(split=split)
    units = zip(base["split"], base["concept"], base["prompt_index"], base["sample"], strict=True)
    return dict(zip(units, base["text"], strict=True))


def _ns(row: pd.Series, name: str) -> int | None:
    value = _get(row, name)
    return None if value is None else int(value)


def trace_items(records: pd.DataFrame, ctx: RunContext) -> list[GenerationTrace]:
    scores, random = _per_row_scores(records, ctx)
    twins = _twin_texts(records)
    items = []
    for _, row in records.iterrows():
        key = row["key"]
        unit = (_get(row, "split") or "report", row["concept"], row["prompt_index"], row["sample"])
        twin = twins.get(unit) if float(row["strength"]) != 0 else None
        row_scores = scores.loc[key] if key in scores.index else None
        if isinstance(row_scores, pd.DataFrame):  # a key paired twice: use the first
            row_scores = row_scores.iloc[0]
        delta_0 = None if row_scores is None else _get(row_scores, "delta_0")
        items.append(
            GenerationTrace(
                key=key,
                inputs={f: _get(row, f) for f in INPUT_FIELDS if f in row},
                text=row["text"],
                attributes={
                    "model": ctx.model_id,
                    "layer": ctx.layer,
                    "alpha": ctx.alpha,
                    "mode": ctx.config.steering.mode,
                    "vector_source": ctx.config.steering.vector_source,
                    "n_new_tokens": _get(row, "n_new_tokens"),
                    **({"unsteered_twin_text": twin} if twin is not None else {}),
                    **({"unsteered_twin_delta": float(delta_0)} if delta_0 is not None else {}),
                    **random.get(key, {}),
                },
                tags={
                    "concept": str(row["concept"]),
                    "strength": f"{float(row['strength']):+g}",
                    "arm": str(_get(row, "arm") or "concept"),
                },
                feedback=code_feedback(row, row_scores),
                started_ns=_ns(row, "started_ns"),
                ended_ns=_ns(row, "ended_ns"),
            )
        )
    return items


def log_traces(ctx: RunContext, run_dir: RunDir, records: pd.DataFrame, rescore: bool) -> int:
    """Trace every generation without one; on a rescore also refresh the code feedback
    of existing traces. With ``tracking.evaluation`` each evaluated generation's trace
    also carries the GenAI evaluation's scorer feedback (experiments.phase5.evaluation),
    written with the trace. Returns the number of traces the run has."""
    import time

    from experiments.phase5.evaluation import scorer_items

    started = time.perf_counter()
    experiment_id = tracking.get_run(ctx.run_id).info.experiment_id
    map_file = run_dir.file(RunDir.TRACES)
    items = trace_items(records, ctx)
    if ctx.config.tracking.evaluation:
        scored = scorer_items(ctx, records)
        items = [replace(i, feedback=[*i.feedback, *scored.get(i.key, [])]) for i in items]
    known = read_map(map_file)
    # traces.json is written after each batch, so a run killed mid-batch has traces it
    # does not list: their key tags say which; those stored whole are kept (not traced
    # twice), those a crash left without their span are traced again.
    tagged = keys_of_traces(experiment_id, ctx.run_id)
    unmapped = {k: t for k, t in tagged.items() if k not in known}
    if unmapped:
        kept = settle_unmapped(experiment_id, unmapped.values())
        known = {**{k: t for k, t in unmapped.items() if t in kept}, **known}
        write_map(map_file, known)
    if rescore and known:
        feedback = {known[i.key]: i.feedback for i in items if i.key in known}
        counts = attach_feedback(experiment_id, ctx.run_id, feedback, "CODE", CODE_SOURCE_ID)
        log.info("code feedback on existing traces: %s", counts)
    before = len(known)
    mapping = log_generation_traces(experiment_id, ctx.run_id, items, map_file)
    added = len(mapping) - before
    seconds = time.perf_counter() - started
    metrics: dict[str, float | None] = {"traces/n": float(len(mapping))}
    if added:
        metrics["traces/seconds_per_generation"] = seconds / added
    tracking.log_metrics(ctx.run_id, metrics)
    return len(mapping)
