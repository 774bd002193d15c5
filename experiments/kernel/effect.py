"""Stage: the steering effect, signed, against a null, gated for coherence, with intervals.

Every steered row is paired with its unsteered twin (same concept, prompt, sample and
seed) and scored by the signed effect e = sign(s)·(Δ_s − Δ_0): positive means "moved
the way the strength points". Three corrections to the seed's |Δ_s − Δ_0| "magnitude",
which two unrelated draws already make about 0.13 on average:

- **null**: the same rows steered along random unit directions at the same α·β; the
  effect above null is e(concept) − mean e(random) on the *same* unit, a paired
  difference;
- **coherence gate**: a steered text that is near-empty, echoes its prompt, whose
  perplexity under the unsteered model exceeds a multiple of the concept's s = 0
  median, whose repetition exceeds a multiple of the unsteered texts' (a loop can be
  likely), or whose share of alphabetic words falls below a fraction of theirs (digits,
  codes and markup can be likely too) counts as e = 0 (breaking the model is not
  steering);
- **intervals**: means come with a bootstrap that resamples concepts, then units within
  them (the concept is the unit of replication), proportions with a Wilson interval,
  correlations across concepts with a bootstrap over concepts; verdicts pass only when
  the interval clears the threshold;
- **specificity**: the concept's own Δ gain minus the other concepts' on the same texts,
  a v2 criterion per sign, and the other concepts' directions as a second null.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TypedDict

import numpy as np
import pandas as pd

from experiments.answer import status_word
from experiments.config import RunConfig
from experiments.kernel.gate import (
    alphabetic_limit,
    alphabetic_shares,
    coherence_gate,
    repetition_limit,
    repetitions,
    row_fluency,
)
from experiments.kernel.gate import column as _col
from experiments.kernel.outcomes import OUTCOMES, Estimator
from experiments.kernel.plan import CONCEPT_ARM
from experiments.record import ArmEffect, CriterionInterval, NullEffect
from experiments.rows import number as real
from metrics.criteria import V2_C4, CriterionResult, combine_criterion4_v2, human_criterion_v2
from metrics.intervals import (
    Interval,
    binomial_interval,
    bootstrap_pearson,
    bootstrap_spearman,
    group_units,
    hierarchical_mean,
    interval_verdict,
    not_evaluable,
)

UNIT = ["concept", "prompt_index", "sample"]
SIGNS = {1: "pos", -1: "neg"}


def paired_effects(records: pd.DataFrame, config: RunConfig) -> pd.DataFrame:
    """One row per steered generation with its twin's Δ, e, the gate and the scores."""
    records = records.assign(
        arm=_col(records, "arm", CONCEPT_ARM),
        split=_col(records, "split", "report"),
        repetition=repetitions(records),
        alphabetic_share=alphabetic_shares(records),
    )
    base = records[records["strength"] == 0]
    twin = base[[*UNIT, "delta", "perplexity"]].rename(
        columns={"delta": "delta_0", "perplexity": "perplexity_0"}
    )
    ppl0 = base.groupby("concept")["perplexity"].median().rename("ppl0_median")
    steered = records[records["strength"] != 0].merge(twin, on=UNIT, how="inner")
    steered = steered.merge(ppl0, left_on="concept", right_index=True, how="left")
    sign = np.sign(steered["strength"]).astype(int)
    e = sign * (steered["delta"] - steered["delta_0"])
    gate, reason = coherence_gate(
        steered,
        steered["ppl0_median"],
        config,
        repetition_limit(base, config),
        alphabetic_limit(base, config),
    )
    broken = steered["near_empty"].astype(bool) | steered["is_echo"].astype(bool)
    fluency = row_fluency(steered["perplexity"], steered["ppl0_median"], broken)
    concept_score = (e / config.gate.effect_reference).clip(0, 1)
    return steered.assign(
        sign=sign,
        e=e,
        gate_pass=gate,
        gate_reason=reason.to_numpy(),  # why the gate failed the text ("" when it passed)
        e_gated=e.where(gate, 0.0),
        fluency=fluency,
        concept_score=concept_score,
        combined=np.where(
            (fluency > 0) & (concept_score > 0),
            2 * fluency * concept_score / (fluency + concept_score).replace(0, np.nan),
            0.0,
        ),
    )


