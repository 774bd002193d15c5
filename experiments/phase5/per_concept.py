"""Per-concept numbers with their own intervals: what the reviewer's figures plot.

The v2 criteria pool concepts; a reader's first question is how each concept sits. Two
intervals answer it:

- **y, the effect above null**: a concept's mean of (concept-arm gated effect − mean
  random-arm gated effect) over its report units, with a cluster bootstrap over its
  prompts (the units of one prompt share a prompt, so they are not independent). It is
  stored in the record's ``per_concept`` as ``above_null_<sign>_low`` / ``_high`` /
  ``_n`` beside the mean the effect stage already put there.
- **x, the predictor**: F1 (calibrated or raw) with a stratified bootstrap over the
  probe's test texts, rebuilt from the record's recall, accuracy and class counts
  (F1 depends on the texts only through the confusion counts). AUROC and AP have no
  interval here yet (the record's ``detection`` now keeps the per-text scores they need).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from experiments.config import RunConfig
from experiments.kernel.effect import SIGNS, above_null, paired_effects
from experiments.kernel.plan import CONCEPT_ARM
from experiments.rows import number as real
from metrics.intervals import clustered_bootstrap_mean
from metrics.stats import bootstrap_f1


def concept_intervals(
    records: pd.DataFrame, config: RunConfig
) -> dict[str, dict[str, float | None]]:
    """Per concept and sign: the effect above null's interval over the concept's report
    units, clustered by prompt (``above_null_<sign>_low``, ``_high``, ``_n``), and how many
    of its steered texts the gate failed (``gated_out_<sign>`` of ``steered_<sign>``)."""
    rows = records[records.get("split", pd.Series("report", index=records.index)) == "report"]
    if rows.empty or "arm" not in rows.columns:
        return {}
    effects = paired_effects(rows, config)
    null = above_null(effects)
    out: dict[str, dict[str, float | None]] = {}
    # How many of the concept's steered texts the coherence gate failed: a concept whose
    # texts all failed has an effect of exactly 0 that measures nothing (figures draw it
    # hollow, with "k/n gated").
    concept = effects[effects["arm"] == CONCEPT_ARM]
    for (synset, sign), group in concept.groupby(["concept", "sign"], sort=True):
        label = SIGNS[int(real(sign))]
        cell = out.setdefault(str(synset), {})
        cell[f"gated_out_{label}"] = float((~group["gate_pass"].astype(bool)).sum())
        cell[f"steered_{label}"] = float(len(group))
    for (synset, sign), group in null.groupby(["concept", "sign"], sort=True):
        label = SIGNS[int(real(sign))]
        ci = clustered_bootstrap_mean(
            group["above_null"].to_numpy(dtype=float),
            list(group["prompt_index"]),
            confidence=config.criteria.confidence,
            n_boot=config.criteria.n_boot,
        )
        cell = out.setdefault(str(synset), {})
        cell[f"above_null_{label}_low"] = ci.low
        cell[f"above_null_{label}_high"] = ci.high
        cell[f"above_null_{label}_n"] = float(ci.n)
    return out


# Predictor name -> the suffix of the probe metrics F1 was computed from.
F1_SUFFIX = {"f1_calibrated": "calibrated", "f1_raw": "raw"}


def predictor_interval(
    metrics: Mapping[str, float | None], name: str, confidence: float = 0.95, n_boot: int = 2000
) -> tuple[float | None, float | None]:
    """(low, high) of a concept's predictor over its probe's test texts, or (None, None)
    where the record cannot give one (AUROC, AP; a record without the counts)."""
    suffix = F1_SUFFIX.get(name)
    if suffix is None:
        return None, None
    recall = metrics.get(f"recall_{suffix}")
    accuracy = metrics.get(f"accuracy_{suffix}")
    n_pos, n_neg = metrics.get("n_test_pos"), metrics.get("n_test_neg")
    if recall is None or accuracy is None or n_pos is None or n_neg is None:
        return None, None
    tp = round(recall * n_pos)
    tn = round(accuracy * (n_pos + n_neg)) - tp
    fn, fp = round(n_pos) - tp, round(n_neg) - tn
    if min(tp, tn, fn, fp) < 0:  # counts that do not add up: no interval rather than a wrong one
        return None, None
    result = bootstrap_f1(tp, fn, fp, tn, confidence=confidence, n_boot=n_boot)
    if not result.evaluable:
        return None, None
    return result.low, result.high


# Below this AUROC a probe ranks the concept's texts worse than chance.
AUROC_CHANCE = 0.5


def degenerate_probe(metrics: Mapping[str, float | None], name: str) -> str | None:
    """Why a concept's probe is degenerate, or None: its AUROC is below chance, or at
    the predictor's threshold it predicts one class for every test text (an "everything
    positive" probe has F1 = 2p/(1+p) at class balance p, 0.667 at 1:1, and says nothing
    about the concept). The predictor's F1 is then a number without a detector behind it."""
    reasons = []
    auroc = metrics.get("auroc")
    if auroc is not None and auroc < AUROC_CHANCE:
        reasons.append(f"AUROC {auroc:.2f} < {AUROC_CHANCE:g}")
    suffix = F1_SUFFIX.get(name, "calibrated")
    recall, precision = metrics.get(f"recall_{suffix}"), metrics.get(f"precision_{suffix}")
    accuracy = metrics.get(f"accuracy_{suffix}")
    n_pos, n_neg = metrics.get("n_test_pos"), metrics.get("n_test_neg")
    if recall is not None and accuracy is not None and n_pos is not None and n_neg is not None:
        tp = round(recall * n_pos)
        tn = round(accuracy * (n_pos + n_neg)) - tp
        predicted_positive = tp + round(n_neg) - tn
        if predicted_positive == round(n_pos + n_neg):
            detail = f"precision {precision:.2f}, recall {recall:.2f}" if precision else ""
            reasons.append(f"predicts every test text positive ({detail})".replace(" ()", ""))
        elif predicted_positive == 0:
            reasons.append("predicts every test text negative")
    return "; ".join(reasons) or None


def degenerate_probes(
    predictors: Mapping[str, Mapping[str, float | None]], name: str
) -> dict[str, str]:
    """Per concept whose probe is degenerate (:func:`degenerate_probe`), why."""
    return {
        synset: reason
        for synset, metrics in sorted(predictors.items())
        if (reason := degenerate_probe(metrics, name))
    }
