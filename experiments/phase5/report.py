"""Human-facing views of a Phase 5 run, from its record: the summary markdown and the
figures (the answer and the criteria table are every phase's: ``experiments/answer.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import pandas as pd

from experiments.answer import (
    SIGN_LABELS,
    Answer,
    estimate_of,
    intervention_words,
    number,
    status_word,
)
from experiments.kernel import publisher
from experiments.kernel.effect import SIGNS
from experiments.kernel.outcomes import LIKELIHOOD, OUTCOMES, Outcome
from experiments.phase5.analyse import concept_magnitudes
from experiments.phase5.answer import answer_of
from experiments.phase5.figures import plots, reviewer_figures, specificity_figure
from experiments.record import Measurement, RunRecord, RunStatistics, steered_intervention
from experiments.rows import View, aggregates
from experiments.rundir import RunDir
from metrics.criteria import CriterionResult
from metrics.intervals import Interval

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from experiments.phase5.context import RunContext


def criteria_of(record: RunRecord, v2: bool) -> dict[str, CriterionResult]:
    """The record's seed criteria (c1-c4) or its v2 criteria, as results."""
    return {k: c.result() for k, c in record.criteria.items() if k.startswith("v2_") is v2}


def _cell(interval: Interval, shown: str = "interval") -> str:
    return number(interval.estimate, ".2f") if shown == "mean" else estimate_of(interval)


def effect_markdown(statistics: RunStatistics, criteria: dict[str, CriterionResult]) -> list[str]:
    """Every registered outcome per arm and sign with its interval, the effect above
    each null, and the v2 criteria."""
    measured = dict.fromkeys(o for arm in statistics.effect.values() for o in arm.outcomes)
    # an outcome no longer registered is shown by its name
    shown = {name: OUTCOMES.get(name) or Outcome(name) for name in measured}
    lines = [
        "",
        "## Steering effect (signed, paired with the unsteered twin; 95% cluster bootstrap)",
        "",
        "| arm / sign | n | " + " | ".join(o.label for o in shown.values()) + " | gate pass |",
        "|---|---|" + "---|" * len(shown) + "---|",
    ]
    for name, arm in sorted(statistics.effect.items()):
        cells = [_cell(arm.outcomes.get(o, Interval()), out.shown) for o, out in shown.items()]
        lines.append(
            f"| {name} | {arm.n} | " + " | ".join(cells)
            + f" | {number(arm.gate_pass_fraction, '.2f')} |"
        )  # fmt: skip
    lines += ["", "| effect above null | gated | ungated |", "|---|---|---|"]
    for name, null in sorted(statistics.above_null.items()):
        gated = null.gated or Interval()
        lines.append(f"| {name} | {_cell(gated)} | {_cell(null.ungated)} |")
    lines += [
        "",
        "## Criteria v2 (pass: interval above the threshold; fail: below; else inconclusive)",
        "",
        "| criterion | status | value | threshold | reason |",
        "|---|---|---|---|---|",
    ]
    for c in criteria.values():
        lines.append(
            f"| {c.key} | **{status_word(c.status)}** | {number(c.value)} | {c.threshold} "
            f"| {c.reason} |"
        )
    return lines


def generation_speed(tps: float) -> str:
    """The session's generation speed, or why there is none: a resumed run whose rows
    were all generated before has no speed to report (not 0 tokens/s)."""
    if tps > 0:
        return f"generation: {tps:.1f} tokens/s"
    return "generation: no rows generated in this session (all were already in the run folder)"


def summary_markdown(record: RunRecord, ctx: RunContext) -> str:
    """The run at a glance: settings, per-strength table, the seed's criteria."""
    seconds = sum(record.timings.values())
    found = steered_intervention(ctx.diagnostics)  # a vector file steered as deployed
    lines = [
        f"# Phase 5 run {record.run_id}",
        "",
        f"- model: `{ctx.config.model}`, layer {ctx.layer}, mode {ctx.config.steering.mode}, "
        f"vector {ctx.config.steering.vector_source}, β={ctx.config.steering.beta}, "
        f"α={ctx.alpha:.1f}",
        *([f"- steered {intervention_words(ctx.layer, found)}"] if found is not None else []),
        f"- {len(ctx.graph.concepts)} concepts × {len(ctx.config.generation.prompts)} prompts × "
        f"{len(ctx.config.steering.strengths)} strengths, "
        f"{ctx.config.generation.max_new_tokens} new tokens, seed {ctx.config.seed}",
        f"- {generation_speed(record.tokens_per_second)}; wall time {seconds:.1f} s",
        "",
        "",
        "## The seed's measures (mean |Δs−Δ0| magnitude and criteria, as designed)",
        "",
    ]

    shown = [agg for _column, agg in aggregates(View.SUMMARY)]
    lines.append("| strength | " + " | ".join(a.label for a in shown) + " |")
    lines.append("|---|" + "---|" * len(shown))
    agg = {float(k): v for k, v in record.per_strength.items()}
    for strength, v in sorted(agg.items()):
        lines.append(
            f"| {strength:+g} | " + " | ".join(number(v.get(a.name), ".3f") for a in shown) + " |"
        )
    lines += ["", "| criterion | status | value | threshold | reason |", "|---|---|---|---|---|"]
    for c in criteria_of(record, v2=False).values():
        lines.append(
            f"| {c.key} | **{status_word(c.status)}** | {number(c.value, '.3f')} | {c.threshold} "
            f"| {c.reason} |"
        )
    return "\n".join(lines) + "\n"


