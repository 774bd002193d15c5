"""Phase 5's answer, from its record alone (:class:`experiments.answer.Answer`).

:func:`answer_of` reads the :class:`~experiments.record.RunRecord` alone, so the terminal
after ``run`` and ``rescore``, ``--json``, the MLflow descriptions, ``answer.md`` and
``criteria.csv`` all say the same thing. It holds:

- the research question, with the run's predictor, model and concept count;
- every v2 verdict (each criterion key starting ``v2_``, so criteria added later appear
  without a change here), grouped per sign, with value, interval
  (``record.statistics.intervals``), threshold and status; the question's two verdicts
  per sign make the headline;
- the prompting baseline's gated effect per sign, when the run had that arm;
- below them, the seed design's four criteria, labelled as the original design's.
"""

from __future__ import annotations

from dataclasses import replace

from experiments.answer import (
    SIGN_LABELS,
    Answer,
    DirectionOrigin,
    Verdict,
    direction_origin,
    estimate_of,
    intervention_words,
)
from experiments.kernel.layer_table import answer_table, undistinguished
from experiments.kernel.outcomes import OUTCOMES
from experiments.kernel.plan import CONCEPT_ARM
from experiments.record import ArmEffect, RunRecord, steered_intervention
from experiments.record.phase5 import NO_INTERVAL
from experiments.rows import number as real
from metrics.criteria import C1_DIRECTION
from metrics.intervals import Interval, interval_verdict

V2_PREFIX = "v2_"
# Suffix of a per-sign criterion key -> the sign it is about.
SIGN_SUFFIXES = {"_pos": "pos", "_neg": "neg"}
# Known v2 criteria: a short label, in the order a reader wants them (the question first).
# A key not listed here is labelled from its name and listed after these.
KNOWN_V2 = {
    "predictor_vs_effect": "predictor → effect above null (r)",
    "effect_above_null": "effect above null (gated)",
    "direction": "moved the right way (share)",
    "c4_human_or_panel": "humans or panel agree with Δ",
}
# The v2 criteria whose value is a share of texts (in [0, 1], read against its threshold).
SHARES = frozenset({"direction"})
# The headline's two verdicts per sign: what each claims, and what its value is.
CLAIMS = {
    "predictor_vs_effect": ("the predictor predicts the effect", "r = "),
    "effect_above_null": ("the effect above random directions clears its threshold", ""),
}
SEED_LABEL = (
    "The original design's criteria (the seed's four: point values without intervals; "
    "criterion 3 correlates ten or fewer concepts and is mostly noise)"
)
BASELINE_KEY = "prompt_baseline_{sign}"


def split_key(key: str) -> tuple[str, str]:
    """(base name without ``v2_`` and sign suffix, sign) of a criterion key."""
    base = key.removeprefix(V2_PREFIX)
    for suffix, sign in SIGN_SUFFIXES.items():
        if base.endswith(suffix):
            return base.removesuffix(suffix), sign
    return base, "both"


def _rank(key: str) -> tuple[int, int]:
    base, sign = split_key(key)
    known = list(KNOWN_V2)
    sign_rank = {"pos": 0, "neg": 1, "both": 2}[sign]
    return sign_rank, known.index(base) if base in known else len(known)


def origin(record: RunRecord) -> DirectionOrigin:
    """Where the run's directions came from, in the answer's words."""
    return direction_origin(record.config.steering.vector_source, record.config.criteria.predictor)


def question(record: RunRecord) -> str:
    n = len(record.per_concept) or len(record.predictors)
    words = origin(record)
    # at layer N, or a vector file's deployed intervention in full (layers, scale, k)
    where = intervention_words(record.layer, steered_intervention(record.diagnostics))
    return (
        f"Does {words.quality} predict how strongly steering {words.steering} moves the "
        "model's text toward the concept, beyond random directions? Per sign of the "
        f"strength; {n} concepts, {record.model_id} {where}."
    )


def verdicts(record: RunRecord) -> list[Verdict]:
    """Every v2 criterion of the record with its interval, per sign, the question first."""
    intervals = record.statistics.intervals
    keys = sorted((k for k in record.criteria if k.startswith(V2_PREFIX)), key=_rank)
    out = []
    for key in keys:
        c = record.criteria[key]
        base, sign = split_key(key)
        stored = intervals.get(key)
        interval = stored or NO_INTERVAL
        claim, symbol = CLAIMS.get(base, ("", ""))
        n, units = resampled(stored)
        beside = {"effect_above_null": null_gate, "direction": direction_beside}.get(base)
        out.append(
            Verdict(
                key=key,
                label=KNOWN_V2.get(base, base.replace("_", " ")),
                group=SIGN_LABELS[sign],
                interval=Interval(
                    c.value, interval.low, interval.high, method=interval.method, reason=c.reason
                ),
                status=c.status,
                threshold=c.threshold,
                n=n,
                units=units,
                description=c.description,
                claim=claim,
                symbol=symbol,
                sign=sign,
                share=base in SHARES,
                beside=beside(record, sign) if beside else "",
            )
        )
    return out


