"""Stage: the criteria report, from scored generations to cells, aggregates and criteria.

Pure functions of a records table (generations joined with their scores), so they are
tested without a model and rerun identically on resume and rescore.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.config import CriteriaConfig
from experiments.rows import cell_metrics as cell_metrics  # also imported from here
from experiments.rows import number as real
from metrics.criteria import (
    CriterionResult,
    direction_criterion,
    f1_criterion,
    human_criterion,
    magnitude_criterion,
)
from metrics.stats import Correlation, NotEvaluable, pearson

PAIR_KEYS = ["concept", "prompt_index", "sample"]


def strength_label(strength: float) -> str:
    """A metric-name-safe label: -1.0 -> 'neg1.0', 0.0 -> '0.0', 0.5 -> 'pos0.5'."""
    if strength == 0:
        return "0.0"
    return f"{'pos' if strength > 0 else 'neg'}{abs(strength):g}" + (
        ".0" if float(abs(strength)).is_integer() else ""
    )


def add_paired_shifts(records: pd.DataFrame) -> pd.DataFrame:
    """Δ_s − Δ_0 per row, paired by concept, prompt and sample (NaN where no baseline)."""
    baseline = records[records["strength"] == 0.0][[*PAIR_KEYS, "delta"]].rename(
        columns={"delta": "delta_0"}
    )
    out = records.drop(
        columns=[c for c in ("delta_0", "shift", "magnitude", "direction") if c in records.columns]
    )
    out = out.merge(baseline, on=PAIR_KEYS, how="left")
    out["shift"] = out["delta"] - out["delta_0"]
    out["magnitude"] = out["shift"].abs()
    out["direction"] = np.sign(out["shift"])
    # NaN where there is nothing to judge: the baseline itself, or a row without a baseline.
    out["moved_as_expected"] = np.where(
        (out["strength"] == 0) | out["shift"].isna(),
        np.nan,
        (np.sign(out["strength"]) * out["shift"]) > 0,
    )
    return out


def per_strength(records: pd.DataFrame) -> dict[float, dict[str, float | None]]:
    """Every declared aggregate (experiments.rows) per strength, over all concepts."""
    return {real(strength): cell_metrics(group) for strength, group in records.groupby("strength")}


def concept_magnitudes(records: pd.DataFrame, at: float | None = None) -> dict[str, float]:
    """Mean steering magnitude per concept over steered rows (or only |s| == at)."""
    steered = records[records["strength"] != 0]
    if at is not None:
        steered = steered[np.isclose(steered["strength"].abs(), at)]
    means = steered.groupby("concept")["magnitude"].mean().dropna()
    return {str(k): float(v) for k, v in means.items()}


@dataclass
class CriteriaReport:
    results: dict[str, CriterionResult]
    f1_correlation: Correlation | NotEvaluable

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([r.to_dict() for r in self.results.values()])


def evaluate_criteria(
    records: pd.DataFrame,
    f1_by_concept: dict[str, float],
    cfg: CriteriaConfig,
    human: Correlation | NotEvaluable | None = None,
) -> CriteriaReport:
    """The seed's four success criteria; criterion 4 is pending until Part B or C."""
    steered = records[(records["strength"] != 0) & records["shift"].notna()]
    c1 = direction_criterion(
        steered["strength"].to_numpy(), steered["shift"].to_numpy(), cfg.direction_min_fraction
    )
    c2 = magnitude_criterion(
        steered["strength"].to_numpy(),
        steered["magnitude"].to_numpy(),
        at=cfg.magnitude_at,
        min_magnitude=cfg.magnitude_min,
    )
    magnitudes = concept_magnitudes(records, at=cfg.magnitude_at)
    if not magnitudes:
        magnitudes = concept_magnitudes(records)
    c3 = f1_criterion(f1_by_concept, magnitudes, min_r=cfg.f1_r_min, predictor=cfg.predictor)
    shared = sorted(set(f1_by_concept) & set(magnitudes))
    corr = pearson([f1_by_concept[k] for k in shared], [magnitudes[k] for k in shared])
    c4 = human_criterion(human, pass_r=cfg.human_r_pass, panel_r=cfg.human_r_panel)
    return CriteriaReport({r.key: r for r in (c1, c2, c3, c4)}, corr)


def criteria_metrics(criteria: dict[str, CriterionResult]) -> dict[str, float | None]:
    """Pass/fail as 1/0 (only when evaluable), with the measured value beside it; the
    thresholds are settings, logged as parameters (:func:`criteria_thresholds`)."""
    out: dict[str, float | None] = {}
    for key, result in criteria.items():
        out[f"criterion/{key}"] = result.metric_value()
        out[f"criterion/{key}/value"] = result.value
    return out


def criteria_thresholds(criteria: dict[str, CriterionResult], prefix: str = "") -> dict[str, float]:
    """Each criterion's threshold, for MLflow parameters (``criterion/<key>/threshold``)."""
    return {
        f"{prefix}criterion/{key}/threshold": result.threshold
        for key, result in criteria.items()
        if result.threshold is not None
    }