def specificity_matrices(record: RunRecord) -> dict[str, pd.DataFrame]:
    """Per sign label (pos, neg), M[steered concept, scored concept] from the record."""
    return {
        label: pd.DataFrame(cast(dict[str, Any], stored))
        for label in SIGNS.values()
        if (stored := record.diagnostics.get(f"specificity_{label}"))
    }


def summary_text(record: RunRecord, ctx: RunContext) -> str:
    """summary.md: the settings, the seed's measures and criteria, the steering effect
    and the v2 criteria, all from the record."""
    text = summary_markdown(record, ctx)
    text += "\n".join(effect_markdown(record.statistics, criteria_of(record, v2=True))) + "\n"
    measurement = record.statistics.measurement
    return text + ("\n".join(measurement_markdown(measurement)) + "\n" if measurement else "")


def _ci(interval: Interval, spec: str = "+.3f") -> str:
    """'estimate [low, high]' of an interval (or its reason when not evaluable)."""
    return estimate_of(interval, spec, status_word("not_evaluable"))


def measurement_markdown(stats: Measurement) -> list[str]:
    """Reliabilities, observed and corrected correlations, the likelihood outcome per
    null family, and Δ's scale."""
    lines = [
        "",
        "## Measurement: how reliable, and the correlations corrected for it",
        "",
        "| measure | split-half reliability (Spearman-Brown) |",
        "|---|---|",
    ]
    for name, rel in stats.reliability.items():
        shown = number(rel.estimate, ".2f") if rel.evaluable else f"not estimable ({rel.reason})"
        lines.append(f"| {name} | {shown} |")
    if stats.corrected_correlations:
        lines += [
            "",
            "| correlation across concepts | observed r | disattenuated (can exceed 1) |",
            "|---|---|---|",
        ]
        for name, d in stats.corrected_correlations.items():
            lines.append(f"| {name} | {_ci(d.observed)} | {_ci(d.corrected)} |")
        lines += [
            "",
            "Disattenuated r = r / √(rel_x · rel_y); each bootstrap replicate recomputes both "
            "reliabilities. A value or bound above 1 is the reliabilities' sampling error, left "
            "unclipped so that the interval stays honest.",
        ]
    by_direction = stats.likelihood_vs_effect_by_direction
    if by_direction:
        shown_lines: list[str] = []
        for sign, fit in by_direction.items():
            if (ends := fit.r.ends()) is not None:
                r, low, high = ends
                shown_lines.append(
                    f"{SIGN_LABELS[sign]}: r = {number(r)} [{number(low)}, {number(high)}] "
                    f"over {fit.r.n} directions in {fit.r.n_clusters} concepts"
                )
            else:
                word = status_word("not_evaluable")
                shown_lines.append(f"{SIGN_LABELS[sign]}: {word} ({fit.r.reason})")
        lines += [
            "",
            "Likelihood outcome against the generation effect across directions (each "
            "concept's own and its random directions; bootstrap over concepts): "
            + "; ".join(shown_lines)
            + ".",
        ]
    if stats.likelihood:
        lines += [
            "",
            f"{LIKELIHOOD.label}:",
            "",
            "| family | sign | mean e [CI] | concept above it [CI] | concepts beating it |",
            "|---|---|---|---|---|",
        ]
        for row in stats.likelihood:
            above = _bare(row.above) if row.above is not None else ""
            beats = f"{row.beats} / {row.n_concepts}" if row.beats is not None else ""
            lines.append(f"| {row.family} | {row.sign} | {_bare(row.mean)} | {above} | {beats} |")
    if (gap := stats.reference_gap) is not None:
        lines += [
            "",
            f"Δ's scale: the reference gap Δ(on-concept texts) − Δ(off-concept texts) is "
            f"{_bare(gap.gap)}; the effect above the null is {_ci(gap.fraction_pos, '.2f')} "
            f"of it at s > 0 and {_ci(gap.fraction_neg, '.2f')} at s < 0.",
        ]
    return lines


def _bare(interval: Interval) -> str:
    """'estimate [low, high]', n/a where a number is missing (the likelihood table's)."""
    return f"{number(interval.estimate)} [{number(interval.low)}, {number(interval.high)}]"


def figures_of(ctx: RunContext, record: RunRecord, records: pd.DataFrame) -> dict[str, Figure]:
    """The run's figures by file name, drawn from the rows and the record."""
    drawn = plots(records, ctx, concept_magnitudes(records))
    names = {c.synset: c.name for c in ctx.graph.concepts}
    drawn.update(reviewer_figures(record, names))
    for label, matrix in specificity_matrices(record).items():
        title = f"Specificity at {SIGN_LABELS[label]}"
        drawn[f"specificity_{label}.png"] = specificity_figure(matrix, title)
    return drawn


def sample_links(run_id: str) -> dict[str, str]:
    """``samples.csv`` with its address among the MLflow run's artefacts ("" when the
    run is not in the store), for the answer's link to the texts behind its verdicts."""
    from experiments import tracking

    try:
        experiment = tracking.get_run(run_id).info.experiment_id
    except LookupError:
        return {RunDir.SAMPLES: ""}
    return {RunDir.SAMPLES: tracking.ui_path(experiment, run_id, artifact=RunDir.SAMPLES)}


def write_answer(run_dir: RunDir, record: RunRecord) -> Answer:
    """``answer.md`` and ``criteria.csv`` from the record, naming the folder's figures
    and its ``samples.csv``; returns the answer. Parts B and C call it when criterion 4
    changes."""
    figures = tuple(sorted(p.name for p in run_dir.path.glob("*.png")))
    texts = sample_links(record.run_id) if run_dir.file(RunDir.SAMPLES).exists() else {}
    answer = answer_of(record, figures, texts)
    publisher.write_answer(run_dir, answer)
    return answer