def _passing(arm: ArmEffect | None) -> str:
    """``k/n (p%)`` of an arm's texts passing the gate (its effect summary)."""
    if arm is None or arm.gate_pass_fraction is None or not arm.n:
        return ""
    return f"{round(arm.gate_pass_fraction * arm.n)}/{arm.n} ({arm.gate_pass_fraction:.0%})"


def null_gate(record: RunRecord, sign: str) -> str:
    """What the effect above the null stands on, beside it: how many of the random
    directions' texts (the null) passed the coherence gate, against the concept's. A
    null text the gate fails counts as e = 0, one it passes with its Δ; so a null that
    passes gibberish can move the effect above it either way."""
    effect = record.statistics.effect
    null = _passing(effect.get(f"random/{sign}"))
    if not null:
        return ""
    concept = _passing(effect.get(f"concept/{sign}"))
    return f"null texts passing the gate {null}" + (f", concept texts {concept}" if concept else "")


def direction_beside(record: RunRecord, sign: str) -> str:
    """What a share of texts moved the right way is read against, since a share is never
    below 0: the random directions' share at the same sign, and why it differs from the
    seed's criterion 1 (this counts a gated text as not moved, per sign; c1 counts every
    steered text of both signs by its Δ shift, gated or not)."""
    arm = record.statistics.effect.get(f"random/{sign}")
    random = arm.direction_fraction if arm is not None else None
    c1 = record.criteria.get(C1_DIRECTION)
    parts = [f"random directions {random:.2f}" if random is not None else ""]
    if c1 is not None and c1.value is not None:
        parts.append(
            f"a gated text counts as not moved, unlike in the seed's c1 ({c1.value:.3f}: "
            "every steered text, both signs)"
        )
    return "; ".join(p for p in parts if p)


def resampled(interval: Interval | None) -> tuple[int | None, str]:
    """How many of what the interval rests on: concepts when concepts were resampled
    (a hierarchical bootstrap, or a correlation over concepts), else the samples; None
    when the criterion has no interval."""
    if interval is None:
        return None, "samples"
    n, clusters = interval.n, interval.n_clusters
    if (clusters and n and clusters < n) or "concepts" in interval.method:
        return clusters or n, "concepts"
    return n, "samples"


def _reference(
    record: RunRecord, arm: str, outcome: str, sign: str
) -> tuple[Interval, ArmEffect] | None:
    """An arm's outcome at ``sign`` with its interval, when the run measured it."""
    summary = record.statistics.effect.get(f"{arm}/{sign}")
    if summary is None or outcome not in summary.outcomes:
        return None
    return summary.outcomes[outcome], summary


def baseline_verdicts(record: RunRecord) -> list[Verdict]:
    """The prompting baseline's gated effect per sign (a reference row: steering by
    instruction instead of a vector), against the effect threshold, when it ran."""
    threshold = record.config.criteria.effect_min
    out = []
    for sign in ("pos", "neg"):
        if (found := _reference(record, "prompt", "e_gated", sign)) is None:
            continue
        measured, arm = found
        interval = Interval(measured.estimate, measured.low, measured.high, arm.n, 0, "pairs")
        out.append(
            Verdict(
                key=BASELINE_KEY.format(sign=sign),
                label="prompting baseline: gated effect (reference)",
                group=SIGN_LABELS[sign],
                interval=replace(interval, method="pairs resampled", reason=arm.gated_reason),
                status=interval_verdict(interval, threshold),
                threshold=threshold,
                n=interval.n,
                units="pairs",
                description="the effect of asking for the concept in the prompt instead of "
                "steering (controls.prompt_baseline)",
                sign=sign,
            )
        )
    return out


def outcome_verdicts(record: RunRecord) -> list[Verdict]:
    """Each registered outcome with ``answer`` words (``kernel/outcomes.py``): the
    concept arm's mean per sign, concepts resampled, against the effect threshold (a
    reference row, as the prompting baseline's)."""
    threshold = record.config.criteria.effect_min
    out = []
    for name, outcome in OUTCOMES.items():
        if outcome.answer is None:
            continue
        for sign in ("pos", "neg"):
            if (found := _reference(record, CONCEPT_ARM, name, sign)) is None:
                continue
            interval = found[0]
            out.append(
                Verdict(
                    key=f"outcome_{name}_{sign}",
                    label=f"{outcome.answer} (reference)",
                    group=SIGN_LABELS[sign],
                    interval=interval,
                    status=interval_verdict(interval, threshold),
                    threshold=threshold,
                    n=interval.n_clusters or interval.n,
                    units="concepts",
                    description=f"the concept arm's {outcome.label} (kernel/outcomes.py)",
                    sign=sign,
                )
            )
    return out