def mean_ci(frame: pd.DataFrame, column: str, config: RunConfig, seed: int = 0) -> Interval:
    """The mean of ``column`` over rows with a concept-level interval: concepts are
    resampled, then units within them. Every prompt of a concept shares the concept's
    direction and its random directions, so the concept is the unit of replication; the
    (concept, prompt) clusters of earlier releases gave intervals too narrow."""
    if frame.empty:
        return not_evaluable("no rows")
    units = group_units(frame[column].to_numpy(dtype=float), list(frame["concept"]))
    if not units:
        return not_evaluable("no finite values")
    return hierarchical_mean(
        units,
        weights="units",
        confidence=config.criteria.confidence,
        n_boot=config.criteria.n_boot,
        seed=seed,
        method=f"hierarchical bootstrap, concepts then units ({config.criteria.n_boot})",
    )


def above_null(effects: pd.DataFrame, column: str = "e_gated") -> pd.DataFrame:
    """Per (unit, sign): the concept arm's effect minus the mean of the random arms'."""
    concept = effects[effects["arm"] == CONCEPT_ARM]
    random = effects[effects["arm"].str.startswith("random:")]
    if concept.empty or random.empty:
        return pd.DataFrame(columns=[*UNIT, "sign", "above_null"])
    keys = [*UNIT, "sign"]
    null = random.groupby(keys)[column].mean().rename("null")
    joined = concept.set_index(keys)[[column]].join(null, how="inner").reset_index()
    return joined.assign(above_null=joined[column] - joined["null"])


def _gains(
    rows: pd.DataFrame, records: pd.DataFrame
) -> Iterator[tuple[pd.Series, dict[str, float]]]:
    """Each concept-arm row of ``rows`` with every concept's signed Δ gain on its text:
    B → sign·(Δ_B(steered) − Δ_B(twin))."""
    base = records[records["strength"] == 0].set_index(UNIT)["delta_by_concept"]
    by_key = records.set_index("key")["delta_by_concept"]
    for _, row in rows[rows["arm"] == CONCEPT_ARM].iterrows():
        steered, twin = by_key[row["key"]], base.loc[tuple(row[k] for k in UNIT)]
        yield row, {b: row["sign"] * (v - twin[b]) for b, v in steered.items()}


