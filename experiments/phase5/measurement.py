"""Stage: how much the measures can be trusted, and the correlations corrected for it.

A cross-concept correlation between two noisy per-concept measures is attenuated by
their reliabilities: with reliabilities of 0.3–0.4 a true r of 0.4–0.5 shows as about
0.15, which cannot be told apart from "no relation". So every measure the analysis
correlates gets its split-half reliability (Spearman–Brown; random splits stratified so
each half keeps its prompts, or its classes), and each correlation is reported observed
and disattenuated, r / sqrt(rel_x · rel_y), both with concept-level intervals:

- the effect above the null (generation, per sign; units: prompt × sample);
- the specificity margin (per sign);
- the configured predictor (units: the probe's test texts, halves balanced by class);
- the likelihood outcome (per sign; units: text pairs), beside every null family;
- Δ's reference gap (units: text pairs), the scale that every effect is also given in.

Everything here reads the run folder and the record (no model), so a rescore redoes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from experiments.config import RunConfig
from experiments.kernel.effect import SIGNS, EffectReport
from experiments.phase5.nulls import null_family
from experiments.phase5.reference_gap import ReferenceGap
from experiments.record.measurement import (
    DirectionFit,
    LikelihoodFamily,
    Measurement,
    ReferenceGapSummary,
)
from experiments.rows import number as real
from metrics.intervals import (
    Bootstrap,
    Interval,
    hierarchical_margin,
    hierarchical_mean,
    not_evaluable,
    unit_mean,
)
from metrics.reliability import (
    Disattenuated,
    Reliability,
    disattenuated_correlation,
    split_half_reliability,
)
from metrics.stats import Correlation

FAMILIES = ("concept", "random", "null:neutral", "null:other")

# --------------------------------------------------------------------------- predictors


def _auroc(units: np.ndarray) -> np.ndarray:
    """AUROC per resample of (score, label, threshold) rows: the Mann–Whitney rank sum
    (ties as average ranks, as sklearn's), vectorised over resamples; NaN without both
    classes."""
    from scipy.stats import rankdata

    scores, labels = units[..., 0], units[..., 1]
    ranks = rankdata(scores, axis=-1)
    n_pos = labels.sum(axis=-1)
    n_neg = labels.shape[-1] - n_pos
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = ((ranks * labels).sum(axis=-1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), auc, np.nan)


def _per_resample(
    metric: Callable[[np.ndarray, np.ndarray, float], float],
) -> Callable[[np.ndarray], np.ndarray]:
    def aggregate(units: np.ndarray) -> np.ndarray:
        flat = units.reshape(-1, *units.shape[-2:])
        out = [metric(u[:, 0], u[:, 1], float(u[0, 2])) for u in flat]
        return np.asarray(out, dtype=np.float64).reshape(units.shape[:-2])

    return aggregate


def _ap(scores: np.ndarray, labels: np.ndarray, _threshold: float) -> float:
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(labels, scores)) if labels.sum() > 0 else np.nan


def _f1_at(use_threshold: bool) -> Callable[[np.ndarray], np.ndarray]:
    """F1 of the positive class per resample of (score, label, threshold) rows, vectorised
    over resamples: 2·TP / (2·TP + FP + FN), 0 where there is no positive label and no
    positive prediction (sklearn's ``f1_score(zero_division=0)``).

    Why not sklearn per resample: the split-half reliabilities and the disattenuated
    correlations call the aggregate on every split of every concept, about 10,000
    ``f1_score`` calls per default run (most of the measurement stage's 34 s). The counts
    are exact integers in float64 and sklearn's score is the one division
    (1 + β²)·TP / (β²·(TP + FN) + TP + FP) of them, so each value is bit for bit
    sklearn's (tests/experiments/phase5/test_measurement.py holds it to sklearn)."""

    def f1(units: np.ndarray) -> np.ndarray:
        scores, labels = units[..., 0], units[..., 1]
        cut = units[..., :1, 2] if use_threshold else 0.0  # a concept's one threshold
        predicted = scores > cut
        positive = labels == 1
        tp = (predicted & positive).sum(axis=-1).astype(np.float64)
        true_sum = positive.sum(axis=-1).astype(np.float64)
        pred_sum = predicted.sum(axis=-1).astype(np.float64)
        denom = true_sum + pred_sum
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(denom > 0, 2.0 * tp / np.where(denom > 0, denom, 1.0), 0.0)

    return f1


# How each predictor is computed from a half of the test texts (units: score, label,
# the threshold chosen on the validation split).
PREDICTOR_AGGREGATES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "auroc": _auroc,
    "ap": _per_resample(_ap),
    "f1_raw": _f1_at(False),
    "f1_calibrated": _f1_at(True),
}


def detection_units(detection: Mapping[str, Mapping[str, object]]) -> dict[str, np.ndarray]:
    """Per concept, its test texts as (decision score, label, calibrated threshold) rows."""
    out = {}
    for concept, d in detection.items():
        scores = np.asarray(d.get("test_scores") or [], dtype=np.float64)
        labels = np.asarray(d.get("test_labels") or [], dtype=np.float64)
        threshold = d.get("threshold")
        if len(scores) >= 4 and len(scores) == len(labels):
            t = np.full(len(scores), np.nan if threshold is None else real(threshold))
            out[concept] = np.stack([scores, labels, t], axis=1)
    return out


# --------------------------------------------------------------------------- the report


class _SplitOptions(TypedDict):
    """The split-half options every reliability of a run shares."""

    n_splits: int
    seed: int


@dataclass
class MeasurementReport:
    """Reliabilities, corrected correlations, the likelihood outcome and Δ's scale (the
    record's block), and what each concept adds to its per-concept row."""

    statistics: Measurement = field(default_factory=lambda: Measurement(reliability={}))
    per_concept: dict[str, dict[str, float | None]] = field(default_factory=dict)


def _units(
    frame: pd.DataFrame, column: str
) -> tuple[dict[str, np.ndarray], dict[str, list[object]]]:
    """Per concept: the column's unit values and their prompts (the split strata)."""
    units, strata = {}, {}
    for concept, group in frame.groupby("concept", sort=True):
        values = group[column].to_numpy(dtype=float)
        keep = np.isfinite(values)
        if keep.sum() >= 2:
            units[str(concept)] = values[keep]
            strata[str(concept)] = list(group["prompt_index"].to_numpy()[keep])
    return units, strata


def _likelihood_units(
    records: Sequence[dict[str, Any]], family: str, strength: float
) -> dict[str, np.ndarray]:
    """Per concept, the per-pair outcome of a family (its draws averaged pair by pair)."""
    by: dict[str, dict[int, list[float]]] = {}
    for r in records:
        if null_family(r["arm"]) == family and r["strength"] == strength:
            by.setdefault(r["concept"], {}).setdefault(int(r["pair"]), []).append(r["e"])
    return {
        c: np.array([np.mean(pairs[i]) for i in sorted(pairs)]) for c, pairs in sorted(by.items())
    }


def _of_sign(frame: pd.DataFrame, sign: int) -> pd.DataFrame:
    return frame[frame["sign"] == sign] if len(frame) else frame


def _shared(*maps: Mapping[str, Any]) -> list[str]:
    return sorted(set(maps[0]).intersection(*maps[1:]))


def measure(
    effect: EffectReport,
    config: RunConfig,
    detection: Mapping[str, Mapping[str, object]],
    likelihood: Sequence[dict[str, Any]] = (),
    gaps: Mapping[str, ReferenceGap] | None = None,
    unpaired: Mapping[str, str] | None = None,
) -> MeasurementReport:
    """Every reliability and corrected correlation of a scored run (see the module).
    ``unpaired``: concepts with no off-concept texts and why (``LikelihoodTexts.unpaired``),
    kept as ``statistics["unpaired"]``: their reference gap and likelihood contrast are
    not evaluable."""
    c = config.criteria
    opts = _SplitOptions(n_splits=c.reliability_splits, seed=config.seed)
    boot = Bootstrap(confidence=c.confidence, n_boot=c.n_boot, seed=config.seed)
    out = MeasurementReport()
    rel: dict[str, Reliability] = {}
    name = c.predictor
    x_units = detection_units(detection)
    x_strata = {k: list(v[:, 1]) for k, v in x_units.items()}
    x_agg = PREDICTOR_AGGREGATES.get(name)
    if x_agg is not None and len(x_units) >= 3:
        rel[f"predictor_{name}"] = split_half_reliability(
            x_units, strata=x_strata, aggregate=x_agg, **opts
        )
    else:
        why = (
            "the probes kept no test scores (trained before this release: retrain them with "
            "`steer-eval classifiers`)"
            if not x_units
            else f"{len(x_units)} concepts"
        )
        rel[f"predictor_{name}"] = Reliability(None, None, None, len(x_units), 0, "", why)
    corrected: dict[str, Disattenuated] = {}

    def correlate(
        key: str,
        x: Mapping[str, np.ndarray],
        y: Mapping[str, np.ndarray],
        x_strata: Mapping[str, list[object]] | None = None,
        y_strata: Mapping[str, list[object]] | None = None,
        x_aggregate: Callable[[np.ndarray], np.ndarray] = unit_mean,
    ) -> None:
        """``corrected[key]``: x against y over the concepts both have, when 3 or more do."""
        shared = _shared(x, y)
        if len(shared) >= 3:
            corrected[key] = disattenuated_correlation(
                {k: x[k] for k in shared},
                {k: y[k] for k in shared},
                x_strata=None if x_strata is None else {k: x_strata[k] for k in shared},
                y_strata=None if y_strata is None else {k: y_strata[k] for k in shared},
                x_aggregate=x_aggregate,
                **opts,
                confidence=c.confidence,
                n_boot=c.n_boot,
            )

    lk_units = {s: _likelihood_units(likelihood, "concept", s) for s in (1.0, -1.0)}
    for sign, label in SIGNS.items():
        rows = _of_sign(effect.above_null, sign)
        y_units, y_strata = _units(rows, "above_null") if len(rows) else ({}, {})
        rel[f"effect_above_null_{label}"] = split_half_reliability(y_units, strata=y_strata, **opts)
        margins = _of_sign(effect.margins, sign)
        m_units, m_strata = _units(margins, "margin") if len(margins) else ({}, {})
        rel[f"specificity_{label}"] = split_half_reliability(m_units, strata=m_strata, **opts)
        if x_agg is not None:
            correlate(f"predictor_vs_effect_{label}", x_units, y_units, x_strata, y_strata, x_agg)
        lk = lk_units[float(sign)]
        if lk:
            rel[f"likelihood_{label}"] = split_half_reliability(lk, **opts)
            if x_agg is not None:
                correlate(f"predictor_vs_likelihood_{label}", x_units, lk, x_strata, None, x_agg)
            correlate(f"likelihood_vs_effect_{label}", lk, y_units, None, y_strata)
    out.statistics = Measurement(
        reliability=rel,
        corrected_correlations=corrected,
        likelihood=_likelihood_summary(likelihood, out, boot) if likelihood else [],
        likelihood_vs_effect_by_direction=_by_direction(likelihood, effect) if likelihood else {},
        reference_gap=_reference_gap(gaps, effect, out, boot, opts) if gaps else None,
        unpaired=dict(unpaired or {}),
    )
    return out


def _likelihood_summary(
    records: Sequence[dict[str, Any]], out: MeasurementReport, boot: Bootstrap
) -> list[LikelihoodFamily]:
    """Per sign and family: the mean outcome over concepts, and the concept arm above it."""
    rows = []
    for s in sorted({r["strength"] for r in records}, reverse=True):
        label = SIGNS[int(np.sign(s))]
        concept = _likelihood_units(records, "concept", s)
        for family in FAMILIES:
            units = _likelihood_units(records, family, s)
            if not units:
                continue
            row = LikelihoodFamily(
                family=family,
                sign=label,
                mean=hierarchical_mean(units, **boot),
                n_concepts=len(units),
            )
            key = "likelihood" if family == "concept" else f"likelihood_{family}"
            column = f"{key}_{label}".replace(":", "_")
            for k, u in units.items():
                out.per_concept.setdefault(k, {})[column] = float(u.mean())
            if family != "concept":
                shared = _shared(concept, units)
                if len(shared) >= 2:
                    row.above = hierarchical_margin(
                        {k: concept[k] for k in shared},
                        {k: units[k] for k in shared},
                        paired=True,
                        **boot,
                    )
                    row.beats = int(sum(concept[k].mean() > units[k].mean() for k in shared))
            rows.append(row)
    return rows


def _by_direction(
    records: Sequence[dict[str, Any]], effect: EffectReport
) -> dict[str, DirectionFit]:
    """Across directions (each concept's own and its random ones, both measured by both
    outcomes): the likelihood outcome against the generation effect (ungated e), with a
    bootstrap over concepts (a concept's directions share its texts and prompts)."""
    from metrics.stats import clustered_pearson

    gen = effect.arm_effects
    if gen.empty:
        none = DirectionFit(r=not_evaluable("no per-arm generation effects"))
        return {label: none for label in SIGNS.values()}
    out = {}
    for sign, label in SIGNS.items():
        lk: dict[tuple[str, str], list[float]] = {}
        for r in records:
            if int(np.sign(r["strength"])) == sign:
                lk.setdefault((r["concept"], r["arm"]), []).append(r["e"])
        part = gen[gen["sign"] == sign]
        x, y, clusters = [], [], []
        for concept, arm, value in zip(part["concept"], part["arm"], part["e"], strict=True):
            if (concept, arm) in lk:
                x.append(float(np.mean(lk[(concept, arm)])))
                y.append(float(value))
                clusters.append(concept)
        if len(x) < 4:
            out[label] = DirectionFit(r=not_evaluable(f"{len(x)} directions", len(x)))
            continue
        result = clustered_pearson(np.array(x), np.array(y), clusters)
        if isinstance(result, Correlation):
            out[label] = DirectionFit(r=Interval.of(asdict(result)), p_value=result.p_value)
        else:
            out[label] = DirectionFit(r=not_evaluable(result.reason, len(x)))
    return out


def _reference_gap(
    gaps: Mapping[str, ReferenceGap],
    effect: EffectReport,
    out: MeasurementReport,
    boot: Bootstrap,
    opts: _SplitOptions,
) -> ReferenceGapSummary:
    """Δ's scale: per concept, Δ(on-concept texts) − Δ(off-concept texts); and the effect
    above the null as a fraction of it (per concept, then over concepts)."""
    units = {k: g.pair_gaps for k, g in gaps.items()}
    fraction: dict[str, Interval] = {}
    for k, g in gaps.items():
        out.per_concept.setdefault(k, {})["reference_gap"] = g.gap
    for sign, label in SIGNS.items():
        rows = _of_sign(effect.above_null, sign)
        y_units, _ = _units(rows, "above_null") if len(rows) else ({}, {})
        fractions = {
            k: v / gaps[k].gap for k, v in y_units.items() if k in gaps and gaps[k].gap > 0
        }
        if len(fractions) < 2:
            fraction[label] = not_evaluable(f"{len(fractions)} concepts")
            continue
        fraction[label] = hierarchical_mean(fractions, **boot)
        for k, v in fractions.items():
            out.per_concept.setdefault(k, {})[f"effect_fraction_of_gap_{label}"] = float(
                unit_mean(v[None])[0]
            )
    return ReferenceGapSummary(
        gap=hierarchical_mean(units, **boot),
        reliability=split_half_reliability(units, **opts),
        fraction_pos=fraction["pos"],
        fraction_neg=fraction["neg"],
    )


__all__ = ["PREDICTOR_AGGREGATES", "MeasurementReport", "detection_units", "measure"]