def seed_verdicts(record: RunRecord) -> list[Verdict]:
    """The seed's criteria (c1-c4), without intervals (the seed design had none)."""
    return [
        Verdict(
            key=key,
            label=c.description,
            group=SIGN_LABELS["both"],
            interval=Interval(c.value, reason=c.reason),
            status=c.status,
            threshold=c.threshold,
            description=c.description,
        )
        for key, c in sorted(record.criteria.items())
        if not key.startswith(V2_PREFIX)
    ]


def reader_notes(record: RunRecord) -> list[str]:
    """What a reader must know before trusting a per-concept number: concepts whose
    steered texts the gate failed at a sign (their effect, exactly 0, measures nothing
    but enters the correlation) and degenerate detectors (probes, or imported vectors:
    their F1 has no detector behind it). The figures mark the same concepts."""
    from experiments.phase5.per_concept import degenerate_probes

    notes = []
    for sign, label in (("pos", "s > 0"), ("neg", "s < 0")):
        gated = [
            f"{synset} ({int(real(v[f'gated_out_{sign}']))}/{int(real(v[f'steered_{sign}']))})"
            for synset, v in sorted(record.per_concept.items())
            if v.get(f"steered_{sign}") and v.get(f"gated_out_{sign}") == v[f"steered_{sign}"]
        ]
        if gated:
            notes.append(
                f"At {label}, every steered text of {len(gated)} concept(s) failed the "
                f"coherence gate: {', '.join(gated)}; their gated effect is 0 by the gate, "
                "not measured (the figures draw them hollow at 0, without an interval), yet "
                "their effect above null (0 minus the random directions' mean) enters r."
            )
    flags = degenerate_probes(record.predictors, record.config.criteria.predictor)
    if flags:
        notes.append(
            f"Degenerate {origin(record).detector}(s) as detectors, whose "
            f"{record.config.criteria.predictor} says little about the concept: "
            + "; ".join(f"{k}: {why}" for k, why in flags.items())
            + "."
        )
    if corrected := corrected_note(record):
        notes.append(corrected)
    if unpaired := unpaired_note(record):
        notes.append(unpaired)
    if record.layer_choice is not None and (warning := undistinguished(record.layer_choice)):
        notes.append(f"Layer {record.layer_choice.rule}: {warning} (the table below).")
    return notes


def unpaired_note(record: RunRecord) -> str:
    """What a concept with no other concept's texts to pair with (one concept alone) could
    not be evaluated for, and why; empty when every concept paired."""
    measurement = record.statistics.measurement
    unpaired = measurement.unpaired if measurement is not None else {}
    if not unpaired:
        return ""
    what = "Δ's reference gap (Δ's scale)"
    if record.config.likelihood.enabled:
        what += " and the likelihood outcome with its nulls"
    why = "; ".join(reason for _, reason in sorted(unpaired.items()))
    return (
        f"Not evaluable for {', '.join(sorted(unpaired))}: {what}, which contrast a "
        f"concept's texts with other concepts' texts ({why}). Evaluated: the generation "
        "effect against random directions, its gate, and the criteria above."
    )


CORRECTED_LABEL = "corrected for unreliability (disattenuated; can exceed 1)"


def corrected_note(record: RunRecord) -> str:
    """The predictor's correlation with the effect above null corrected for both
    measures' unreliability, per sign, where the run measured it: r / √(rel_x · rel_y),
    whose value and bounds can exceed 1 (the reliabilities' sampling error, unclipped)."""
    measurement = record.statistics.measurement
    corrected = measurement.corrected_correlations if measurement is not None else {}
    parts = []
    for sign in ("pos", "neg"):
        if (pair := corrected.get(f"predictor_vs_effect_{sign}")) is not None:
            parts.append(f"{SIGN_LABELS[sign]} {estimate_of(pair.corrected)}")
    if not parts:
        return ""
    return f"predictor → effect above null (r), {CORRECTED_LABEL}: " + "; ".join(parts) + "."


def answer_of(
    record: RunRecord, figures: tuple[str, ...] = (), texts: dict[str, str] | None = None
) -> Answer:
    """The answer block of a run, from its record alone; ``figures`` and ``texts`` (the
    folder's ``samples.csv`` with its MLflow address) are the files it links."""
    return Answer(
        notes=reader_notes(record),
        phase="phase5",
        run_id=record.run_id,
        question=question(record),
        confidence=record.config.criteria.confidence,
        verdicts=[*verdicts(record), *baseline_verdicts(record), *outcome_verdicts(record)],
        seed=seed_verdicts(record),
        seed_label=SEED_LABEL,
        figures=figures,
        texts=dict(texts or {}),
        tables=[answer_table(record.layer_choice)] if record.layer_choice is not None else [],
    )