def specificity(effects: pd.DataFrame, records: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Per sign: M[A, B] = mean over A's concept-arm rows of sign·(Δ_B(steered) − Δ_B(twin)).

    "Steering toward A raises A's Δ more than B's" is a large diagonal against the rest.
    """
    if "delta_by_concept" not in records.columns:
        return {}
    out = {}
    for sign in (1, -1):
        table: dict[str, dict[str, list[float]]] = {}
        for row, gains in _gains(effects[effects["sign"] == sign], records):
            for target, gain in gains.items():
                table.setdefault(row["concept"], {}).setdefault(target, []).append(gain)
        if table:
            frame = pd.DataFrame(
                {
                    a: {b: float(np.mean(v)) for b, v in targets.items()}
                    for a, targets in table.items()
                }
            ).T
            out[sign] = frame.loc[sorted(frame.index), sorted(frame.columns)]
    return out


def specificity_units(effects: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """Per concept-arm steered row: its own signed Δ gain (``own``: sign·(Δ_A − Δ_A of the
    twin), the ungated e), the mean gain of the other concepts' Δ on the same text
    (``others``) and the margin ``own − others``: does steering toward A move A more than
    it moves every concept? Empty without ``delta_by_concept``."""
    columns = [*UNIT, "sign", "own", "others", "margin"]
    if "delta_by_concept" not in records.columns:
        return pd.DataFrame(columns=columns)
    rows = []
    for row, gains in _gains(effects, records):
        own = gains.get(row["concept"])
        others = [g for b, g in gains.items() if b != row["concept"]]
        if own is None or not others:
            continue
        mean_others = float(np.mean(others))
        rows.append(
            [*row[UNIT], int(row["sign"]), float(own), mean_others, float(own) - mean_others]
        )
    return pd.DataFrame(rows, columns=columns)


def other_concept_null(margins: pd.DataFrame, matrices: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Each concept's effect above the other-concept null, per unit: its own gain
    (``margins.own``) minus what the other concepts' directions do to its Δ (the mean of
    its column of the specificity matrix, diagonal left out), per sign."""
    columns = [*UNIT, "sign", "above_other"]
    rows = []
    for sign, part in margins.groupby("sign"):
        matrix = matrices.get(int(real(sign)))
        if matrix is None:
            continue
        for concept, group in part.groupby("concept"):
            if concept not in matrix.columns:
                continue
            others = [matrix.loc[b, concept] for b in matrix.index if b != concept]
            if not others:
                continue
            null = float(np.mean(others))
            for _, r in group.iterrows():
                rows.append(
                    [concept, r["prompt_index"], r["sample"], int(real(sign)), r["own"] - null]
                )
    return pd.DataFrame(rows, columns=columns)


def specificity_margin(matrix: pd.DataFrame) -> float | None:
    """Mean over steered concepts of (own effect − mean effect on the other concepts)."""
    margins = []
    for a in matrix.index:
        others = [matrix.loc[a, b] for b in matrix.columns if b != a]
        if a in matrix.columns and others:
            margins.append(matrix.loc[a, a] - float(np.mean(others)))
    return float(np.mean(margins)) if margins else None


def slopes(records: pd.DataFrame) -> dict[str, float]:
    """Per concept, the OLS slope of Δ on strength (concept arm), when > 3 strengths ran."""
    concept = records[_col(records, "arm", CONCEPT_ARM) == CONCEPT_ARM]
    if concept["strength"].nunique() <= 3:
        return {}
    out = {}
    for synset, group in concept.groupby("concept"):
        x, y = group["strength"].to_numpy(float), group["delta"].to_numpy(float)
        if np.ptp(x) > 0:
            out[str(synset)] = float(np.polyfit(x, y, 1)[0])
    return out


def _verdict_result(
    key: str, description: str, interval: Interval, threshold: float
) -> CriterionResult:
    status = interval_verdict(interval, threshold)
    if interval.evaluable:
        clusters = (
            f" in {interval.n_clusters} clusters" if interval.n_clusters != interval.n else ""
        )
        reason = (
            f"{interval.estimate:.3f}, {interval.method} interval "
            f"[{interval.low:.3f}, {interval.high:.3f}], n = {interval.n}{clusters}"
        )
    else:
        reason = interval.reason or status_word("not_evaluable")
    return CriterionResult(key, description, status, interval.estimate, threshold, reason)


def _correlation_interval(
    pairs: list[tuple[float, float]], method: str, config: RunConfig
) -> Interval:
    if len(pairs) < 3:
        return not_evaluable(f"{len(pairs)} concepts; a correlation needs at least 3", len(pairs))
    bootstrap = bootstrap_pearson if method == "pearson" else bootstrap_spearman
    return bootstrap(
        pairs,
        confidence=config.criteria.confidence,
        n_boot=config.criteria.n_boot,
        method=f"{method} r, bootstrap over concepts",
    )


@dataclass
class EffectReport:
    """The steering effect per arm and sign, the null, the specificity and criteria v2."""

    summary: dict[str, ArmEffect] = field(default_factory=dict)  # per arm/sign
    above: dict[str, NullEffect] = field(default_factory=dict)  # per null/sign
    per_concept: dict[str, dict[str, float | None]] = field(default_factory=dict)
    criteria: dict[str, CriterionResult] = field(default_factory=dict)
    intervals: dict[str, CriterionInterval] = field(default_factory=dict)
    specificity: dict[int, pd.DataFrame] = field(default_factory=dict)
    slopes: dict[str, float] = field(default_factory=dict)
    # Per unit (concept, prompt, sample) and sign: the gated effect above the isotropic
    # null, and the specificity margin; what reliabilities and correlations are made of.
    above_null: pd.DataFrame = field(default_factory=pd.DataFrame)
    margins: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Per concept, arm and sign: the mean ungated effect (to set beside other outcomes).
    arm_effects: pd.DataFrame = field(default_factory=pd.DataFrame)


def sign_label(sign: int) -> str:
    """``s > 0`` or ``s < 0``: a sign as every view names it."""
    return f"s {'>' if sign > 0 else '<'} 0"


def all_gated(frame: pd.DataFrame, what: str) -> str | None:
    """Why a gated measure of ``frame`` is not evaluable: every one of its steered texts
    failed the coherence gate, so each gated effect is 0 by the gate and measures
    nothing; None when some text passed (or there are none)."""
    n = len(frame)
    if n == 0 or bool(frame["gate_pass"].astype(bool).any()):
        return None
    return f"every steered text at {what} was gated ({n}/{n})"


def _summarise(frame: pd.DataFrame, config: RunConfig, what: str) -> ArmEffect:
    """Every registered outcome's mean over ``frame`` (one arm and sign) with its
    concept-level interval; a gated one is not evaluable where every text was gated."""
    gated = all_gated(frame, what)
    outcomes = {}
    for name, outcome in OUTCOMES.items():
        if Estimator.MEAN not in outcome.estimators:
            continue
        ci = mean_ci(frame, name, config)
        outcomes[name] = _gated(ci, gated) if outcome.gated else ci
    return ArmEffect(
        n=len(frame),
        outcomes=outcomes,
        gate_pass_fraction=float(frame["gate_pass"].mean()) if len(frame) else None,
        direction_fraction=(
            float((frame["e_gated"] > 0).mean()) if len(frame) and not gated else None
        ),
        gated_reason=gated or "",
    )


def _gated(ci: Interval, reason: str | None) -> Interval:
    """``ci``, or not evaluable for ``reason`` (every text gated) where there is one."""
    return not_evaluable(reason, ci.n, ci.n_clusters, ci.method) if reason else ci


def _add_criterion(
    out: EffectReport,
    key: str,
    description: str,
    ci: Interval,
    threshold: float,
    spearman: Interval | None = None,
) -> None:
    """Record criterion ``key``'s verdict on ``ci`` and its interval (Spearman beside)."""
    result = _verdict_result(key, description, ci, threshold)
    if spearman is not None and spearman.evaluable:
        result = replace(
            result,
            reason=f"{result.reason}; Spearman {spearman.estimate:.3f} "
            f"[{spearman.low:.3f}, {spearman.high:.3f}]",
        )
    out.criteria[key] = result
    out.intervals[key] = CriterionInterval(**asdict(ci), spearman=spearman)


def evaluate_effect(
    records: pd.DataFrame, predictor: Mapping[str, float], config: RunConfig
) -> EffectReport:
    """Everything about the steering effect on the report rows, and criteria v2."""
    report_rows = records[_col(records, "split", "report") == "report"]
    effects = paired_effects(report_rows, config)
    computed = {name: o.values(effects) for name, o in OUTCOMES.items() if o.values is not None}
    if computed:  # outcomes read from other columns; the rest are paired_effects' own
        effects = effects.assign(**computed)
    out = EffectReport(slopes=slopes(report_rows))
    for arm_name, arm_rows in effects.groupby(
        np.where(effects["arm"].str.startswith("random:"), "random", effects["arm"])
    ):
        for sign, rows in arm_rows.groupby("sign"):
            what = sign_label(int(real(sign))) + (
                "" if str(arm_name) == CONCEPT_ARM else f" ({arm_name})"
            )
            out.summary[f"{arm_name}/{SIGNS[int(real(sign))]}"] = _summarise(rows, config, what)
    null = above_null(effects)
    null_raw = above_null(effects, "e")
    for sign, label in SIGNS.items():
        rows = null[null["sign"] == sign]
        raw = null_raw[null_raw["sign"] == sign]
        concept_rows = effects[(effects["arm"] == CONCEPT_ARM) & (effects["sign"] == sign)]
        # Every steered text of the sign gated: its gated effect, direction and their
        # correlation are 0 by the gate, measured on nothing; not evaluable, and why.
        gated = all_gated(concept_rows, sign_label(sign))
        ci = _gated(mean_ci(rows, "above_null", config), gated)
        ci_raw = mean_ci(raw, "above_null", config)
        out.above[f"above_null/{label}"] = NullEffect(n=len(rows), gated=ci, ungated=ci_raw)
        # Direction: the fraction of pairs whose gated effect is positive.
        k = int((concept_rows["e_gated"] > 0).sum())
        direction = binomial_interval(k, len(concept_rows), config.criteria.confidence)
        _add_criterion(
            out,
            f"v2_direction_{label}",
            f"{sign_label(sign)}: fraction of pairs moved the right way (gated)",
            _gated(direction, gated),
            config.criteria.direction_min_fraction,
        )
        _add_criterion(
            out,
            f"v2_effect_above_null_{label}",
            f"{sign_label(sign)}: gated effect above random directions",
            ci,
            config.criteria.effect_min,
        )
        per_concept = rows.groupby("concept")["above_null"].mean() if len(rows) else pd.Series()
        for synset, value in per_concept.items():
            out.per_concept.setdefault(str(synset), {})[f"above_null_{label}"] = float(value)
        for synset, value in concept_rows.groupby("concept")["e_gated"].mean().items():
            out.per_concept.setdefault(str(synset), {})[f"effect_{label}"] = float(value)
        pairs = [(predictor[str(k)], float(v)) for k, v in per_concept.items() if k in predictor]
        _add_criterion(
            out,
            f"v2_predictor_vs_effect_{label}",
            f"{sign_label(sign)}: predictor → effect above null across concepts "
            "(Pearson; Spearman beside it)",
            _gated(_correlation_interval(pairs, "pearson", config), gated),
            config.criteria.f1_r_min,
            _gated(_correlation_interval(pairs, "spearman", config), gated),
        )
    out.specificity = specificity(effects, report_rows)
    out.above_null = null
    out.arm_effects = effects.groupby(["concept", "arm", "sign"])["e"].mean().reset_index()
    out.margins = specificity_units(effects, report_rows)
    other = other_concept_null(out.margins, out.specificity)
    for sign, label in SIGNS.items():
        margins = out.margins[out.margins["sign"] == sign]
        # Ungated, but about steering: where the gate failed every steered text of the
        # sign, the margin compares the concepts' Δ on broken text; not evaluable, and why.
        gated = all_gated(
            effects[(effects["arm"] == CONCEPT_ARM) & (effects["sign"] == sign)], sign_label(sign)
        )
        _add_criterion(
            out,
            f"v2_specificity_{label}",
            f"{sign_label(sign)}: specificity margin, the concept's own Δ gain "
            "minus the other concepts' on the same texts (ungated)",
            _gated(mean_ci(margins, "margin", config), gated),
            config.criteria.specificity_min,
        )
        for synset, value in margins.groupby("concept")["margin"].mean().items():
            out.per_concept.setdefault(str(synset), {})[f"specificity_{label}"] = float(value)
        ci = mean_ci(other[other["sign"] == sign], "above_other", config)
        out.above[f"above_null_other_concepts/{label}"] = NullEffect(n=ci.n, gated=None, ungated=ci)
    # Criterion 4 v2 waits for Parts B and C (experiments.validation.criterion4).
    human = human_criterion_v2(None, pass_r=config.criteria.human_r_pass)
    out.criteria[V2_C4] = combine_criterion4_v2(human)
    return out


class BetaChoice(TypedDict):
    """A concept's held-out β (``selection.json``): the chosen β and the mean gated
    effect at every β of the grid it was chosen from."""

    beta: float
    effects: dict[float, float]


def select_betas(records: pd.DataFrame, config: RunConfig) -> dict[str, BetaChoice]:
    """Held-out strength selection: per concept, the β of the grid whose gated effect
    (concept arm, both signs pooled) is largest on the *selection* prompts; ties go to
    the smaller β."""
    rows = records[_col(records, "split", "report") == "selection"]
    effects = paired_effects(rows, config)
    effects = effects[effects["arm"] == CONCEPT_ARM]
    out: dict[str, BetaChoice] = {}
    for synset, group in effects.groupby("concept"):
        means = {real(b): float(g["e_gated"].mean()) for b, g in group.groupby("beta")}
        best = max(sorted(means), key=lambda b: (means[b], -b))
        out[str(synset)] = BetaChoice(beta=best, effects=means)
    return out
